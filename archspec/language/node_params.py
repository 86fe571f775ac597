"""A primitive node's parameters, checked against its op: the `kind` picks the op of a
primitive with kinds, then the op's parameter model validates the values (already evaluated,
so `${...}` may give any of them, `kind` included)."""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin

from ..core.declared import ValidationError
from ..core.errors import SpecError, error
from ..core.words import DidYouMean, did_you_mean, one_of
from ..primitives import registry
from ..primitives.base import Op
from .loader import Document
from .validation import diagnostics_from, field_names


def op_for(primitive: str, values: dict, doc: Document, base: tuple, node_path: str) -> Op:
    """The op a node of `primitive` with these parameter values runs."""
    if not registry.has_kinds(primitive):
        return registry.op(primitive)
    kinds = registry.kinds(primitive)
    if "kind" not in values and registry.default_kind(primitive) is not None:
        return registry.op(primitive, registry.default_kind(primitive))
    if "kind" not in values:
        raise error(f"missing `kind` of {primitive}", doc.loc(base), node_path, f"kinds: {one_of(kinds)}")
    kind = values["kind"]
    if not isinstance(kind, str) or kind not in kinds:
        shown = kind if isinstance(kind, str) else repr(kind)
        raise error(f"unknown kind '{shown}' of {primitive}", doc.loc(base + ("kind",)), node_path,
                    called_elsewhere(shown, primitive) or did_you_mean(shown, kinds) or f"kinds: {one_of(kinds)}")
    return registry.op(primitive, kind)


def called_elsewhere(word: str, primitive: str) -> str | None:
    """The kind of `primitive` that other libraries call `word` (the ops' also_called), in a hint."""
    for kind in registry.kinds(primitive):
        whose = registry.op(primitive, kind).also_called.get(word.lower())
        if whose is not None:
            return f"'{word}' is {whose}: here `kind: {kind}`"
    return None


# Hugging Face's config names of fixed multipliers -> (the option that says it here, the hint): the
# Granite trial's residual_multiplier was offered residual_gate, its logits_scaling logits_softcap
# (which built, 5.78 off), and attention_multiplier nothing
CONFIG_NAMES: dict[str, tuple[str, str]] = {
    "residual_multiplier": ("branch_scale", "Hugging Face's residual_multiplier (Granite) is `branch_scale: <it>` "
                                            "here, on each sub-layer: the branch times it before the add"),
    "logits_scaling": ("logits_divisor", "Hugging Face's logits_scaling (Granite) is `logits_divisor: <it>`: the "
                                         "logits divided by it (logits_softcap is Gemma's tanh cap, another model)"),
    "attention_multiplier": ("scale", "Hugging Face's attention_multiplier (Granite) is `scale: <it>`: the scores' "
                                      "scale in place of 1/sqrt(head_dim)"),
    "query_pre_attn_scalar": ("scale", "Hugging Face's query_pre_attn_scalar (Gemma 2 and 3) is `scale: "
                                       "${<it> ** -0.5}`: the scores scaled by its inverse square root"),
    "embedding_multiplier": ("multiplier", "Hugging Face's embedding_multiplier (Granite) is `multiplier: <it>`"),
}


def where_key_belongs(op: Op, key: str) -> str | None:
    """Where an unknown key of `op` belongs, when it is a parameter or an op elsewhere: `window`
    under `kind: global` (other kinds of the same primitive), `qkv_bias` on mlp (another
    primitive), `mask_token` under patchify (an op of its own); a close key of the op's own comes
    first (`rope_dim` under causal attention: did you mean 'rope_dims'?, though latent has a
    `rope_dim`). None: the key is nobody's, so a did-you-mean over the op's own keys fits best."""
    named = CONFIG_NAMES.get(key)
    if named is not None and named[0] in field_names(op.Params):
        return named[1]
    elsewhere = owner_of_key(op, key)
    if key in op.key_hints:
        return f"{elsewhere}; {op.key_hints[key]}" if elsewhere else op.key_hints[key]
    if elsewhere is None or elsewhere.startswith(f"'{key}' is an op"):
        return elsewhere
    own = did_you_mean(key, field_names(op.Params), cutoff=0.7)
    if own is not None:
        return DidYouMean(own.written, own.meant, f"({elsewhere})")
    return elsewhere


def owner_of_key(op: Op, key: str) -> str | None:
    """Which other kinds, primitives or op name `key` is, in words (where_key_belongs)."""
    primitive = op.primitive
    if registry.has_kinds(primitive):
        kinds = [k for k in registry.kinds(primitive) if key in field_names(registry.op(primitive, k).Params)]
        if kinds:
            return f"'{key}' is a parameter of kind{'s' if len(kinds) > 1 else ''} {one_of(kinds)}"
    owners = list(dict.fromkeys(o.primitive for o in registry.ops()
                                if o.primitive != primitive and key in field_names(o.Params)))
    if owners:
        return f"'{key}' is a parameter of {one_of(owners)}, not of {primitive}"
    if key in registry.primitives():
        hint = f"'{key}' is an op: give it a node of its own (`- {key}: {{...}}`)"
        short = [f for f in field_names(op.Params) if key.startswith(f) or f.startswith(key)]
        return hint + (f"; or did you mean '{short[0]}'?" if short else "")
    return None


def without_other_kinds_nones(op: Op, values: dict) -> dict:
    """The values less each option that is none and that only other kinds of the primitive take,
    so that one node may switch kinds by layer: `kind: "${'sliding' if i % 2 == 0 else 'causal'}"`
    with `window: "${window if i % 2 == 0 else None}"` (Gemma 2's layer_types). An option of none
    that no kind takes (a misspelt name) stays, for the check to refuse."""
    if not registry.has_kinds(op.primitive):
        return values
    own = set(field_names(op.Params))
    others = {name for kind in registry.kinds(op.primitive) for name in field_names(registry.op(op.primitive, kind).Params)}
    return {key: value for key, value in values.items()
            if not (value is None and key not in own and key in others)}


def without_nones_for_defaults(op: Op, values: dict) -> dict:
    """The values less each option that is none where its field takes no none but has a default:
    left out, its default holds, so one node may give an option on some layers only
    (`res_post_init: "${'ones' if swin_norm else None}"`, the Chameleon trial; OLMo 3's
    `rope_original_length` on its full-attention layers alone). A field that takes none keeps it."""
    declared = op.Params._declared()
    kept = {}
    for key, value in values.items():
        name = declared.keys.get(key)
        if value is None and name is not None and none_keeps_default(declared.fields[name]):
            continue
        kept[key] = value
    return kept


def none_keeps_default(field) -> bool:
    """Whether a none given for `field` is left out, its default holding: it has one, and takes no none."""
    return not field.is_required() and not takes_none(field)


def none_for_a_default(op: Op, values: dict) -> tuple[str, Any] | None:
    """(option, its default) of the first option an expression gave None (its default holds) whose
    values hold 'none' beside another default: `norm: "${'res_post' if post else None}"` built the
    default pre-norm where 'none' (no norm) was meant (the EXAONE 4 trial), so None is refused there."""
    declared = op.Params._declared()
    for key, value in values.items():
        name = declared.keys.get(key)
        if value is not None or name is None:
            continue
        field = declared.fields[name]
        if none_keeps_default(field) and "none" in literal_values(field.annotation) and field.get_default() != "none":
            return key, field.get_default()
    return None


def literal_values(annotation) -> set:
    """The Literal values an annotation allows, through unions."""
    if get_origin(annotation) is Literal:
        return set(get_args(annotation))
    return {v for member in get_args(annotation) for v in literal_values(member)}


def takes_none(field) -> bool:
    errors: list = []
    field._validate(None, (), errors)
    return not errors


def node_params(primitive: str, values: Any, doc: Document, base: tuple, node_path: str) -> tuple[Op, Any]:
    """(op, validated params) of a primitive node."""
    if not isinstance(values, dict):
        raise error(f"{primitive} takes a mapping of parameters", doc.loc(base), hint=f"e.g. `- {primitive}: {{...}}`")
    op = op_for(primitive, values, doc, base, node_path)
    taken = without_other_kinds_nones(op, values)
    ambiguous = none_for_a_default(op, taken)
    if ambiguous is not None:
        key, default = ambiguous
        raise error(f"`{key}` is None here (from an expression), which keeps its default, {default!r}; and {key} "
                    "also takes 'none'", doc.loc(base + (key,)), node_path,
                    hint=f"write 'none' where none is meant, or {default!r} for the default")
    try:
        return op, op.Params.model_validate(without_nones_for_defaults(op, taken))
    except ValidationError as exc:
        what = f"{primitive} (kind {op.kind})" if op.kind else primitive
        raise SpecError(diagnostics_from(exc, values, doc, base, op.Params, what, node_path,
                                         elsewhere=lambda key: where_key_belongs(op, key))) from None


def misplaced_parameter(key: str) -> str | None:
    """A hint for a primitive's parameter written where an op belongs (`- ratio: 4` for `- mlp: ...`)."""
    owners = list(dict.fromkeys(o.primitive for o in registry.ops() if key in field_names(o.Params)))
    if not owners:
        return None
    return f"'{key}' is a parameter of {one_of(owners)}; put it under its op, e.g. `{owners[0]}: {{{key}: ...}}`"
