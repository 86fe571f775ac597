"""Loading a checkpoint into a built model: which namings to try, and copying the tensors in.

The namings tried, in order: any mapping file the user gives (`--map FILE`: asked for, it comes
first), archspec's own (the model's state-dict names), then those of the mapping files the spec
names under `mappings:`. The first under which the checkpoint fits is loaded; if none fits, the
error names the closest (fit.py). A user's file that another naming was loaded instead of is a
warning of the load (it says why: the checkpoint lacks the keys that identify it, or what does
not fit under it). The classifier alone may differ in shape (a model built for
another number of classes, as timm's num_classes): it stays at its initialisation and the Fit
says so; which tensors are the classifier, the model's head says (`classifier_tensors`).

The dtype policy, checked on the tensors that land in the model (after mapping; a reference
checkpoint's other tensors may be anything its mapping drops):
- where the model has floating point, the checkpoint must too: float16, bfloat16, float32 and
  float64 are converted to the model's dtype; an integer, boolean or complex tensor is an
  error (it would be cast silently, and never was a trained weight);
- where the model has an integer buffer, the checkpoint must have integers;
- floating tensors must be finite once converted to the model's dtype (a float64 beyond float32's
  range would load as infinity): NaN or infinity is an error, unless ARCHSPEC_ALLOW_NAN=1
  (or allow_nan=True) asks to load them anyway, for debugging a diverged run.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

import torch

from archspec.language.compose import compose
from archspec.language.loader import load_file
from archspec.language.mapping_sources import MappingSource, as_error, mapping_sources

from archspec.core.errors import SpecError, error

from .checkpoint import listing, read_state_dict, source_name
from .fit import Fit, best_fit, fit_under, shared_names
from .rules import Fuse, KeyProblem
from .mapping_file import read_mapping_file
from .naming import ARCHSPEC, Naming
from .resample import resamplers
from .shape_options import option_hint


ALLOW_NAN = "ARCHSPEC_ALLOW_NAN"  # =1: load NaN and infinite values (for debugging)


def load_weights(model: torch.nn.Module, source, graph=None, mappings: Iterable[str | os.PathLike] = (),
                 allow_nan: bool | None = None, params: dict | None = None,
                 classifier_may_be_absent: bool = False) -> Fit:
    """Load `source` (a checkpoint file or a state dict) into `model`, in place; the Fit says
    under which naming, and its `warnings` what may not be meant (learned tensors dropped).

    `graph` is the checked spec's IR (its `mappings` are the spec's mapping files); without it,
    they are read from the spec file the model was built from. `mappings` are more mapping
    files (a user's `--map`), tried first. `params` are the spec's params that
    `${...}` in a mapping file reads (default: the graph's, else the spec file's own values).
    `allow_nan` (default: the environment's ARCHSPEC_ALLOW_NAN=1) loads non-finite values
    instead of refusing them. `classifier_may_be_absent`: a checkpoint without the model's
    classifier loads, the classifier left new (fit.fit_under; create_model's num_classes)."""
    state = read_state_dict(source)
    ours = model.state_dict()
    namings = namings_to_try(model, graph, list(mappings), spec_params(model, graph, params))
    try:
        fit = namings.best_fit(state, ours, guarded(resamplers(model)), classifier_tensors(model, ours),
                               classifier_may_be_absent, lambda near: option_hint(graph, near.state, near.wrong_keys))
    except KeyProblem as exc:
        raise key_problem(exc, source_name(source)) from None
    check_dtypes(fit, ours, source_name(source))
    check_gate_order(fit, namings.namings, graph)
    fit.offset_twice = offsets_added_twice(model, fit.shifted)
    values = converted(fit, ours)
    check_one_value_per_tensor(values, ours, source_name(source))
    if not (allow_nan if allow_nan is not None else os.environ.get(ALLOW_NAN, "") not in ("", "0")):
        check_finite(values, source_name(source))
    with torch.no_grad():
        for key, value in model.state_dict().items():
            if key in values:
                value.copy_(values[key])
    return fit


GATE_WORDS, VALUE_WORDS = {"gate", "w1"}, {"up", "w3"}  # which half of a gated MLP's fc1 a fused part is:
# gate_proj and up_proj, or Meta's w1 (gate) and w3 (up) (Llama's original checkpoints, Mixtral, LFM2)


def gate_role(part: str) -> str | None:
    """"gate" or "value" where one word of the part's name says so (gate_proj, up_proj, w1, w3), else None."""
    words = set(re.split(r"[^a-z0-9]+", part.lower()))
    roles = {"gate"} if words & GATE_WORDS else set()
    roles |= {"value"} if words & VALUE_WORDS else set()
    return roles.pop() if len(roles) == 1 else None


def check_gate_order(fit: Fit, namings: list[Naming], graph) -> None:
    """A located error where the loaded naming fuses a gated MLP's gate and up projections in the
    order no gated `mlp` of the spec holds them (gate_layout halves: [gate; up]; value_first:
    [up; gate]): the halves have one shape, so [up_proj, gate_proj] loaded without a word (the
    Pixtral trial's MLP, 2.6e-2 off)."""
    naming = next((n for n in namings if n.name == fit.naming), None)
    if naming is None or graph is None:
        return
    layouts = {node.params.gate_layout for node in graph.nodes()
               if not node.is_input and node.op.primitive == "mlp" and getattr(node.params, "gated", False)}
    for rule in naming.rules:
        roles = [gate_role(part) for part in rule.parts] if isinstance(rule, Fuse) else []
        if sorted(map(str, roles)) != ["gate", "value"] or not layouts:
            continue  # not a gated MLP's two halves, or no gated mlp to hold them
        gate_first = roles[0] == "gate"
        if "interleaved" in layouts:
            continue  # GPT-OSS: one fused tensor, read as it is
        if (gate_first and "halves" in layouts) or (not gate_first and "value_first" in layouts):
            continue  # an mlp of the spec holds them in this order
        held = "[up; gate] (gate_layout: value_first)" if gate_first else "[gate; up] (gate_layout: halves, the default)"
        raise error(f"fuse: `parts` [{', '.join(rule.parts)}] put the {'gate' if gate_first else 'up projection'} "
                    f"first, and the spec's gated mlp holds fc1's rows as {held}", rule.where,
                    hint=f"write parts: [{', '.join(reversed(rule.parts))}] (an mlp whose reference computes "
                         f"act(the second half) * the first: gate_layout: {'halves' if gate_first else 'value_first'})")


def offsets_added_twice(model: torch.nn.Module, shifted: dict[str, float]) -> list[str]:
    """Warnings for the weights an affine rule added a number to whose norm scales by `offset +
    weight` itself (norm_offset, qk_norm_offset): Gemma's w -> 1 + w done by the mapping and by
    the spec both, a scale of 2 + w (the Gemma 2 trial loaded such a model silently). One
    warning per (number added, offset), listing the weights."""
    found: dict[tuple, list[str]] = {}
    for key, added in shifted.items():
        owner, _, name = key.rpartition(".")
        offset = getattr(model.get_submodule(owner) if owner else model, "offset", 0.0)
        if name == "weight" and isinstance(offset, (int, float)) and offset:
            found.setdefault((added, offset), []).append(key)
    return [f"the mapping's affine rule adds {added:g} to {len(keys)} norm weight(s) ({listing(keys)}) whose norm "
            f"scales by {offset:g} + weight itself (the spec's norm_offset): they scale by {offset + added:g} + w; keep "
            "one of the two (a checkpoint storing w loads as it is into a norm with norm_offset)"
            for (added, offset), keys in found.items()]


def key_problem(exc: KeyProblem, name: str) -> SpecError:
    """A checkpoint key a computed rename cannot be evaluated for: the error names the checkpoint
    and the key first, then (if the evaluation failed) where in the mapping file it did."""
    key = exc.key if len(exc.key) <= 120 else exc.key[:100] + f"... ({len(exc.key):,} characters)"
    first = error(f"weights: {name}: checkpoint key {key!r}: {exc.why}",
                  hint="the checkpoint's keys are not those of a model this mapping was written for")
    return SpecError(first.diagnostics + (exc.cause.diagnostics[:1] if exc.cause is not None else []))


def classifier_tensors(model: torch.nn.Module, ours: dict) -> frozenset[str]:
    """The state-dict names of the model's classifier: the layers its head's CLASSIFIER names
    (compiler/facts.py; reset_classifier replaces the same), under the head's path. Empty for
    a model without a classifier head at its top level (or one archspec did not build)."""
    facts = getattr(model, "meta", {}).get("archspec")  # a ModelFacts (compiler/interface.py)
    head = getattr(facts, "head", None)
    if head is None:
        return frozenset()
    prefixes = tuple(f"{head.path}.{layer}." for layer in head.classifier.layers)
    return frozenset(key for key in ours if key.startswith(prefixes))


def guarded(found: dict) -> dict:
    """The resamplers, each refusing (ValueError: reported as a wrong shape) what it cannot
    resample instead of failing: a table that is not floating point, or of an odd rank."""
    def guard(fn):
        def resample(value):
            if not value.is_floating_point():
                raise ValueError("not a floating-point table")
            try:
                return fn(value)
            except (RuntimeError, IndexError, TypeError) as exc:
                raise ValueError(str(exc)) from None
        return resample
    return {key: guard(fn) for key, fn in found.items()}


def landing(fit: Fit, ours: dict):
    """(name, checkpoint tensor, model tensor) for each tensor the fit loads into the model."""
    return [(key, fit.state[key], value) for key, value in ours.items() if key in fit.state]


def check_dtypes(fit: Fit, ours: dict, name: str) -> None:
    """Floating point where the model has floats, integers where it has integers."""
    wrong = [f"{key} ({theirs.dtype}, model {mine.dtype})" for key, theirs, mine in landing(fit, ours)
             if theirs.is_floating_point() != mine.is_floating_point() or theirs.is_complex()]
    if wrong:
        raise error(f"weights: {name}: {len(wrong)} tensor(s) of the wrong kind: {listing(wrong)}",
                    hint="weights are floating point (float16, bfloat16, float32 or float64, converted to the "
                         "model's); an integer or boolean tensor where the model has floats is no trained weight")


def converted(fit: Fit, ours: dict) -> dict[str, torch.Tensor]:
    """What lands in the model, each tensor in the model's dtype: the values the model will hold,
    so that a float64 beyond float32's range is seen as the infinity it becomes, and a float8
    tensor (which torch.isfinite does not take) is checked as the float32 it becomes."""
    return {key: theirs.to(mine.dtype) if theirs.dtype != mine.dtype else theirs
            for key, theirs, mine in landing(fit, ours)}


def check_one_value_per_tensor(values: dict[str, torch.Tensor], ours: dict, name: str) -> None:
    """Names of one tensor of the model (the copies of a `share: true` repeat, a tied table) that
    the checkpoint gives different values: loading both would keep whichever came last, a model
    other than either. One of them is enough (the others are filled through it)."""
    clashing, tables = [], False
    for key, others in shared_names(ours).items():
        if key not in values:
            continue
        differ = [k for k in sorted(others) if k > key and k in values and not torch.equal(values[key], values[k])]
        if differ:
            clashing.append(f"{key} and {differ[0]}")
            tables = tables or any(k.endswith(".tokens.weight") for k in (key, differ[0]))
    if clashing:
        hint = ("the checkpoint's output layer is its own, not the embedding table: give the lm head "
                "`vocab:` in place of `tie:` (and map the checkpoint's head to it)" if tables else
                "the checkpoint comes from a model whose copies were trained apart; give one copy's "
                "tensors (e.g. layers.0.*) to share it, or build the spec without `share: true`")
        raise error(f"weights: {name}: {len(clashing)} tensor(s) the model holds once (shared weights or a tied "
                    f"table) have different values under their names in the checkpoint: {listing(clashing)}",
                    hint=hint)


def check_finite(values: dict[str, torch.Tensor], name: str) -> None:
    """No NaN or infinity in what is loaded (in the model's dtype)."""
    bad = [key for key, value in values.items()
           if value.is_floating_point() and not bool(torch.isfinite(value).all())]
    if bad:
        raise error(f"weights: {name}: {len(bad)} tensor(s) hold NaN or infinite values: {listing(bad)}",
                    hint=f"the checkpoint may come from a diverged run; set {ALLOW_NAN}=1 to load it anyway "
                         "(for debugging)")


def namings_to_try(model: torch.nn.Module, graph, user_files: list, params=None) -> Namings:
    """The user's mapping files, archspec's naming, then the spec's mapping files (each file
    once); `params` (SpecParams) are what `${...}` in their rules reads. The spec's entries that
    lead nowhere (mapping_sources.py) are left out and kept, to be named if no naming fits."""
    spec, sources = spec_mapping_sources(model, graph)
    found = [source for source in sources if source.path is not None]
    given = by_absolute_path(user_files, lambda path: path)
    users = [read_mapping_file(path, None, params) for path in given.values()]
    spec_files = by_absolute_path(found, lambda source: source.path)
    namings = users + [ARCHSPEC] + [read_mapping_file(source.path, spec or "the spec", params)
                                    for absolute, source in spec_files.items() if absolute not in given]
    notes = {source.path: source.shipped_note(spec) for source in found if source.shipped}
    namings, users = told_apart(namings), told_apart(users)
    return Namings(namings, [source for source in sources if source.path is None], notes, users)


def told_apart(namings: list[Naming]) -> list[Naming]:
    """`namings`, where two or more share a `name:`, each of those called by its name and its
    file ("timm vit (vit_mine.yaml)"), so that messages say which file was loaded or passed over."""
    counts = Counter(naming.name for naming in namings)
    return [dataclasses.replace(naming, name=f"{naming.name} ({os.path.basename(naming.file)})")
            if counts[naming.name] > 1 and naming.file else naming for naming in namings]


def by_absolute_path(items: list, path_of) -> dict:
    """absolute path -> the first of `items` whose `path_of(item)` is that file, in order."""
    found = {}
    for item in items:
        found.setdefault(os.path.abspath(os.fspath(path_of(item))), item)
    return found


@dataclass
class Namings:
    """The namings to try, the spec's mapping entries that lead nowhere, and what to say when a
    naming read from a shipped mapping file (taken for a missing one) is the one loaded."""

    namings: list[Naming]
    unavailable: list[MappingSource]
    notes: dict[str, str]  # a mapping file's path -> the note on it
    users: list[Naming] = field(default_factory=list)  # the user's own mapping files, tried first

    def best_fit(self, state: dict, ours: dict, resample: dict, classifier: frozenset[str] = frozenset(),
                 classifier_may_be_absent: bool = False, shapes_hint=None) -> Fit:
        """best_fit under these namings, noting a shipped file; when none fits and an entry of
        the spec's led nowhere, the error names that entry first (the load needed it)."""
        try:
            fit = best_fit(state, ours, self.namings, resample, classifier, classifier_may_be_absent,
                           users_gave_a_mapping=bool(self.users), shapes_hint=shapes_hint)
        except KeyProblem:
            raise  # the checkpoint's, whatever the spec's entries are
        except SpecError as exc:
            if not self.unavailable:
                raise
            why = "the checkpoint fits none of the namings tried without it (see the next error)"
            raise SpecError([as_error(source, why) for source in self.unavailable] + exc.diagnostics,
                            exc.sources) from None
        if fit.file in self.notes:
            fit.notes.append(self.notes[fit.file])
        for naming in self.users:
            if naming.file != fit.file:
                why = why_not(naming, state, ours, resample, classifier)
                fit.passed_over.append(f"your mapping {naming.file} was not used: {why}; loaded under {fit.naming} "
                                       "naming instead")
        return fit


def why_not(naming: Naming, state: dict, ours: dict, resample: dict, classifier: frozenset[str]) -> str:
    """Why a checkpoint does not load under `naming`: it lacks the keys that identify the naming,
    or what does not fit under it (as best_fit found it)."""
    if not naming.applies_to(state):
        return "the checkpoint lacks the keys that identify it"
    return f"under it the checkpoint has {fit_under(naming, state, ours, resample, classifier).details()}"


def spec_mapping_sources(model: torch.nn.Module, graph) -> tuple[str | None, list[MappingSource]]:
    """The spec file and its `mappings:` entries: the checked graph's, else read from the spec
    file the model was built from."""
    if graph is None:
        return model_spec_file(model), spec_mapping_files(model)
    sources = graph.mapping_sources
    if not sources and graph.mappings:  # an IR made without the expander: its mapping files, as they are
        sources = [MappingSource(os.fspath(path), None, os.path.abspath(os.fspath(path))) for path in graph.mappings]
    return graph.file, list(sources)


class SpecParams:
    """The spec's params as `${...}` in a mapping file's rule sees them: given (a dict), or the
    graph's (`graph.params`, the checked spec's values, `--set` included, when the IR carries
    them), or else the spec file's own values (evaluated on first use, only when a rule reads
    one: a mapping file without `${...}` never evaluates them)."""

    def __init__(self, values: dict | None = None, file: str | None = None):
        self.values, self.file, self._params = values, file, None

    def _source(self):
        if self.values is not None:
            return self.values
        if self._params is None:
            self._params = file_params(self.file)
        return self._params

    def lookup(self, name: str):
        source = self._source()
        if isinstance(source, dict):
            return source[name]  # KeyError: the evaluator says "unknown name" with the names there are
        return source.get(name)

    def names(self) -> list[str]:
        source = self._source()
        return list(source) if isinstance(source, dict) else list(source.names)


def spec_params(model: torch.nn.Module, graph=None, given: dict | None = None) -> SpecParams:
    """Where the params a mapping file reads come from: `given`, the graph's, the spec file's."""
    if given is not None:
        return SpecParams(dict(given))
    values = getattr(graph, "params", None)
    if isinstance(values, dict):
        return SpecParams(values)
    return SpecParams(None, graph.file if graph is not None else model_spec_file(model))


def file_params(file: str | None, overrides: dict | None = None):
    """The params of the spec file `file` (with `overrides`, as `--set` gives them), evaluated
    on first use (archspec/language/values.Params); none for a spec given as text."""
    from archspec.language.values import Params

    if file is None or not os.path.isfile(file):
        return {}
    doc = compose(load_file(file), overrides)
    raw = doc.data.get("params") if isinstance(doc.data, dict) else None
    return Params(raw if isinstance(raw, dict) else {}, doc)


def model_spec_file(model: torch.nn.Module) -> str | None:
    """The spec file `model` was built from (None for a spec given as text)."""
    facts = getattr(model, "meta", {}).get("archspec")  # a ModelFacts (compiler/interface.py)
    file = facts.file if facts is not None else None
    return file if isinstance(file, str) and os.path.isfile(file) else None


def spec_mapping_files(model: torch.nn.Module) -> list[MappingSource]:
    """The `mappings:` entries of the spec file `model` was built from, each relative to the file
    that names it (a spec it extends may name them), as the checker resolves them (and refuses
    them: archspec/language/paths.py)."""
    file = model_spec_file(model)
    if file is None:
        return []
    doc = compose(load_file(file))
    names = doc.data.get("mappings") if isinstance(doc.data, dict) else None
    if not isinstance(names, list):
        return []
    return mapping_sources(names, [doc.loc(("mappings", i)) for i in range(len(names))], file)
