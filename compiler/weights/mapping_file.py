r"""Mapping files: a checkpoint's naming written as data, read into a `Naming`.

A mapping file says how the tensors of a reference implementation's checkpoint (timm, Hugging
Face transformers, torch.nn.Transformer, your own training code) are named in archspec, so that
`archspec build SPEC --weights FILE` loads it. A spec names the files that fit it under
`mappings:`; `--map FILE` (or `archspec.build(..., mapping=FILE)`) adds one more.

    # timm VisionTransformer -> specs/vit_*.yaml
    archspec: 1                      # optional: the mapping-file format version
    name: timm vit                   # what messages call this naming
    doc: timm's vit_*_patch16_224    # optional
    identify: ['^cls_token$']        # optional: tried only on checkpoints where each pattern matches a key
    rules:                           # in order, each applied to what the one before produced
      - rename:
          '^cls_token$': patch_embed.cls_token
          '^blocks\.(\d+)\.norm1\.': 'blocks.\1.attn.norm.'
    keep: []                         # optional: our tensors the checkpoint lacks (they keep their init)

Patterns are regular expressions searched in each key, matched by RE2 in time linear in the
key's length (patterns.py): Python's syntax without lookaround or backreferences. Anchor them
with `^` and `$`. Replacements are Python templates: `\1` is the first group's text. Quote
patterns with single quotes in YAML, where a backslash is just a backslash.

Rules (each list item has exactly one of these keys):

- `rename: {PATTERN: REPLACEMENT, ...}`: a key takes the replacement of the first pattern it
  matches (only the matched part is replaced); keys no pattern matches stay as they are.
- `fuse: {match: PATTERN, parts: [A, B, ...], into: NAME, dim: 0}`: `match` holds `{part}`
  once, standing for one of `parts`; tensors whose keys differ only there are concatenated
  along `dim` in the order of `parts`, under the key with `into` in place of the part. Hugging
  Face's separate projections -> one qkv: `match: '^(.*\.self_attn)\.{part}\.(weight|bias)$'`,
  `parts: [q_proj, k_proj, v_proj]`, `into: qkv`. A group missing a part stays as it is.
  Parts named as queries, keys and values (q_proj, key, wv, ...) must come in archspec's order,
  q before k before v (a located error otherwise: under grouped-query attention k and v have one
  shape, and a swapped pair would load without a word).
- `stack: {match: PATTERN, into: NAME, dim: 0}`: `match` holds `{index}` once, standing for a
  number; tensors whose keys differ only there are stacked along a new axis `dim` in the order
  of their numbers (0, 1, ... without a gap), under the key with `into` in place of the number.
  Hugging Face's checkpoint files keep a mixture's experts one by one (`experts.0.w1.weight`,
  ...), archspec as one [experts, ...] tensor.
- `split: {match: PATTERN, into: [TEMPLATE, ...], shares: [1, 2], dim: 0}`: a matching tensor
  is cut along `dim` into one tensor per `into` template (which may use the pattern's groups),
  by `shares` (relative lengths; equal parts when neither is given) or by `sizes` (exact
  lengths). nn.MultiheadAttention's in_proj [3E, E] -> q [E, E] and kv [2E, E]: shares [1, 2].
- `transpose: [PATTERN, ...]`: 2-D tensors whose key matches are transposed (GPT-2's Conv1D
  keeps [in, out] where a Linear holds [out, in]).
- `reshape: {match: PATTERN, shape: [1, '*']}`: a matching tensor takes that shape, given as
  sizes, at most one -1 (the size that makes the count right) or one '*' (the tensor's own
  sizes): Hugging Face keeps CLIP's class token as [C] and its positions as [N, C], archspec
  as [1, 1, C] and [1, N, C]: shapes [1, 1, '*'] and [1, '*']. A size may be a name of the
  spec's params (`shape: [heads, -1, dim]`), or a `${...}` that reads the pattern's groups
  (g1, g2, ...), evaluated for each key: `'${heads[g1]}'` for a model whose levels have
  their own head counts.
- `permute: {match: PATTERN, dims: [1, 0, 2], view: [3, heads, -1]}`: a matching tensor's axes
  are put in the order `dims` (N-D, torch's permute: axis i of the result is axis dims[i]).
  With `view` (sizes as reshape's, no '*'), the tensor is first seen as `view`, permuted, and
  given its own shape back: its elements reorder, its shape stays. A head reorder written once
  for any head count: `view: [heads, -1]` with `dims: [1, 0]` turns rows ordered (head,
  head_dim) into (head_dim, head) in a [C, C] weight and its [C] bias alike. A tensor of
  another rank, or that cannot take the view, stays as it is and the load says why.
- `drop: [PATTERN, ...]`: tensors whose key matches are left out (buffers the model rebuilds).
  Dropped tensors that look learned (floating point, not named like a buffer: rules.looks_learned)
  are named in the load's warning (Fit.warnings, printed in the load summary).
- `affine: {match: PATTERN, scale: 0.125, add: 1.0}`: a matching floating-point tensor becomes
  value * scale + add (scale first; either may be left out, not both).
- `copy: {match: PATTERN, into: [TEMPLATE, TEMPLATE, ...]}`: a matching tensor is put under
  each name of `into` (two or more), in place of its own.
- `create: {match: PATTERN, fill: zeros | ones | eye | NUMBER}`: each tensor of the *model*
  whose name matches and that the state dict lacks is made with the model's shape and dtype
  (eye: the identity in the last two dimensions).

Any value in a rule may hold `${...}`, an expression of the spec's params evaluated by the spec
language's evaluator (archspec/language/expressions.py; never eval):
`shape: ['${heads}', 3, '${dim // heads}', '${dim}']`.

`keep` lists patterns of *our* tensors (after mapping) that a checkpoint in this naming does
not have, e.g. the embeddings nn.Transformer leaves to its user: they keep their initial
values and the load says so, instead of failing on them as missing.

A file is read with archspec's safe YAML loader (plain values only; size bounded) and checked
before use: an unknown key, a value of the wrong type, a pattern that does not compile, is too
long or needs what a linear-time matcher lacks (patterns.py), or a template that names a group
its pattern lacks is an error at the file, line and column where it is written.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any, Callable, Literal, Protocol, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from archspec.core.errors import Loc, SpecError, error
from archspec.core.words import did_you_mean, one_of, plural
from archspec.language.loader import Document, load_file
from archspec.language.validation import diagnostics_from

from .naming import Naming
from .patterns import check_template, compile_pattern, linear
from .rules import (FILLS, INDEX_GROUP, OWN_SIZES, PART_GROUP, Affine, Computed, Copy, Create, Drop, Fuse, Permute,
                    Rename, Reshape, Rule, Sizes, Split, Stack, Transpose)

FORMAT_VERSION = 1
EXPRESSION = re.compile(r"\$\{[^}]*\}")  # a ${...} in a value
READS_GROUPS = re.compile(r"\$\{[^}]*\bg\d+\b")  # a ${...} reading a pattern's group (g1, g2, ...)
PARAM_NAME = re.compile(r"[A-Za-z_]\w*")  # a size written as a bare name: one of the spec's params
SIZED = {"reshape": "shape", "permute": "view"}  # the rules whose sizes may name params or read groups
PART = "{part}"
INDEX = "{index}"
At = Callable[..., Loc | None]  # (path within the rule, key=False) -> where it is written


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class MappingDoc(Strict):
    archspec: Literal[1] = Field(FORMAT_VERSION, description="mapping-file format version")
    name: str = Field(min_length=1, description="what messages call this naming, e.g. 'timm swin'")
    doc: str = ""
    identify: list[str] = Field(default_factory=list, description="patterns that must each match some key")
    rules: list[dict[str, Any]] = Field(default_factory=list, description="applied in order")
    keep: list[str] = Field(default_factory=list, description="patterns of our tensors that keep their init")


# -- the rule kinds (one model each, named by its key) -------------------------------------------


class RenameRule(Strict):
    rename: dict[str, str] = Field(min_length=1)

    def build(self, at: At, computed: dict | None = None) -> Rule:
        """`computed`: pattern text -> the evaluator of a replacement that reads the groups."""
        renames = []
        for text, replacement in self.rename.items():
            pattern = compile_pattern(text, at(("rename", text), key=True))
            if computed and text in computed:
                check_template(pattern, EXPRESSION.sub("", replacement), at(("rename", text)), shown=replacement)
                _check_groups_named(pattern, replacement, at(("rename", text)))
                _check_names_known(pattern, lambda groups, evaluate=computed[text]: evaluate(groups, lambda t: t))
                renames.append((pattern, Computed(replacement, computed[text])))
            else:
                renames.append((pattern, check_template(pattern, replacement, at(("rename", text)))))
        return Rename(tuple(renames))


class FuseParams(Strict):
    match: str
    parts: list[str]
    into: str
    dim: int = 0


class FuseRule(Strict):
    fuse: FuseParams

    def build(self, at: At) -> Rule:
        fuse = self.fuse
        text, loc = fuse.match, at(("fuse", "match"))
        if text.count(PART) != 1:
            raise error(f"fuse: `match` must hold {PART} once, where the parts differ; got '{text}'", loc,
                        hint=r"e.g. match: '^(.*\.self_attn)\.{part}\.(weight|bias)$' with parts: [q_proj, k_proj, v_proj]")
        _check_two_or_more(fuse.parts, "fuse", "parts", at(("fuse", "parts")))
        repeated = sorted({p for p in fuse.parts if fuse.parts.count(p) > 1})
        if repeated:
            raise error(f"fuse: `parts` names {one_of(repeated)} twice", at(("fuse", "parts")))
        _check_projection_order(fuse.parts, at(("fuse", "parts")))
        alternatives = "|".join(re.escape(p) for p in fuse.parts)
        pattern = placeholder_pattern("fuse", text, PART, PART_GROUP, alternatives, loc)
        return Fuse(pattern, tuple(fuse.parts), fuse.into, fuse.dim, at(("fuse",), key=True))


def placeholder_pattern(rule: str, text: str, placeholder: str, group: str, regex: str, loc: Loc | None):
    """`text` with its one `placeholder` ({part}, {index}) made the named group `group` matching
    `regex`, compiled for linear-time matching; a located error where the text as written does
    not compile, or where the placeholder stands where no group can (inside [...])."""
    compile_pattern(text, loc)  # the text as written (the placeholder a literal to re): its errors, its positions
    pattern = linear(text.replace(placeholder, f"(?P<{group}>{regex})"))
    if pattern is None or group not in pattern.groupindex:
        raise error(f"{rule}: {placeholder} in `match` must stand where a group can, not inside [...]", loc)
    return pattern


class StackParams(Strict):
    match: str
    into: str
    dim: int = 0


class StackRule(Strict):
    stack: StackParams

    def build(self, at: At) -> Rule:
        stack = self.stack
        text, loc = stack.match, at(("stack", "match"))
        if text.count(INDEX) != 1:
            raise error(f"stack: `match` must hold {INDEX} once, where the numbers differ; got '{text}'", loc,
                        hint=r"e.g. match: '^(.*\.experts)\.{index}\.(w1|w2|w3)\.weight$' with into: stacked")
        pattern = placeholder_pattern("stack", text, INDEX, INDEX_GROUP, "[0-9]+", loc)
        return Stack(pattern, stack.into, stack.dim, at(("stack",), key=True))


class SplitParams(Strict):
    match: str
    into: list[str]
    shares: list[int] | None = Field(None, description="relative lengths of the parts (default: equal)")
    sizes: list[int] | None = Field(None, description="exact lengths of the parts")
    dim: int = 0


class SplitRule(Strict):
    split: SplitParams

    def build(self, at: At) -> Rule:
        split = self.split
        _check_two_or_more(split.into, "split", "into", at(("split", "into")))
        pattern = compile_pattern(split.match, at(("split", "match")))
        into = tuple(check_template(pattern, name, at(("split", "into", i)), "split target")
                     for i, name in enumerate(split.into))
        if split.shares is not None and split.sizes is not None:
            raise error("split: give `shares` or `sizes`, not both", at(("split", "sizes"), key=True),
                        hint="shares are relative lengths ([1, 2]: a third and two thirds); sizes are exact")
        for what in ("shares", "sizes"):
            _check_lengths(getattr(split, what), len(into), what, at(("split", what)))
        return Split(pattern, into, _tuple(split.shares), _tuple(split.sizes), split.dim, at(("split",), key=True))


class TransposeRule(Strict):
    transpose: list[str] = Field(min_length=1)

    def build(self, at: At) -> Rule:
        return Transpose(tuple(compile_pattern(p, at(("transpose", i))) for i, p in enumerate(self.transpose)))


class ReshapeParams(Strict):
    match: str
    shape: list[Union[int, Literal["*"]]] = Field(min_length=1)


class ReshapeRule(Strict):
    reshape: ReshapeParams

    def build(self, at: At, computed: tuple = ()) -> Rule:
        """`computed`: (index, evaluate) of the sizes that read the pattern's groups (rules.Sizes)."""
        reshape = self.reshape
        shape, loc = reshape.shape, at(("reshape", "shape"))
        sizes = [size for size in shape if size != OWN_SIZES]
        if shape.count(-1) + shape.count(OWN_SIZES) > 1 or any(size == 0 or size < -1 for size in sizes):
            raise error(f"reshape: `shape` {shape} must hold positive sizes and at most one -1 or '*'", loc,
                        hint="-1 is the size that makes the count right; '*' the tensor's own sizes, "
                             "e.g. [1, '*'] turns [N, C] into [1, N, C]")
        pattern = compile_pattern(reshape.match, at(("reshape", "match")))
        _check_groups_read(pattern, computed, "reshape", "shape", at)
        return Reshape(pattern, tuple(shape), at(("reshape",), key=True), tuple(computed))


class PermuteParams(Strict):
    match: str
    dims: list[int] = Field(min_length=1, max_length=8, description="the new order of the axes: axis i of the "
                                                                    "result is axis dims[i]")
    view: list[int] | None = Field(None, min_length=1, max_length=8,
                                   description="sizes the tensor is seen as before the permute (its own shape "
                                               "after); at most one -1")


class PermuteRule(Strict):
    permute: PermuteParams

    def build(self, at: At, computed: tuple = ()) -> Rule:
        permute = self.permute
        dims, loc = permute.dims, at(("permute", "dims"))
        rank = len(dims)
        order_hint = (f"`dims` is an order of the axes 0 to {rank - 1} (or -{rank} to -1), each once, e.g. "
                      f"{list(reversed(range(rank)))}")
        for dim in dims:
            if not -rank <= dim < rank:
                raise error(f"permute: dim {dim} is not one of the {rank} axes that `dims` {dims} orders", loc,
                            hint=order_hint)
        order = [dim % rank for dim in dims]
        repeated = sorted({dim for dim in order if order.count(dim) > 1})
        if repeated:
            raise error(f"permute: `dims` {dims} names axis {repeated[0]} twice", loc, hint=order_hint)
        view = None
        if permute.view is not None:
            where = at(("permute", "view"))
            if len(permute.view) != rank:
                raise error(f"permute: `view` has {plural(len(permute.view), 'size')} and `dims` orders {rank} axes",
                            where, hint="give one size of the view per axis that `dims` orders")
            if permute.view.count(-1) > 1 or any(size == 0 or size < -1 for size in permute.view):
                raise error(f"permute: `view` {permute.view} must hold positive sizes and at most one -1", where,
                            hint="-1 is the size that makes the count right, e.g. [heads, -1] for [C, C]")
            view = Sizes(tuple(permute.view))
        pattern = compile_pattern(permute.match, at(("permute", "match")))
        _check_groups_read(pattern, computed, "permute", "view", at)
        if computed:
            view = Sizes(view.fixed, tuple(computed))
        return Permute(pattern, tuple(order), view, at(("permute",), key=True))


def _check_groups_named(pattern, replacement: str, loc) -> None:
    """A rename's `${...}` that reads g<n> of a pattern with fewer groups is an error where it is
    written, before any key is renamed (it was found at the first key the pattern matched)."""
    for expression in EXPRESSION.findall(replacement):
        read = [int(n) for n in re.findall(r"\bg(\d+)\b", expression)]
        if read and max(read) > pattern.groups:
            raise error(f"replacement '{replacement}' reads g{max(read)}, and the pattern has "
                        f"{plural(pattern.groups, 'group')}", loc,
                        hint="g1, g2, ... are the texts of the pattern's (...) groups in each key")


def _check_names_known(pattern, evaluate) -> None:
    """A rename's `${...}` that reads a name neither a group (g1, g2, ...) nor a param of the spec
    is an error where it is written, when the file is read (the CoAtNet trial's `dim_heads` was
    found at the first key, under a hint that blamed the checkpoint). Tried with every group 1:
    only an unknown name is an error here; a value that fails for some key fails at that key."""
    try:
        evaluate({f"g{i}": 1 for i in range(1, pattern.groups + 1)})
    except SpecError as exc:
        if exc.diagnostics and exc.diagnostics[0].message.startswith("unknown name"):
            raise
    except Exception:  # noqa: BLE001 - any other failure depends on the key's groups: judged there
        pass


def _check_groups_read(pattern, computed: tuple, rule: str, field: str, at: At) -> None:
    """A size that reads g<n> of a pattern with fewer groups, or a name that is no group or
    param, is an error where it is written."""
    for index, evaluate in computed:
        needed = max(int(n) for n in re.findall(r"\bg(\d+)\b", evaluate.text))
        if needed > pattern.groups:
            raise error(f"{rule}: size {index + 1} of `{field}` reads g{needed}, and the pattern has "
                        f"{plural(pattern.groups, 'group')}", at((rule, field, index)),
                        hint="g1, g2, ... are the texts of the pattern's (...) groups in each key")
        _check_names_known(pattern, evaluate)


class DropRule(Strict):
    drop: list[str] = Field(min_length=1)

    def build(self, at: At) -> Rule:
        return Drop(tuple(compile_pattern(p, at(("drop", i))) for i, p in enumerate(self.drop)))


class AffineParams(Strict):
    match: str
    scale: Union[int, float] = 1.0
    add: Union[int, float] = 0.0


class AffineRule(Strict):
    affine: AffineParams

    def build(self, at: At) -> Rule:
        affine = self.affine
        for what in ("scale", "add"):
            value = getattr(affine, what)
            if isinstance(value, bool) or not math.isfinite(value):
                raise error(f"affine: `{what}` must be a finite number; got {value}", at(("affine", what)))
        if "scale" not in affine.model_fields_set and "add" not in affine.model_fields_set:
            raise error("affine: give `scale`, `add` or both", at(("affine",), key=True),
                        hint="a matching tensor becomes value * scale + add, e.g. add: 1.0 for w -> 1 + w")
        return Affine(compile_pattern(affine.match, at(("affine", "match"))), float(affine.scale), float(affine.add))


class CopyParams(Strict):
    match: str
    into: list[str]


class CopyRule(Strict):
    copy_: CopyParams = Field(alias="copy")

    def build(self, at: At) -> Rule:
        copy = self.copy_
        _check_two_or_more(copy.into, "copy", "into", at(("copy", "into")))
        pattern = compile_pattern(copy.match, at(("copy", "match")))
        into = tuple(check_template(pattern, name, at(("copy", "into", i)), "copy target")
                     for i, name in enumerate(copy.into))
        repeated = sorted({name for name in into if into.count(name) > 1})
        if repeated:
            raise error(f"copy: `into` names {one_of(repeated)} twice", at(("copy", "into")),
                        hint="each name of `into` gets its own copy: name each once")
        return Copy(pattern, into)


class CreateParams(Strict):
    match: str
    fill: Union[Literal["zeros", "ones", "eye"], int, float]


class CreateRule(Strict):
    create: CreateParams

    def build(self, at: At) -> Rule:
        create = self.create
        fill = create.fill
        if not isinstance(fill, str) and (isinstance(fill, bool) or not math.isfinite(fill)):
            raise error(f"create: `fill` must be {one_of(FILLS)} or a finite number; got {fill}", at(("create", "fill")))
        return Create(compile_pattern(create.match, at(("create", "match"))),
                      fill if isinstance(fill, str) else float(fill))


RULE_FORMS = {  # each rule's form, for hints
    "rename": "rename: {PATTERN: REPLACEMENT, ...}",
    "fuse": "fuse: {match: PATTERN with {part}, parts: [A, B, ...], into: NAME, dim: 0}",
    "stack": "stack: {match: PATTERN with {index}, into: NAME, dim: 0}",
    "split": "split: {match: PATTERN, into: [TEMPLATE, ...], shares: [1, 2] or sizes: [...], dim: 0}",
    "transpose": "transpose: [PATTERN, ...]",
    "permute": "permute: {match: PATTERN, dims: [AXIS, ...], view: [SIZE, ..., -1]}",
    "reshape": "reshape: {match: PATTERN, shape: [SIZE or a param's name, ..., -1 or '*']}",
    "drop": "drop: [PATTERN, ...]",
    "affine": "affine: {match: PATTERN, scale: NUMBER, add: NUMBER} (value * scale + add)",
    "copy": "copy: {match: PATTERN, into: [TEMPLATE, TEMPLATE, ...]}",
    "create": "create: {match: PATTERN of the model's names, fill: zeros, ones, eye or a number}",
}

RULE_KINDS: dict[str, type[Strict]] = {"rename": RenameRule, "fuse": FuseRule, "stack": StackRule, "split": SplitRule,
                                       "transpose": TransposeRule, "permute": PermuteRule, "reshape": ReshapeRule,
                                       "drop": DropRule,
                                       "affine": AffineRule, "copy": CopyRule, "create": CreateRule}


PROJECTION_ROLES = {"q": "q", "query": "q", "wq": "q", "k": "k", "key": "k", "wk": "k",
                    "v": "v", "value": "v", "wv": "v"}  # a name's word -> the projection it is


def projection_role(part: str) -> str | None:
    """"q", "k" or "v" where the part's name says which projection it is by one word of it
    (q_proj, key, wv, to_q), else None (gate_proj, kv_a_proj, fc1)."""
    roles = {PROJECTION_ROLES[w] for w in re.split(r"[^a-z]+", part.lower()) if w in PROJECTION_ROLES}
    return roles.pop() if len(roles) == 1 else None


def _check_projection_order(parts: list[str], loc: Loc | None) -> None:
    """A located error where `parts` name queries, keys and values in another order than
    archspec's fused projections hold them (qkv: rows [q; k; v], kv: [k; v]): under grouped-query
    attention k and v have one shape, so [q_proj, v_proj, k_proj] would load without a word."""
    named = [(part, role) for part in parts if (role := projection_role(part)) is not None]
    ranks = ["qkv".index(role) for _, role in named]
    if ranks == sorted(ranks) or len(set(ranks)) != len(ranks):  # in order, or two of one kind: not read
        return
    in_order = iter(part for part, _ in sorted(named, key=lambda pr: "qkv".index(pr[1])))
    wanted = [next(in_order) if projection_role(part) else part for part in parts]  # others stay where they are
    written = ", ".join(parts)
    raise error(f"fuse: `parts` [{written}] are queries, keys and values out of order: archspec's fused "
                f"projections hold their rows as [q; k; v] (qkv) and [k; v] (kv), in that order", loc,
                hint=f"write parts: [{', '.join(wanted)}]; a reference that stores its rows in another order "
                     f"(one fused tensor) is read with `split`, each part named")


def _check_two_or_more(names: list[str], rule: str, what: str, loc: Loc | None) -> None:
    if len(names) < 2:
        hint = f"the form: {RULE_FORMS[rule]}; to give a tensor one new name, use rename" if rule == "copy" else None
        raise error(f"{rule}: `{what}` has {plural(len(names), 'name')}; a {rule} needs two or more", loc, hint=hint)


def _tuple(values: list[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(values)


def _check_lengths(values: list[int] | None, parts: int, what: str, loc: Loc | None) -> None:
    if values is None:
        return
    if len(values) != parts:
        raise error(f"split: `{what}` has {len(values)} entries for {parts} targets in `into`", loc,
                    hint=f"give one entry of `{what}` per name in `into`")
    if any(v <= 0 for v in values):
        raise error(f"split: `{what}` must hold positive numbers; got {values}", loc)


# -- reading a file --------------------------------------------------------------------------------


class ParamSource(Protocol):
    """The spec's params as `${...}` in a rule sees them (load.SpecParams)."""

    def lookup(self, name: str) -> Any: ...  # KeyError for a name that is no param

    def names(self) -> list[str]: ...


def read_mapping_file(path: str | os.PathLike, named_by: str | None = None, params: ParamSource | None = None) -> Naming:
    """The naming written in the mapping file at `path`; a located SpecError if it is wrong.
    `named_by` says where the path came from (for the hint when the file is missing); `params`
    are the spec's, which `${...}` in a rule reads (without them such a rule is an error)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        where = f" (named by {named_by})" if named_by else ""
        raise error(f"no such mapping file: {path}{where}",
                    hint="a spec's `mappings:` are relative to the file that names them" if named_by else None)
    doc = _load(path)
    try:
        return _naming(doc, params)
    except SpecError as exc:
        raise exc.with_sources(doc.sources) from None


def _load(path: str) -> Document:
    try:
        return load_file(path)
    except SpecError as exc:
        if exc.message != "the spec is empty":  # the loader's words for a file with no value
            raise
        raise error("the mapping file is empty", exc.loc, hint="start with `name:` and `rules:`") from None


def _naming(doc: Document, params: ParamSource | None = None) -> Naming:
    data = _top_level(doc)
    try:
        spec = MappingDoc.model_validate(data)
    except ValidationError as exc:
        raise SpecError(diagnostics_from(exc, data, doc, (), MappingDoc, "the mapping file")) from None
    rules = tuple(_rule(doc, i, raw, params) for i, raw in enumerate(spec.rules))
    identify = tuple(compile_pattern(p, doc.loc(("identify", i))) for i, p in enumerate(spec.identify))
    keep = tuple(compile_pattern(p, doc.loc(("keep", i))) for i, p in enumerate(spec.keep))
    return Naming(spec.name, rules, identify, keep, os.path.abspath(doc.file), spec.doc.strip())


def _top_level(doc: Document) -> dict:
    data = doc.data
    if not isinstance(data, dict):
        raise error("a mapping file is a mapping with `name` and `rules`", doc.loc(()),
                    hint="see specs/mappings/README.md for the format")
    if "graph" in data or "inputs" in data:
        raise error("this is a spec, not a mapping file", doc.loc(()),
                    hint="a mapping file holds `name`, `identify`, `rules` and `keep`; see specs/mappings/README.md")
    return data


def _rule(doc: Document, index: int, raw: dict, params: ParamSource | None = None) -> Rule:
    base = ("rules", index)
    kind = _rule_kind(doc, base, raw)
    model = RULE_KINDS[kind]
    computed = _group_readers(doc, base, raw, params) if kind == "rename" else {}
    sizes_computed: tuple = ()
    if kind in SIZED:  # names of params, and sizes read from each key's groups
        raw, sizes_computed = _sizes(doc, base, kind, raw, params)
    if computed:  # evaluated per key (rules.Computed); the rule's other values now
        kept = {k: v for k, v in raw["rename"].items() if k not in computed}
        raw = {"rename": {**_evaluated(doc, base, {"rename": kept}, params)["rename"],
                          **{k: raw["rename"][k] for k in computed}}}
    else:
        raw = _evaluated(doc, base, raw, params)
    try:
        rule = model.model_validate(raw)
    except ValidationError as exc:
        found = diagnostics_from(exc, raw, doc, base, model, f"the {kind} rule")
        found = found if isinstance(found, list) else [found]
        raise SpecError([d if d.hint else dataclasses.replace(d, hint=f"the form: {RULE_FORMS[kind]}")
                         for d in found]) from None

    def at(path: tuple, key: bool = False) -> Loc | None:
        return doc.loc(base + path, key=key)

    if sizes_computed:
        return rule.build(at, sizes_computed)
    return rule.build(at, computed) if computed else rule.build(at)


@dataclasses.dataclass(frozen=True)
class _SizeOfKey:
    """A size whose `${...}` reads the pattern's groups: evaluated for each key's groups, errors
    pointing into the mapping file."""

    text: str
    path: tuple
    doc: Document
    params: Any

    def __call__(self, groups: dict):
        from archspec.language.values import evaluate_value

        return evaluate_value(self.text, self.path, _WithGroups(groups, self.params), self.doc)


def _sizes(doc: Document, base: tuple, kind: str, raw: dict, params: ParamSource | None) -> tuple[dict, tuple]:
    """The rule with each size of its `shape` (reshape) or `view` (permute) that is a bare name
    replaced by that param's value, and (index, evaluate) for each size whose `${...}` reads the
    pattern's groups (a stand-in 1 in its place while the rule is checked)."""
    field = SIZED[kind]
    body = raw.get(kind)
    if not isinstance(body, dict) or not isinstance(body.get(field), list):
        return raw, ()
    sizes, computed = [], []
    for index, size in enumerate(body[field]):
        path = base + (kind, field, index)
        if isinstance(size, str) and PARAM_NAME.fullmatch(size.strip()):
            sizes.append(_param_size(doc, path, size.strip(), kind, field, params))
        elif isinstance(size, str) and READS_GROUPS.search(size):
            computed.append((index, _SizeOfKey(size, path, doc, params)))
            sizes.append(1)
        else:
            sizes.append(size)
    return {kind: {**body, field: sizes}}, tuple(computed)


def _param_size(doc: Document, path: tuple, name: str, kind: str, field: str, params: ParamSource | None) -> int:
    """The value of the spec's param `name`, a size; a located error where there is none."""
    loc = doc.loc(path)
    if params is None:
        raise error(f"{kind}: '{name}' in `{field}` names a param of the spec, but the mapping file was read without "
                    f"a spec", loc, hint="load it for a spec (archspec build SPEC --weights FILE), whose params it reads")
    try:
        value = params.lookup(name)
    except KeyError:
        names = params.names()
        raise error(f"{kind}: unknown name '{name}' in `{field}`: a size is a number, -1"
                    f"{', ' + repr(OWN_SIZES) if kind == 'reshape' else ''}, a param of the spec or ${{...}}", loc,
                    hint=did_you_mean(name, names) or (f"the spec's params: {', '.join(names[:12])}"
                                                       f"{', ...' if len(names) > 12 else ''}" if names else
                                                       "the spec has no params")) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{kind}: param '{name}' is {value!r}, not a size (a whole number)", loc,
                    hint=f"use ${{...}} for a size made from it, e.g. '${{{name}[0]}}'")
    return value


class _WithGroups:
    """What a replacement's ${...} sees: the pattern's groups (g1, g2, ...) and the spec's params."""

    def __init__(self, groups: dict, params: ParamSource | None):
        self.groups, self.params = groups, params

    def lookup(self, name: str):
        if name in self.groups:
            return self.groups[name]
        if self.params is None:
            raise KeyError(name)
        return self.params.lookup(name)

    def names(self) -> list[str]:
        return list(self.groups) + (self.params.names() if self.params is not None else [])


def _group_readers(doc: Document, base: tuple, raw: dict, params: ParamSource | None) -> dict:
    """pattern text -> groups -> the replacement evaluated, for each replacement of a rename whose
    ${...} read the pattern's groups (g1, g2, ...); errors point into the expression."""
    from archspec.language.values import evaluate_value

    renames = raw.get("rename")
    if not isinstance(renames, dict):
        return {}

    def evaluator(text: str, path: tuple):
        def evaluate(groups: dict, expand: Callable[[str], str]) -> str:
            """The file's text between the ${...} expanded as a template (its \\1s); each ${...}'s
            value, which holds text from the checkpoint's key, inserted literally."""
            env, pieces, last = _WithGroups(groups, params), [], 0
            for match in EXPRESSION.finditer(text):
                pieces.append(expand(text[last:match.start()]))
                pieces.append(str(_piece(match.group(0), match.start(), path, env)))
                last = match.end()
            pieces.append(expand(text[last:]))
            return "".join(pieces)
        return evaluate

    def _piece(expression: str, offset: int, path: tuple, env):
        try:
            return evaluate_value(expression, path, env, doc)
        except SpecError as exc:  # located within the piece: shift to where it is in the value
            raise SpecError([dataclasses.replace(d, loc=Loc(d.loc.file, d.loc.line, d.loc.col + offset))
                             if d.loc is not None else d for d in exc.diagnostics]) from None

    return {pattern: evaluator(text, base + ("rename", pattern)) for pattern, text in renames.items()
            if isinstance(text, str) and READS_GROUPS.search(text)}


def _evaluated(doc: Document, base: tuple, raw: Any, params: ParamSource | None) -> Any:
    """The rule with each `${...}` in its values evaluated over the spec's params, by the spec
    language's evaluator (archspec/language/expressions.py: a whitelisted AST, never eval); an
    error points into the expression."""
    found = _first_expression(raw, base)
    if found is None:
        return raw
    if params is None:
        raise error("this rule uses ${...}, which reads the spec's params, but the mapping file was read without a spec",
                    doc.loc(found), hint="load it for a spec (archspec build SPEC --weights FILE), whose params it reads")
    from archspec.language.values import evaluate_value  # the spec language's ${...}, located errors

    try:
        return evaluate_value(raw, base, params, doc)
    except SpecError as exc:
        names = params.names()
        hint = ("${...} in a rule is an expression of the spec's params, as in specs"
                + (f" (here: {', '.join(names[:12])}{', ...' if len(names) > 12 else ''})" if names else ""))
        raise SpecError([d if d.hint else dataclasses.replace(d, hint=hint) for d in exc.diagnostics]) from None


def _first_expression(value: Any, path: tuple) -> tuple | None:
    """The document path of the first value holding `${`, if any."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return path if isinstance(value, str) and "${" in value else None
    for key, item in items:
        found = _first_expression(item, path + (key,))
        if found is not None:
            return found
    return None


def _rule_kind(doc: Document, base: tuple, raw: dict) -> str:
    kinds = one_of(RULE_KINDS)
    if not raw:
        raise error(f"an empty rule; a rule is one of: {kinds}", doc.loc(base))
    for key in raw:
        if key not in RULE_KINDS:
            raise error(f"unknown rule '{key}'", doc.loc(base + (key,), key=True),
                        hint=did_you_mean(key, RULE_KINDS) or f"a rule is one of: {kinds}")
    if len(raw) > 1:
        second = list(raw)[1]
        raise error(f"a rule has one kind; this one has {' and '.join(raw)}", doc.loc(base + (second,), key=True),
                    hint="make each its own item of `rules` (they apply in order)")
    return next(iter(raw))
