"""The rule kinds of a mapping file, each a small object that turns one state dict into the
next: rename, fuse, stack, split, transpose, permute, reshape, drop, affine, copy and create
(the file format: mapping_file.py).

A rule yields (key, tensor) pairs; `convert` runs the rules in order and notes any name that
two tensors end up sharing. A rule that cannot apply to one tensor (a split whose sizes do not
add up, a fuse of tensors whose shapes differ, a reshape to the wrong size) leaves that tensor
as it is, under its old name, and says why (`refused`, with where the rule is written), so the
loader reports it with the rest of what does not fit and names the rule.
Patterns are searched in each key, in linear time (patterns.py). `create` alone looks at the
model: it makes the model's tensors the checkpoint lacks (`convert(state, rules, ours)`, ours
the model's state dict); without a model it makes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Union

from archspec.core.errors import SpecError, error

from .patterns import KeyPattern

Pairs = Iterator[tuple[str, object]]  # (key, tensor)
PART_GROUP = "archspec_part"  # the name of the group `{part}` becomes in a fuse pattern
INDEX_GROUP = "archspec_index"  # the name of the group `{index}` becomes in a stack pattern
OWN_SIZES = "*"  # in a reshape: the tensor's own sizes
FILLS = ("zeros", "ones", "eye")  # what a create rule makes (or a number: a tensor full of it)
# The last name component of tensors that references keep as buffers (rebuilt from shapes, or
# constant): dropping one of these is no loss; dropping any other floating-point tensor drops
# something learned, and the load warns (Drop.learned).
BUFFER_NAMES = frozenset({"inv_freq", "original_inv_freq", "position_ids", "token_type_ids", "relative_position_index",
                          "relative_coords_table", "attn_mask", "masked_bias", "running_mean", "running_var",
                          "num_batches_tracked", "k_bias", "inv_timescales", "freqs_cis", "cos_cached", "sin_cached",
                          "_float_tensor"})


@dataclass(frozen=True)
class Computed:
    """A rename's replacement whose `${...}` read the pattern's groups (g1, g2, ...: an int where
    the group is digits) besides the spec's params, so it is evaluated for each key it matches:
    `evaluate(groups, expand)` gives the text. The mapping file's own text between the `${...}`
    is a template (`expand` turns its `\\1`s into groups); what a `${...}` gives, which comes
    from the checkpoint's key, is inserted as it is, never read as a template."""

    template: str
    evaluate: Callable[[dict, Callable[[str], str]], str]


MAX_INDEX_DIGITS = 18  # a group of more digits is no index of any model (and beyond int64 math)


class KeyProblem(SpecError):
    """A checkpoint key that a computed rename cannot be evaluated for; load.py names the
    checkpoint. `cause`: the evaluation's SpecError (pointing into the mapping file), if any;
    its diagnostics are this error's, else one that names the key."""

    def __init__(self, key: str, why: str, cause: SpecError | None = None):
        super().__init__(cause.diagnostics if cause is not None else error(f"checkpoint key {key!r}: {why}").diagnostics)
        self.key, self.why, self.cause = key, why, cause


def group_values(found, count: int, key: str = "") -> dict:
    """g1, g2, ... of a match: an int where the group's text is digits, else the text ('' when
    the group took no part). A run of more than MAX_INDEX_DIGITS digits is a KeyProblem."""
    values = {}
    for index in range(1, count + 1):
        text = found.group(index) or ""
        if text.isdigit() and len(text) > MAX_INDEX_DIGITS:
            raise KeyProblem(key, f"its part g{index} is a number of {len(text):,} digits, beyond any index a "
                                  f"model has ({text[:12]}...)")
        values[f"g{index}"] = int(text) if text.isdigit() and text.isascii() else text
    return values


@dataclass(frozen=True)
class Rename:
    """Each key takes the replacement of the first pattern that it matches (only that match is
    replaced, the rest of the key stays); keys no pattern matches stay as they are."""

    renames: tuple[tuple[KeyPattern, Union[str, Computed]], ...]

    def apply(self, state: dict) -> Pairs:
        for key, value in state.items():
            yield self.rename(key), value

    def rename(self, key: str) -> str:
        for pattern, replacement in self.renames:
            if isinstance(replacement, Computed):
                found = pattern.search(key)
                if found is not None:
                    groups = group_values(found, pattern.groups, key)
                    try:
                        text = replacement.evaluate(groups, found.expand)
                    except SpecError as exc:
                        raise KeyProblem(key, f"the rename of {pattern.pattern!r} cannot be computed for it: "
                                              f"{exc.diagnostics[0].message}", exc) from None
                    return key[:found.start()] + text + key[found.end():]
                continue
            new, count = pattern.subn(replacement, key, count=1)
            if count:
                return new
        return key


def joined(rule, state: dict, group: str, refused: list | None) -> Pairs:
    """The pairs of a rule that joins tensors whose keys differ only at its pattern's `group`
    (fuse's part, stack's number): the other tensors as they are; each group joined by
    `rule.join(found)` ({the group's text: tensor} -> (tensor, None) or (None, why not)) under
    the key with `rule.into` there, or left as it is and noted in `refused`."""
    groups: dict[tuple[str, str], dict[str, object]] = {}  # (text before, after the group) -> its text -> tensor
    for key, value in state.items():
        found = rule.pattern.search(key)
        if found is None or found.group(group) is None:  # (the group may sit in an unused branch)
            yield key, value
            continue
        stem = (key[: found.start(group)], key[found.end(group):])
        groups.setdefault(stem, {})[found.group(group)] = value
    for (head, tail), found in groups.items():
        tensor, why = rule.join(found)
        if tensor is None:  # named by the keys it leaves, not the one it would have made (the DINOv3 trial)
            note(refused, rule, ", ".join(head + text + tail for text in found), why)
            yield from ((head + text + tail, value) for text, value in found.items())
        else:
            yield head + rule.into + tail, tensor


@dataclass(frozen=True)
class Fuse:
    """Tensors whose keys differ only in the part named at `{part}` are concatenated along
    `dim`, in the order of `parts`, into one tensor whose key has `into` there. A group that
    lacks a part, or whose tensors do not concatenate, is left as it is."""

    pattern: KeyPattern  # `{part}` became the group PART_GROUP
    parts: tuple[str, ...]
    into: str
    dim: int = 0
    where: object = None  # where the rule is written (a Loc), for `refused`

    def apply(self, state: dict, refused: list | None = None) -> Pairs:
        return joined(self, state, PART_GROUP, refused)

    def join(self, found: dict) -> tuple[object | None, str | None]:
        """(the parts concatenated, None), or (None, why not)."""
        fused = self.fused(found)
        return (fused, None) if fused is not None else (None, self.why_not(found))

    def why_not(self, found: dict) -> str:
        lacking = [part for part in self.parts if part not in found]
        if lacking:  # the tensors keep their names: a load that fits meant them so (a fuse for gated variants)
            return Lacking(f"no {', '.join(lacking)} beside {', '.join(found)}")
        shapes = ", ".join(f"{part} {list(found[part].shape)}" for part in self.parts)
        return f"{shapes} do not join along dim {self.dim}"

    def fused(self, found: dict):
        if set(found) != set(self.parts):
            return None
        import torch  # here, so that reading a mapping file does not load torch

        try:
            return torch.cat([found[part] for part in self.parts], dim=self.dim)
        except (RuntimeError, IndexError):
            return None


@dataclass(frozen=True)
class Stack:
    """Tensors whose keys differ only in the number at `{index}` are stacked along a new axis
    `dim`, in the order of their numbers, into one tensor whose key has `into` there: Hugging
    Face's checkpoint files keep each expert of a mixture on its own (experts.0.w1 ...
    experts.7.w1 -> one [experts, ...] tensor). The numbers must run 0, 1, ... without a gap
    and the tensors have one shape; a group that does not is left as it is, and says why."""

    pattern: KeyPattern  # `{index}` became the group INDEX_GROUP
    into: str
    dim: int = 0
    where: object = None  # where the rule is written (a Loc), for `refused`

    def apply(self, state: dict, refused: list | None = None) -> Pairs:
        return joined(self, state, INDEX_GROUP, refused)

    def join(self, found: dict) -> tuple[object | None, str | None]:
        """(the numbered tensors stacked in order, None), or (None, why not)."""
        why = self.why_not(found)
        if why is not None:
            return None, why
        import torch  # here, so that reading a mapping file does not load torch

        return torch.stack([found[str(i)] for i in range(len(found))], dim=self.dim), None

    def why_not(self, found: dict) -> str | None:
        """Why the group cannot be stacked, or None: its numbers, written as they are, must be
        exactly 0, 1, ... (no gap, no `01` beside `1`)."""
        missing = [str(i) for i in range(len(found)) if str(i) not in found]  # at most len(found) numbers
        if missing:
            shown = sorted(found, key=lambda text: (len(text), text))[:8]
            return f"its numbers ({', '.join(shown)}{', ...' if len(found) > 8 else ''}) do not run 0, 1, ... " \
                   f"once each: no {', '.join(missing[:5])}"
        shapes = {tuple(value.shape) for value in found.values()}
        if len(shapes) > 1:
            return f"its tensors differ in shape ({', '.join(str(list(s)) for s in sorted(shapes))})"
        rank = len(shapes.pop())
        if not -rank - 1 <= self.dim <= rank:
            return f"a tensor of {rank} dims has no new dim {self.dim}"
        return None


@dataclass(frozen=True)
class Split:
    """A tensor whose key matches is cut along `dim` into one tensor per `into` name (templates
    that may use the pattern's groups: `\\1`). The cut is by `sizes` (exact lengths) or by
    `shares` (relative lengths: [1, 2] gives a third and two thirds; equal parts by default)."""

    pattern: KeyPattern
    into: tuple[str, ...]
    shares: tuple[int, ...] | None = None
    sizes: tuple[int, ...] | None = None
    dim: int = 0
    where: object = None  # where the rule is written (a Loc), for `refused`

    def apply(self, state: dict, refused: list | None = None) -> Pairs:
        for key, value in state.items():
            found = self.pattern.search(key)
            pieces = self.pieces(value) if found else None
            if found and pieces is None:
                shares = self.shares or (1,) * len(self.into)
                cut = f"sizes {list(self.sizes)}" if self.sizes else f"shares {list(shares)}"
                note(refused, self, key, f"{list(value.shape)} has no dim {self.dim} to cut by {cut}"
                     if not -value.dim() <= self.dim < value.dim() else
                     f"dim {self.dim} of {list(value.shape)} does not cut by {cut}")
            if pieces is None:
                yield key, value
            else:
                yield from zip((found.expand(name) for name in self.into), pieces)

    def pieces(self, value) -> tuple | None:
        try:
            length = value.shape[self.dim]
        except IndexError:
            return None
        sizes = self.sizes_for(length)
        return None if sizes is None else value.split(list(sizes), dim=self.dim)

    def sizes_for(self, length: int) -> tuple[int, ...] | None:
        if self.sizes is not None:
            return self.sizes if sum(self.sizes) == length else None
        shares = self.shares or (1,) * len(self.into)
        unit, rest = divmod(length, sum(shares))
        return None if rest else tuple(share * unit for share in shares)


@dataclass(frozen=True)
class Transpose:
    """2-D tensors whose key matches a pattern are transposed ([in, out] -> [out, in], as
    GPT-2's Conv1D stores what a Linear holds the other way round); others stay."""

    patterns: tuple[KeyPattern, ...]

    def apply(self, state: dict) -> Pairs:
        for key, value in state.items():
            if value.dim() == 2 and any(p.search(key) for p in self.patterns):
                yield key, value.t()
            else:
                yield key, value


@dataclass(frozen=True)
class Sizes:
    """The sizes a reshape or a permute's view gives a tensor: numbers, -1, "*" (a reshape: the
    tensor's own sizes), and, at `computed` (index, evaluate), sizes whose `${...}` read the
    pattern's groups (g1, g2, ...), evaluated for each key (`evaluate(groups)`): NesT's levels,
    each with its own head count, `${heads[g1]}`."""

    fixed: tuple
    computed: tuple[tuple[int, Callable[[dict], object]], ...] = ()

    def __str__(self) -> str:
        return str(list(self.fixed))

    def of(self, found, pattern: KeyPattern, key: str) -> tuple:
        """The sizes for `key` (`found`, its match); a KeyProblem where a computed one fails."""
        if not self.computed:
            return self.fixed
        groups = group_values(found, pattern.groups, key)
        sizes = list(self.fixed)
        for index, evaluate in self.computed:
            try:
                sizes[index] = evaluate(groups)
            except SpecError as exc:
                raise KeyProblem(key, f"size {index + 1} of the rule at {pattern.pattern!r} cannot be computed for "
                                      f"it: {exc.diagnostics[0].message}", exc) from None
        return tuple(sizes)


def sized(value, sizes: tuple):
    """`value` reshaped to `sizes` ("*": its own sizes, in order), or None where it cannot be
    (the count differs, a size is no positive integer or -1)."""
    shape = []
    for size in sizes:
        if size == OWN_SIZES:
            shape.extend(value.shape)
        elif isinstance(size, bool) or not isinstance(size, int) or size == 0 or size < -1:
            return None
        else:
            shape.append(size)
    try:
        return value.reshape(shape)
    except RuntimeError:
        return None


@dataclass(frozen=True)
class Permute:
    """A tensor whose key matches has its axes put in the order `dims` (torch's permute: axis i
    of the result is axis dims[i] of the tensor). With `view`, the tensor is first seen as
    `view` (sizes, at most one -1) and after the permute takes its own shape back: its elements
    reorder, its shape stays (a head reorder: [3C, C] viewed [3, heads, -1], dims [1, 0, 2]
    puts each head's q, k and v together). A tensor of another rank, or that cannot take the
    view, stays as it is, and the load says why."""

    pattern: KeyPattern
    dims: tuple[int, ...]
    view: Sizes | None = None
    where: object = None  # where the rule is written (a Loc), for `refused`

    def apply(self, state: dict, refused: list | None = None) -> Pairs:
        for key, value in state.items():
            found = self.pattern.search(key)
            if found is None:
                yield key, value
                continue
            permuted, why = self.permuted(value, found, key)
            if permuted is None:
                note(refused, self, key, why)
            yield key, value if permuted is None else permuted

    def permuted(self, value, found, key: str):
        """(the tensor permuted, None) or (None, why not)."""
        seen = value
        if self.view is not None:
            sizes = self.view.of(found, self.pattern, key)
            seen = sized(value, sizes)
            if seen is None:
                return None, f"{list(value.shape)} ({value.numel()} values) cannot be viewed as {list(sizes)}"
        if seen.dim() != len(self.dims):
            return None, (f"{list(seen.shape)} has rank {seen.dim()}, and dims {list(self.dims)} orders "
                          f"{len(self.dims)} axes")
        out = seen.permute(self.dims).contiguous()
        return (out.reshape(value.shape) if self.view is not None else out), None


@dataclass(frozen=True)
class Reshape:
    """A tensor whose key matches takes `shape`: sizes, at most one -1 (the size that makes the
    count right), or one "*" (the tensor's own sizes, in order). A class token kept as a vector
    [C] takes [1, 1, "*"] -> [1, 1, C]; a table [N, C] takes [1, "*"] -> [1, N, C]. A tensor
    that cannot take the shape stays as it is."""

    pattern: KeyPattern
    shape: tuple[int | str, ...]
    where: object = None  # where the rule is written (a Loc), for `refused`
    computed: tuple[tuple[int, Callable[[dict], object]], ...] = ()  # sizes that read the key's groups (Sizes)

    def apply(self, state: dict, refused: list | None = None) -> Pairs:
        for key, value in state.items():
            found = self.pattern.search(key)
            if not found:
                yield key, value
                continue
            sizes = Sizes(self.shape, self.computed).of(found, self.pattern, key)
            reshaped = sized(value, sizes)
            if reshaped is None:
                note(refused, self, key, f"{list(value.shape)} ({value.numel()} values) cannot take "
                                         f"{list(sizes)}")
            yield key, value if reshaped is None else reshaped

    def reshaped(self, value):
        return sized(value, self.shape)


@dataclass(frozen=True)
class Drop:
    """Tensors whose key matches a pattern are left out (buffers the model rebuilds, or parts
    of the reference archspec's spec does not have, such as a pretraining head). `dropped` is
    told each key left out."""

    patterns: tuple[KeyPattern, ...]

    def apply(self, state: dict, dropped: list | None = None) -> Pairs:
        for key, value in state.items():
            if not any(p.search(key) for p in self.patterns):
                yield key, value
            elif dropped is not None:
                dropped.append((key, value))


def looks_learned(key: str, value) -> bool:
    """Whether a checkpoint tensor is (most likely) a learned parameter, not a buffer: floating
    point, and not named like the buffers references keep (BUFFER_NAMES). A state dict does not
    say which is which; when in doubt this says learned, so that the warning is never missed."""
    is_float = getattr(value, "is_floating_point", None)
    if is_float is None or not is_float():
        return False
    return key.rpartition(".")[2] not in BUFFER_NAMES


def kept_elsewhere(value, kept) -> bool:
    """Whether a dropped tensor's values are still loaded under another name (a tied copy)."""
    import torch  # here, so that reading a mapping file does not load torch

    return any(other is value or (alike(other, value) and torch.equal(other, value)) for other in kept)


def alike(other, value) -> bool:
    """`other` a tensor of `value`'s shape and dtype."""
    return getattr(other, "shape", None) == value.shape and other.dtype == value.dtype


def same_shape_kept(value, kept: dict) -> list:
    """The kept tensors of the dropped tensor's shape and dtype (other values, or it would be kept
    elsewhere): the embedding table beside a dropped lm_head.weight that differs from it."""
    return [other for other in kept.values() if alike(other, value)]


@dataclass(frozen=True)
class Affine:
    """A tensor whose key matches becomes `value * scale + add` (scale first, then add), in
    its own dtype: Gemma's RMSNorm stores w where `1 + w` scales (add: 1.0); a query projection
    may carry the attention's 1/sqrt(d) (scale: 0.125)."""

    pattern: KeyPattern
    scale: float = 1.0
    add: float = 0.0

    def apply(self, state: dict) -> Pairs:
        for key, value in state.items():
            if self.pattern.search(key) and value.is_floating_point():
                yield key, value * self.scale + self.add
            else:
                yield key, value


@dataclass(frozen=True)
class Copy:
    """A tensor whose key matches is put under each `into` name (templates that may use the
    pattern's groups), in place of its own: a tied table the model keeps twice."""

    pattern: KeyPattern
    into: tuple[str, ...]

    def apply(self, state: dict) -> Pairs:
        for key, value in state.items():
            found = self.pattern.search(key)
            if found is None:
                yield key, value
            else:
                for name in self.into:
                    yield found.expand(name), value  # the loader copies it into each


@dataclass(frozen=True)
class Create:
    """Each tensor of the model whose name matches and that the state dict lacks is made, with
    the model's shape and dtype: zeros, ones, eye (the identity in the last two dimensions,
    repeated over the others) or a number (a tensor full of it). A tensor eye cannot make (fewer
    than two dimensions) is not made, and the load reports it missing."""

    pattern: KeyPattern
    fill: Union[str, float]

    def apply(self, state: dict, ours: dict | None = None) -> Pairs:
        yield from state.items()
        for key, mine in (ours or {}).items():
            if key not in state and self.pattern.search(key):
                made = self.made(mine)
                if made is not None:
                    yield key, made

    def made(self, mine):
        import torch

        shape, dtype = tuple(mine.shape), mine.dtype
        if self.fill == "zeros":
            return torch.zeros(shape, dtype=dtype)
        if self.fill == "ones":
            return torch.ones(shape, dtype=dtype)
        if self.fill == "eye":
            if len(shape) < 2:
                return None
            return torch.eye(shape[-2], shape[-1], dtype=dtype).expand(shape).clone()
        return torch.full(shape, self.fill, dtype=dtype)


Rule = Rename | Fuse | Stack | Split | Transpose | Permute | Reshape | Drop | Affine | Copy | Create


@dataclass
class Converted:
    """A state dict after the rules, the names that two tensors ended up sharing, the
    checkpoint tensors the drop rules left out that look learned (not buffers), and the
    model's tensors the create rules made."""

    state: dict
    clashes: list[str] = field(default_factory=list)
    dropped_learned: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # a rule that matched a tensor and could not apply, and why
    shifted: dict[str, float] = field(default_factory=dict)  # ours, to which an affine rule added a number
    near_copies: dict[str, list] = field(default_factory=dict)  # a dropped learned tensor -> the kept ones of its shape


class Lacking(str):
    """Why a fuse left a group as it was: a part is not in the checkpoint. Said when the load
    fails; no warning when it fits (the keys kept their names, which the model has)."""


def note(refused: list | None, rule, key: str, why: str) -> None:
    """Tell `refused` that `rule` matched `key` and could not apply to it, and why."""
    if refused is not None:
        kind = type(rule).__name__.lower()
        where = f" ({rule.where})" if rule.where is not None else ""
        line = f"the {kind} rule{where} left {key} as it was: {why}"
        refused.append(Lacking(line) if isinstance(why, Lacking) else line)


def convert(state: dict, rules: tuple[Rule, ...], ours: dict | None = None) -> Converted:
    """`state` after `rules`; `ours` (the model's state dict) is what create rules make."""
    result = Converted(dict(state))
    added: dict[int, tuple] = {}  # id(tensor) -> (the tensor, kept so the id stays its own; the number added)
    for rule in rules:
        out: dict = {}
        if isinstance(rule, Drop):
            dropped: list = []
            pairs = rule.apply(result.state, dropped)
        elif isinstance(rule, Create):
            before = set(result.state)
            pairs = rule.apply(result.state, ours)
        elif isinstance(rule, (Fuse, Stack, Split, Reshape, Permute)):
            pairs = rule.apply(result.state, result.refused)
        else:
            pairs = rule.apply(result.state)
        for key, value in pairs:
            if key in out and key not in result.clashes:
                result.clashes.append(key)
            out[key] = value
            if isinstance(rule, Affine) and rule.add and value is not result.state.get(key):
                added[id(value)] = (value, added.get(id(result.state[key]), (None, 0.0))[1] + rule.add)
        if isinstance(rule, Drop):  # a tied copy (BART's embed_tokens of `shared`) loses nothing
            lost = [(key, value) for key, value in dropped
                    if looks_learned(key, value) and not kept_elsewhere(value, out.values())]
            result.dropped_learned += [key for key, _ in lost]
            result.near_copies |= {key: same_shape_kept(value, out) for key, value in lost}  # tensors: named at the end
        elif isinstance(rule, Create):
            result.created += [key for key in out if key not in before]
        result.state = out
    result.shifted = {key: added[id(value)][1] for key, value in result.state.items() if id(value) in added}
    final = {id(value): key for key, value in result.state.items()}  # a rename keeps the tensor
    result.near_copies = {key: [final[id(t)] for t in kept if id(t) in final]
                          for key, kept in result.near_copies.items()}
    return result
