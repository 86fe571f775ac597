"""How well a checkpoint fits a model under each naming, which naming to load it by, and the
error that says why none fits.

A naming fits when, after its rules, every tensor of the model is there with its shape (or is
one the naming keeps), and nothing is left over. When none fits, the closest is the naming
under which the largest share of the checkpoint's tensors carry names the model has (the key
overlap); the error lists what is missing, left over or of the wrong shape under it, and its
hint lists every naming tried with its overlap.

One mismatch is forgiven, as timm forgives it: the classifier's. Built for another number of
classes than the checkpoint's (`--set classes=10`, create_model(num_classes=10)), the model
keeps its freshly initialised classifier and loads every other tensor; the Fit lists what was
left (`new_classifier`) and says so. Which tensors are the classifier comes from the head op's
CLASSIFIER (compiler/facts.py, read by load.py), never from a name. A classifier missing from
the checkpoint (a headless one) is left new only where the caller asked for a classifier of its
own (create_model's num_classes); elsewhere it stays an error, as any other mismatch: a
classifier nobody trained must not pass for the checkpoint's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from archspec.core.errors import SpecError, error

from .naming import Naming
from .rules import Lacking

MAX_LISTED = 8
ABSENT = " (not in the checkpoint)"  # a new_classifier entry: the checkpoint is headless
MAX_REFUSED = 3  # refusing rules named in an error


@dataclass
class Fit:
    naming: str  # the naming's name
    state: dict  # the checkpoint in our naming
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    wrong_shape: list[str] = field(default_factory=list)
    wrong_keys: list[str] = field(default_factory=list)  # the wrong_shape tensors' names (ours)
    clashes: list[str] = field(default_factory=list)  # names two tensors were mapped to
    kept: list[str] = field(default_factory=list)  # ours, absent from the checkpoint by design
    resampled: list[str] = field(default_factory=list)  # made for another size or window, resampled to ours
    matched: int = 0  # tensors of the checkpoint whose (mapped) name the model has
    file: str | None = None  # the naming's mapping file
    created: list[str] = field(default_factory=list)  # ours, made by the mapping's create rules
    dropped_learned: list[str] = field(default_factory=list)  # the checkpoint's, learned, left out by drop rules
    near_copies: dict[str, str] = field(default_factory=dict)  # a dropped one -> a kept one of its shape the model ties
    new_classifier: list[str] = field(default_factory=list)  # ours, left at their initialisation: other classes
    notes: list[str] = field(default_factory=list)  # what the load summary also says (a shipped mapping file taken)
    passed_over: list[str] = field(default_factory=list)  # a user's mapping file not used, and why
    refused: list[str] = field(default_factory=list)  # the mapping's rules that matched a tensor and could not apply
    reshapeable: list[str] = field(default_factory=list)  # wrongly shaped, with the model's number of values
    permuted: list[str] = field(default_factory=list)  # wrongly shaped, the model's sizes in another order
    square: list[str] = field(default_factory=list)  # ours, beside a permuted one, fitting either order
    untied: list[tuple[str, str]] = field(default_factory=list)  # (missing head weight, loaded embedding table)
    dropped_alike: dict[str, list] = field(default_factory=dict)  # a dropped learned one -> kept ones of its shape
    tied_extra: list[tuple[str, str, bool]] = field(default_factory=list)  # (unexpected head weight, table, equal?)
    shifted: dict[str, float] = field(default_factory=dict)  # ours, to which an affine rule added a number
    offset_twice: list[str] = field(default_factory=list)  # a shifted weight whose norm adds an offset too

    def resampled_words(self) -> str:
        """What was resampled, and how (the load line's and from_pretrained's words)."""
        return (f"resampled {len(self.resampled)} to this model's size as timm's loading does (position tables "
                f"bicubic with antialias, relative-position tables on BEiT's grid: {listing(self.resampled)})")

    @property
    def problems(self) -> int:
        return len(self.missing) + len(self.unexpected) + len(self.wrong_shape) + len(self.clashes)

    @property
    def overlap(self) -> float:
        """The share of the checkpoint's (mapped) tensors whose names the model has."""
        return self.matched / len(self.state) if self.state else 0.0

    def share(self) -> str:
        """The overlap in words, never rounded up to all: `280 of 281 (99.6%)`."""
        percent = math.floor(self.overlap * 1000) / 10
        return f"{self.matched} of {len(self.state)} ({percent:g}%)"

    def summary(self) -> str:
        text = f"{len(self.state)} tensors in {self.naming} naming"
        if self.kept:
            text += f"; kept initial values of {len(self.kept)} ({listing(self.kept)})"
        if self.resampled and not self.resampled_elsewhere():  # else said among the warnings
            text += "; " + self.resampled_words()
        if self.created:
            text += f"; created {len(self.created)} ({listing(self.created)})"
        if self.new_classifier:
            text += f"; {self.classifier_note}"
        for note in self.notes:
            text += f"; {note}"
        for warning in self.warnings:
            text += f"; warning: {warning}"
        return text

    @property
    def warnings(self) -> list[str]:
        """What the load did that may not be meant: learned tensors the mapping dropped, a rule
        that matched a tensor and could not apply to it (the CodeGen trial's permute of a view
        that did not fit, silently skipped), a mapping file the user gave left unused, an offset
        added by both the mapping and the norm."""
        dropped = [f"the mapping dropped {len(self.dropped_learned)} learned tensor(s) of the checkpoint "
                   f"(floating point, not named like a buffer the model rebuilds; a buffer among them is no loss): "
                   f"{listing(self.dropped_learned)}{self.near_copy_words()}"] if self.dropped_learned else []
        refused = [f"{why}, and the load went on with it so (the checkpoint fits the model's shapes all the "
                   "same: check that the rule is needed)" for why in self.refused if not isinstance(why, Lacking)]
        return dropped + refused + self.passed_over + self.offset_twice + self.resampled_elsewhere()

    def resampled_elsewhere(self) -> list[str]:
        """A resample of a checkpoint not in timm's naming (or ours): its own model may resize
        another way (the DINOv2 trial: Hugging Face's Dinov2Model resizes without antialias, its
        registers model with it; 1.2e-2 to 4.5e-2 off, said on the Python logger only)."""
        if not self.resampled or self.naming == "archspec" or self.naming.startswith("timm"):
            return []
        return [f"{self.resampled_words()}, and the checkpoint's naming is '{self.naming}': its own model may "
                "resize another way, at each forward (Hugging Face's Dinov2Model and VitDet resize without "
                "antialias: 1e-2 to 0.1 off); to resize as it does, keep the table at its own size and resize it "
                "in the graph (`resize` with its antialias option)"]

    def near_copy_words(self) -> str:
        """What a dropped tensor of a kept one's shape, with other values, means: a head the
        checkpoint does not tie (the ERNIE and Cohere2 trials were told only "dropped")."""
        if not self.near_copies:
            return ""
        dropped, kept = next(iter(self.near_copies.items()))
        return (f"; {dropped} has the shape of the kept {kept}, which the model ties to another tensor (an lm "
                f"head's `tie:`), and other values: the checkpoint's own head is lost and the logits differ; a head "
                f"of its own is `head: {{kind: lm, vocab: ...}}` with {dropped} mapped to it")

    @property
    def classifier_note(self) -> str | None:
        """One line on the classifier left at its initialisation (None: it was loaded)."""
        if not self.new_classifier:
            return None
        absent = any(entry.endswith(ABSENT) for entry in self.new_classifier)
        why = "the checkpoint has none" if absent else "the checkpoint's is for another number of classes"
        return (f"left the classifier at its initialisation ({listing(self.new_classifier)}): {why}, so this one "
                f"is new, to be fine-tuned (as timm's num_classes)")

    def details(self) -> str:
        """What does not fit: missing, unexpected, wrongly shaped and clashing tensors."""
        parts = []
        for items, what in ((self.missing, "missing"), (self.unexpected, "unexpected"),
                            (self.wrong_shape, "with the wrong shape"), (self.clashes, "mapped to twice")):
            if items:
                parts.append(f"{len(items)} {what} ({listing(items)})")
        if self.refused:  # why a tensor kept its checkpoint name or shape
            more = len(self.refused) - MAX_REFUSED
            parts.append("; ".join(self.refused[:MAX_REFUSED]) + (f" (and {more} more)" if more > 0 else ""))
        return "; ".join(parts)


def listing(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def shared_names(ours: dict) -> dict[str, set[str]]:
    """For each of the model's tensors, the other names of the same tensor (a tied embedding
    table is the embed's and the lm head's): loading one of them loads all."""
    by_tensor: dict[tuple, list[str]] = {}
    for key, value in ours.items():
        by_tensor.setdefault((value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape)),
                             []).append(key)
    return {key: set(keys) - {key} for keys in by_tensor.values() for key in keys}


def fit_under(naming: Naming, state: dict, ours: dict, resample: dict | None = None,
              classifier: frozenset[str] = frozenset(), classifier_may_be_absent: bool = False) -> Fit:
    """How `state` (a checkpoint in `naming`) fits the model whose state dict is `ours`;
    `resample` (resample.py) brings tensors made for another size or window to ours;
    `classifier` names the model's classifier tensors, whose shape may differ (left new), and
    which, with `classifier_may_be_absent` (create_model's num_classes given), may be missing
    from the checkpoint (a headless one, as timm's num_classes=0 saves: left new too)."""
    converted = naming.convert(state, ours)
    fit = Fit(naming.name, dict(converted.state), clashes=converted.clashes, file=naming.file,
              created=converted.created, dropped_learned=converted.dropped_learned, refused=converted.refused,
              shifted=converted.shifted)
    resize_to_model(fit, ours, resample or {})
    others = shared_names(ours)
    fit.dropped_alike = converted.near_copies
    fit.near_copies = {dropped: tied[0] for dropped, kept in converted.near_copies.items()
                       if (tied := [key for key in kept if others.get(key)])}  # the model ties that one
    for key, value in ours.items():
        if key not in fit.state and others[key] & fit.state.keys():
            continue  # loaded through another name of the same tensor
        if key not in fit.state and key in classifier and classifier_may_be_absent:
            fit.new_classifier.append(f"{key}{ABSENT}")
        elif key not in fit.state:
            (fit.kept if naming.keeps(key) else fit.missing).append(key)
        elif tuple(fit.state[key].shape) != tuple(value.shape):
            if key in classifier:
                fit.new_classifier.append(f"{key} {tuple(fit.state[key].shape)} -> {tuple(value.shape)}")
            else:
                fit.wrong_shape.append(f"{key} {tuple(fit.state[key].shape)} (model has {tuple(value.shape)})")
                fit.wrong_keys.append(key)
                if sorted(fit.state[key].shape) == sorted(value.shape):
                    fit.permuted.append(key)  # the same sizes in another order: a reshape would scramble it
                elif fit.state[key].numel() == value.numel():
                    fit.reshapeable.append(key)
    fit.square = square_siblings(fit.permuted, ours)
    leave_classifier_new(fit, classifier)
    fit.untied = untied_heads(fit, ours)
    fit.unexpected = [k for k in fit.state if k not in ours]
    fit.tied_extra = tied_head_weights(fit, ours)
    fit.matched = len(fit.state) - len(fit.unexpected)
    return fit


def untied_heads(fit: Fit, ours: dict) -> list[tuple[str, str]]:
    """Missing lm head weights with an embedding table of their shape that the checkpoint gives:
    a reference that ties them stores one (the SmolLM3 trial's head left untied was told only
    '1 missing')."""
    tables = {tuple(ours[k].shape): k for k in fit.state if k in ours and k.endswith(".tokens.weight")}
    return [(key, tables[tuple(ours[key].shape)]) for key in fit.missing
            if key.endswith(".fc.weight") and tuple(ours[key].shape) in tables]


def tied_head_weights(fit: Fit, ours: dict) -> list[tuple[str, str, bool]]:
    """(key, table, equal) for each unexpected lm head weight `<head>.fc.weight` of a head the
    model has no tensor of (tied to a table, `tie:`) with a table of its shape loaded: the
    StableLM trial's mapping kept a tied checkpoint's lm_head.weight and was told '1 unexpected'."""
    tables = {tuple(fit.state[k].shape): k for k in fit.state if k in ours and k.endswith(".tokens.weight")}
    found = []
    for key in fit.unexpected:
        head = key.rsplit(".fc.weight", 1)[0]
        if not key.endswith(".fc.weight") or any(k.startswith(head + ".fc.") for k in ours):
            continue
        table = tables.get(tuple(fit.state[key].shape))
        if table is not None:
            found.append((key, table, bool(torch.equal(fit.state[key], fit.state[table]))))
    return found


def head_hints(near: Fit) -> str:
    """The hint's words on an lm head and its table: untied and missing (tie it, or map the
    tensor of its shape the mapping dropped), or tied with the checkpoint's head weight left over."""
    hint = ""
    for head, table in near.untied:
        node = head.rsplit(".fc.weight", 1)[0]
        dropped = [key for key, kept in near.dropped_alike.items() if table in kept]
        if dropped:
            hint += (f"; {head} is missing, and the mapping dropped {dropped[0]}, of its shape: map it to {head} "
                     f"(a `rename`) instead of dropping it; or, if the reference ties the head to its table "
                     f"(tie_word_embeddings), say `tie: {table.rsplit('.tokens.weight', 1)[0]}` on the head '{node}'")
        else:
            hint += (f"; {head} is missing and has the shape of {table}: if the reference ties them "
                     f"(tie_word_embeddings), say `tie: {table.rsplit('.tokens.weight', 1)[0]}` on the head '{node}'")
    for key, table, equal in near.tied_extra:
        node = key.rsplit(".fc.weight", 1)[0]
        hint += (f"; the head '{node}' is tied to {table} (`tie:`) and has no weight of its own, and the checkpoint "
                 + ("gives one equal to the table (a tied checkpoint's copy): drop it in the mapping (a `drop` rule "
                    "of its name)" if equal else
                    f"gives one of the table's shape with other values (it does not tie them): give the head "
                    f"`vocab:` in place of `tie:`, with {key} mapped to it"))
    return hint


def leave_classifier_new(fit: Fit, classifier: frozenset[str]) -> None:
    """When a classifier tensor's shape differs from the checkpoint's, none of the classifier's
    tensors is loaded (its weight and bias stay one fresh layer, as timm drops them)."""
    if not fit.new_classifier:
        return
    listed = {entry.split(" ", 1)[0] for entry in fit.new_classifier}
    for key in sorted(classifier):
        if fit.state.pop(key, None) is not None and key not in listed:
            fit.new_classifier.append(f"{key} (with the rest of the classifier)")


def resize_to_model(fit: Fit, ours: dict, resample: dict) -> None:
    """Resample the tensors whose shape differs from the model's where a resampler knows how."""
    for key, fn in resample.items():
        value = fit.state.get(key)
        if value is None or key not in ours or tuple(value.shape) == tuple(ours[key].shape):
            continue
        try:
            resized = fn(value)
        except ValueError:
            continue  # not a table it can resample: reported as a wrong shape
        if tuple(resized.shape) == tuple(ours[key].shape):
            fit.resampled.append(f"{key} {tuple(value.shape)} -> {tuple(resized.shape)}")
            fit.state[key] = resized


def best_fit(state: dict, ours: dict, namings: list[Naming], resample: dict | None = None,
             classifier: frozenset[str] = frozenset(), classifier_may_be_absent: bool = False,
             users_gave_a_mapping: bool = False, shapes_hint=None) -> Fit:
    """The first naming (in the order given) under which `state` fits; else an error naming the
    closest one (its hint for a user who gave a mapping file asks to mend it, for one who did
    not to give one; `shapes_hint(fit)`, where given, adds what would give the closest fit's
    wrong shapes). `classifier`, `classifier_may_be_absent`: fit_under's."""
    fits, not_tried = [], []
    for naming in namings:
        if naming.applies_to(state):
            fits.append(fit_under(naming, state, ours, resample, classifier, classifier_may_be_absent))
        else:
            not_tried.append(naming)
    for fit in fits:
        if not fit.problems:
            return fit
    raise no_fit(fits, not_tried, users_gave_a_mapping, shapes_hint)


def closest(fits: list[Fit]) -> Fit:
    """The fit with the largest key overlap (then the most tensors matched; then the first)."""
    return max(fits, key=lambda f: (f.overlap, f.matched))


def square_siblings(permuted: list[str], ours: dict) -> list[str]:
    """The model's tensors in the same module as a permuted one whose last two axes are of one
    size, so that a transposed order loads without a word (an expert fc1 [E, 2I, H] with 2I = H
    beside its permuted fc2)."""
    parents = {key.rsplit(".", 2)[0] for key in permuted}
    return [key for key, value in ours.items() if key not in permuted and key.rsplit(".", 2)[0] in parents
            and value.dim() >= 2 and value.shape[-1] == value.shape[-2]]


def no_fit(fits: list[Fit], not_tried: list[Naming], users_gave_a_mapping: bool = False,
           shapes_hint=None) -> SpecError:
    near = closest(fits)
    ranked = sorted(fits, key=lambda f: (-f.overlap, -f.matched))
    hint = ("namings tried (of the checkpoint's tensors each naming keeps, after its renames and drops, those the "
            "model has): " + ", ".join(f"{f.naming} {f.share()}" for f in ranked))
    if not_tried:
        hint += "; not tried, the checkpoint lacks the keys that identify them: " + ", ".join(n.name for n in not_tried)
    hint += head_hints(near)
    if near.permuted:
        holds = "holds" if len(near.permuted) == 1 else "hold"
        hint += (f"; {listing(near.permuted)} under {near.naming} {holds} the model's sizes with the axes in another "
                 "order (a transposed layout: experts_layout, or a linear stored [in, out]?): a `permute` rule "
                 "(`dims: [0, 2, 1]`) or `transpose` reorders them; a `reshape` would load the values scrambled")
        square = near.square
        if square:
            one = len(square) == 1
            hint += (f"; {listing(square)} beside them {'is' if one else 'are'} square, so {'its' if one else 'their'} "
                     "shape cannot show a transposed order: a layout option of the spec (the mlp's `experts_layout`) "
                     "fixes all of them, a `permute` of the ones named above leaves the square ones transposed")
    if near.reshapeable:
        holds = "holds" if len(near.reshapeable) == 1 else "hold"
        hint += (f"; {listing(near.reshapeable)} under {near.naming} {holds} the model's number of values in another "
                 "shape: a `reshape` rule turns a tensor into the model's shape (a Conv3d weight into a linear's)")
    options = shapes_hint(near) if shapes_hint is not None and near.wrong_keys else None
    if options:
        hint += f"; {options}"
    hint += "; was the checkpoint made for this spec and its params? "
    hint += ("Mend your mapping file's rules (see specs/mappings/README.md)" if users_gave_a_mapping else
             "For another naming, give a mapping file (--map FILE; see specs/mappings/README.md)")
    shaped = f", {len(near.wrong_shape)} of them in another shape" if near.wrong_shape else ""
    return error(f"weights do not fit this model (closest naming: {near.naming}, under which {near.share()} of "
                 f"the checkpoint's tensors have the model's names{shaped}): {near.details()}", hint=hint)
