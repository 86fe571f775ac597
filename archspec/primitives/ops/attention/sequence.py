"""What the sequence kinds (global, causal, sliding, cross) share: grouped-query attention,
rotary position embeddings, query/key normalisation, separate q/k/v biases, a head size of its
own, the score scale, an additive score-bias input, score parts (scores/), a key-padding mask
input, and `projections: external` (q, k and v made by other nodes, read as the first three
inputs: the kernel, its mask rule and parts over projections the node does not own)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, ClassVar, Literal, Union

from ....core.declared import Field
from ....core.suggestions import Remedy
from ....core.types import TensorType, dim_value
from ...base import Cost, Eps, PositiveInt, RuleError, SublayerParams, check_padding_mask
from ...counting import attention_flops
from .common import AttentionOp, AttentionParams
from .scores.base import ScoreSite, parse_scores


class SequenceParams(AttentionParams):
    qkv_bias: Union[bool, Literal["qv"]] = Field(True, description="true, false, or qv (query and value biases only)")
    kv_heads: PositiveInt | None = Field(
        None, description="heads of keys and values (grouped-query attention; 1: multi-query); default: heads")
    clip_qkv: float | None = Field(None, gt=0, allow_inf_nan=False,
                                   description="clamp the q, k and v projections' outputs to [-clip_qkv, clip_qkv] "
                                               "(DBRX, OLMo, MPT's clip_qkv); none: no clamp")
    clip_qkv_at: Literal["before_qk_norm", "after_qk_norm"] | None = Field(
        None, description="clip_qkv with qk_norm: clamp q and k before qk_norm (allenai's OLMo code) or after it "
                          "(Hugging Face's OLMoE); required where both are given, as the two give different "
                          "models")
    qk_norm: Literal["none", "layer", "rms"] = Field("none", description="normalise each head's queries and keys")
    qk_norm_eps: Eps = 1e-6
    qk_norm_over: Literal["head", "each_head", "all_heads"] = Field(
        "head", description="what qk_norm normalises and weighs: each head's head_dim values with one weight "
                            "[head_dim] for all heads (head: Qwen3; Gemma 3 with qk_norm_offset 1), with a weight "
                            "per head [heads, head_dim] (each_head: Cohere's use_qk_norm), or all heads' values "
                            "together, weight [heads * head_dim] for q and [kv_heads * head_dim] for k "
                            "(all_heads: OLMo 2)")
    qk_norm_bias: bool = Field(True, description="qk_norm: layer has a bias beside its weight (false: Cohere's)")
    qk_norm_affine: bool = Field(True, description="qk_norm's weight (and bias); false: neither, the norm alone (Llama "
                                                   "4's L2 norm of q and k: qk_norm: rms, qk_norm_affine: false)")
    qk_norm_at: Literal["before_rotary", "after_rotary"] = Field(
        "before_rotary", description="where qk_norm normalises q and k: before the rotary positions turn them "
                                     "(Qwen3, OLMo 2, Gemma 3) or after (HunYuan's query_layernorm and "
                                     "key_layernorm)")
    qk_norm_offset: float = Field(0.0, allow_inf_nan=False,
                                  description="qk_norm: rms weighs by offset + weight, the weight starting at 1 - "
                                              "offset (Gemma 3's q_norm and k_norm: 1.0, as norm_offset)")
    rope_theta: float | None = Field(None, gt=0, description="rotary position embedding base (e.g. 10000); none: no "
                                                             "rotary embedding")
    rope_dims: PositiveInt | None = Field(None, description="the first dims of each head the rotation covers "
                                                            "(default: all); its frequencies theta^(-2i/rope_dims)")
    rope_interleaved: bool = Field(False, description="rotate the pairs (2i, 2i + 1) of each head (GPT-J, Meta's "
                                                      "Llama code); false: (i, i + rope_dims/2) (GPT-NeoX, Hugging "
                                                      "Face's Llama)")
    rope_yarn: float | None = Field(None, gt=1, allow_inf_nan=False,
                                    description="YaRN's context-extension factor (Hugging Face's rope_type yarn, "
                                                "GPT-OSS): each frequency blended between theta^(-2i/d) / factor and "
                                                "theta^(-2i/d) along a linear ramp between the correction dims of "
                                                "rope_beta_fast and rope_beta_slow, cos and sin scaled by "
                                                "rope_attention_factor; none: plain rotary")
    rope_llama3: float | None = Field(None, gt=1, allow_inf_nan=False,
                                      description="Llama 3's frequency scaling factor (Hugging Face's rope_type llama3: "
                                                  "Llama 3.1 to 3.3, Apertus): frequencies whose wavelength is longer "
                                                  "than rope_original_length / rope_low_freq_factor divided by it, "
                                                  "those shorter than rope_original_length / rope_high_freq_factor "
                                                  "kept, those between blended smoothly; needs rope_original_length "
                                                  "(Llama 3.1's 8192); none: plain rotary")
    rope_linear: float | None = Field(None, gt=0, allow_inf_nan=False,
                                      description="linear position interpolation (Hugging Face's rope_type linear: "
                                                  "Gemma 3's full layers, 8): every frequency divided by this factor; "
                                                  "none: plain rotary")
    rope_low_freq_factor: float = Field(1.0, gt=0, allow_inf_nan=False, description="rope_llama3: low_freq_factor")
    rope_high_freq_factor: float = Field(4.0, gt=0, allow_inf_nan=False, description="rope_llama3: high_freq_factor")
    rope_original_length: PositiveInt = Field(4096, description="YaRN, LongRoPE, rope_llama3: the context length the "
                                                                "model was trained at (original_max_position_embeddings)")
    rope_short_factors: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] | None = Field(
        None, description="LongRoPE (Hugging Face's rope_type longrope: Phi-3, Phi-4-mini): each frequency "
                          "theta^(-2i/d) divided by the i-th factor (rope_dims / 2 of them), these for a call whose "
                          "furthest position is within rope_original_length, rope_long_factors beyond it; cos and "
                          "sin scaled by rope_attention_factor (required)")
    rope_long_factors: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] | None = Field(
        None, description="LongRoPE: the factors beyond rope_original_length (with rope_short_factors)")
    rope_beta_fast: float = Field(32.0, gt=0, allow_inf_nan=False,
                                  description="YaRN: rotations that bound the extrapolated (unscaled) dims")
    rope_beta_slow: float = Field(1.0, gt=0, allow_inf_nan=False,
                                  description="YaRN: rotations that bound the interpolated (scaled) dims")
    rope_truncate: bool = Field(True, description="YaRN: round the correction range out to whole dims (floor, ceil)")
    rope_attention_factor: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="YaRN: multiply cos and sin by this (default: 0.1 ln(factor) + "
                                                     "1); LongRoPE: the same, required (Hugging Face's default: "
                                                     "sqrt(1 + ln(max / original) / ln(original)) of the config's "
                                                     "max_position_embeddings and original_max_position_embeddings, "
                                                     "1 where they are equal)")
    rope_flat: bool = Field(False, description="allow rotary embeddings over tokens on a grid or with class tokens: "
                                               "each token is rotated by its index in the flattened sequence, "
                                               "class tokens included")
    padding_mask: bool = Field(False, description="read a key-padding mask [B, L] as the last input: 1 keeps a "
                                                  "key, 0 hides it")
    head_dim: PositiveInt | None = Field(None, description="width of each head (default: width / heads); the "
                                                           "projections then map width -> heads x head_dim -> width")
    scale: float | None = Field(None, gt=0, allow_inf_nan=False,
                                description="multiply the scores q·k^T by this (default: 1/sqrt(head width); T5: 1)")
    bias: bool = Field(False, description="read an additive score bias [B or 1, heads or 1, queries, keys] as the "
                                         "input after the token streams (a relative position bias node's output), "
                                         "added to the scaled scores q·k^T * scale")
    scores: list[Any] = Field(default_factory=list,
                              description="score parts, in order (those adding a bias first): a name (talking_heads) or "
                                          "{name: {options}}")


def projections_field():
    """`projections`: the option of the kinds that take q, k and v made by other nodes (global,
    causal, sliding, alibi)."""
    return Field("internal", description="internal: the node projects its tokens to q, k and v and back; external: "
                                         "it reads q [B, N, heads x head_dim], k [B, N, kv_heads x head_dim] and v "
                                         "[B, N, kv_heads x value width] as its first three inputs, made by any ops, "
                                         "and gives the heads' outputs [B, N, heads x value width] (no norm, "
                                         "residual or output projection): the fused kernel, its mask rule, score "
                                         "parts, rotary, qk_norm and generate's cache over projections of your own")


Projections = Literal["internal", "external"]


def qk_positions_field():
    """The option of the kinds whose queries and keys may read positions the values do not (global, cross)."""
    return Field(False, description="add position embeddings to the queries' and keys' inputs, not the values' "
                                    "(DETR's with_pos_embed, SAM's two-way transformer): read after the token "
                                    "streams, [B or 1, N, C] each; global reads one, cross two (the queries', then "
                                    "the memory's)")


# the options that belong to the node's own projections and sub-layer, which external ones leave out
# every option of the sub-layer (its norm and residual: res_scale was missing from a list written out
# here and was accepted, then ignored, the Doge trial), and those of the node's own projections
INTERNAL_ONLY = (*SublayerParams.model_fields, "qkv_bias", "proj_bias", "proj_drop", "clip_qkv", "clip_qkv_at",
                 "qk_positions")


ROTARY_HINT = ("rope_dims: the first dims of each head the rotation covers, head_dim x the factor (Hugging Face's "
               "partial_rotary_factor / rotary_pct: Phi, Persimmon, GPT-NeoX)")


class SequenceAttentionOp(AttentionOp):
    """The rules of the options every sequence kind takes."""

    Params = SequenceParams
    hides_keys: ClassVar[bool] = False  # the kind's own mask hides keys (causal, sliding, alibi, differential)
    key_hints: ClassVar[dict[str, str]] = {
        "partial_rotary_factor": ROTARY_HINT, "rotary_pct": ROTARY_HINT,
        "softcap": "a cap on the scores is the score part `scores: [{softcap: {cap: 50.0}}]` (Gemma 2's "
                   "attn_logit_softcapping; the logits' cap is the lm head's logits_softcap)",
        "window": "a causal window is `kind: sliding`; where layers alternate, `window: \"${4 if sliding else None}\"` "
                  "gives the other layers none (a None leaves an option out)"}

    def reads(self, p) -> tuple[str, ...]:
        return self.leading(p) + (("bias",) if p.bias else ()) + score_tensors(p) + \
            (("mask",) if p.padding_mask else ())

    def positions(self, p) -> tuple[str, ...]:
        """The position inputs added to the queries' and keys' inputs (qk_positions), one per
        token stream, read after the streams."""
        return ("positions",) if getattr(p, "qk_positions", False) else ()

    def leading(self, p) -> tuple[str, ...]:
        """The inputs before the score bias: the token streams and their positions."""
        return self.streams(p) + self.positions(p)

    def named_inputs(self, p) -> dict[int, tuple[str, str]]:
        """The score parts' tensors, named by their options, in `from:` after the token streams and
        the bias."""
        try:
            uses = parse_scores(p.scores)
        except RuleError:  # reads_problem says it
            return {}
        slot, named = len(self.leading(p)) + p.bias, {}
        for i, use in enumerate(uses):
            for name in getattr(use.params, "tensors", ()):
                named[slot] = (name, f"scores.{i}.{use.part.name}.{option_holding(use.params, name)}")
                slot += 1
        return named

    def more_inputs_hint(self, p, count: int) -> str | None:
        """The options that read more inputs (the UMT5 trial was told to drop its bias from
        `from:`): a score bias after the token streams, a padding mask last."""
        if count <= len(self.reads(p)):
            return None
        offered = (("`qk_positions: true` reads positions after the token streams",
                    getattr(p, "qk_positions", True)),
                   ("`bias: true` reads a score bias after the token streams", p.bias),
                   ("`padding_mask: true` a padding mask last", p.padding_mask))
        options = [o for o, given in offered if not given]
        return ", ".join(options) or None

    def reads_problem(self, p) -> RuleError | None:
        """A malformed score part: its tensors are inputs (a misspelt option gave a wrong count)."""
        try:
            parse_scores(p.scores)
        except RuleError as exc:
            return exc
        return None

    def streams(self, p) -> tuple[str, ...]:
        """The token streams the kind reads (before the padding mask): its tokens, or with external
        projections the queries, keys and values."""
        return ("q", "k", "v") if external(p) else ("x",)

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        """The tokens' shape; with external projections the queries' length and grid, heads x the
        value width wide (the heads' outputs, before any projection of yours)."""
        out = super().shape(p, inputs, ctx)
        if not external(p):
            warn_qk_norm_eps(p, ctx)
            return out
        v = inputs[2]
        width = p.heads * (v.channels // (p.kv_heads or p.heads))
        batch = external_batch(inputs[:3])  # a learned q (batch 1) asks every sample's keys
        return replace(out, shape=(batch, *out.shape[1:-1], width))  # [B, N, h*d] -> [B, N, h*dv]

    def head_dim(self, p, width: int) -> int:
        return p.head_dim or width // p.heads

    def kv_width(self, p, width: int) -> int:
        return self.head_dim(p, width) * (p.kv_heads or p.heads)

    def inner_width(self, p, width: int) -> int:
        return self.head_dim(p, width) * p.heads

    def score_site(self, p, inputs: list[TensorType]) -> ScoreSite:
        """Where the score parts work (window kinds give their window as the grid)."""
        x = inputs[0]
        first = len(self.leading(p)) + p.bias
        tensors = tuple(inputs[first:first + len(score_tensors(p))])
        return ScoreSite(p.heads, self.head_dim(p, x.channels), dim_value(x.length), self.keys(p, inputs), x.grid,
                         x, rotates=True, rope_theta=p.rope_theta, tensors=tensors, masks=True, scale=p.scale,
                         off_grid_keys=off_grid_keys(inputs) if external(p) else None)

    def check_something_hidden(self, uses) -> None:
        """A part that shows hidden keys again (blockwise) needs a mask that hides some: the kind's
        own (causal) or a part's (local_window); on global attention it changed nothing, silently
        (the Pixtral trial reached for it to keep packed images apart)."""
        seeing = [use for use in uses if use.part.sees_hidden_keys]
        if seeing and not (self.hides_keys or any(use.part.hides_keys for use in uses)):
            name = seeing[0].part.name
            raise RuleError(f"{name} lets a query see keys the mask hides, within its block, and {self.kind} attention "
                            "hides no key here: it would change nothing", field="scores",
                            hint=Remedy(f"use {name} on causal or sliding attention (a prefix or an image seen both "
                                        "ways), or beside local_window; to keep each block to itself (images packed "
                                        "into one sequence), hide the keys of other blocks with a `mod` score part "
                                        "reading the ids (cast to float) at the query's and the key's place"))

    def core_cost(self, p, inputs: list[TensorType]) -> Cost:
        x = inputs[0]
        head = self.head_dim(p, x.channels)
        core = super().core_cost(p, inputs)
        flops = core.flops * self.inner_width(p, x.channels) // x.channels  # the products run over h x d
        norms = qk_norm_params(p, head)
        params, buffers = core.params + norms, core.buffer_bytes
        site = self.score_site(p, inputs)
        for use in parse_scores(p.scores):
            part = use.part.cost(use.params, site)
            params, flops, buffers = params + part.params, flops + part.flops, buffers + part.buffer_bytes
        return Cost(params, flops, buffers)

    def check(self, p, inputs: list[TensorType]) -> None:
        x = inputs[0]
        head = self.head_dim(p, x.channels)
        if external(p):
            self.check_external(p, inputs)
        site = self.score_site(p, inputs)
        uses = parse_scores(p.scores)
        for use in uses:
            use.check(site)
        self.check_something_hidden(uses)
        streams = len(self.streams(p))
        for stream, positions in zip(inputs[:streams], inputs[streams:len(self.leading(p))]):
            check_positions(stream, positions)
        if p.bias:
            check_score_bias(inputs[len(self.leading(p))], p.heads, x.length, inputs[streams - 1].length)
        if p.kv_heads is not None and p.heads % p.kv_heads:
            fits = ", ".join(str(d) for d in range(1, p.heads + 1) if p.heads % d == 0)
            raise RuleError(f"{p.kv_heads} key/value heads do not divide the {p.heads} query heads", field="kv_heads",
                            hint=f"each key/value head serves an equal group of query heads: kv_heads is one of "
                                 f"{fits}")
        check_qk_norm(p)
        check_clip_qkv(p)
        if p.rope_theta is None and p.rope_dims is not None:
            raise RuleError("rope_dims goes with rope_theta", field="rope_dims")
        if p.rope_theta is None and p.rope_flat:
            raise RuleError("rope_flat goes with rope_theta", field="rope_flat")
        if p.rope_theta is None and p.rope_interleaved:
            raise RuleError("rope_interleaved goes with rope_theta", field="rope_interleaved")
        if p.rope_theta is None and p.rope_yarn is not None:
            raise RuleError("rope_yarn goes with rope_theta", field="rope_yarn")
        check_longrope(p, (p.rope_dims or head) if p.rope_theta is not None else None)
        check_llama3(p)
        check_linear(p)
        if p.rope_yarn is None:
            longrope = LONGROPE_OPTIONS if p.rope_short_factors is not None else ()
            longrope += ("rope_original_length",) if p.rope_llama3 is not None else ()
            for name in YARN_OPTIONS:  # given a value (a none is not given: a layer without the scaling)
                if name in p.model_fields_set and getattr(p, name) is not None and name not in longrope:
                    also = ", LongRoPE's factors" if name in LONGROPE_OPTIONS else ""
                    also += ", `rope_llama3: <factor>` (Llama 3)" if name == "rope_original_length" else ""
                    scalings = ["rope_yarn", *(["rope_llama3"] if name == "rope_original_length" else []),
                                *(["LongRoPE's factors"] if name in LONGROPE_OPTIONS else [])]
                    raise RuleError(f"{name} goes with {' or '.join(scalings)}", field=name,
                                    hint=Remedy(f"give `rope_yarn: <factor>` (YaRN){also}, or drop it"))
        if p.rope_theta is not None and not p.rope_flat:
            check_rope_sequence(x)
        if p.rope_theta is not None:
            dims = p.rope_dims or head
            if not p.rope_dims and head % 2:
                raise RuleError(f"rotary positions turn pairs of a head's channels, and the head width is {head}, "
                                "odd", field="head_dim" if p.head_dim else "heads",
                                hint="an even head_dim, or rope_dims: an even number of channels to rotate")
            if dims > head or dims % 2:
                raise RuleError(f"rope_dims {dims} must be even and at most the head width {head}",
                                field="rope_dims")
        if p.padding_mask:
            check_padding_mask(inputs[-1], inputs[streams - 1].length)

    def value_range(self, p, slot: int, ctx) -> int | None:
        return 2 if p.padding_mask and slot == len(self.reads(p)) - 1 else None  # the mask is 0 or 1

    def check_external(self, p, inputs: list[TensorType]) -> None:
        """External projections (the kinds whose params take `projections`: global, causal, sliding,
        alibi): none of the options of the node's own projections and sub-layer, and q, k and v whose
        widths split into the heads, of one length (global attention: k and v of one length, q of
        its own, without rotary positions)."""
        for name in INTERNAL_ONLY:
            if name in p.model_fields_set:
                raise RuleError(f"{name} belongs to the node's own projections and sub-layer, which external "
                                "projections leave out", field=name,
                                hint="drop it: make q, k and v, the norm before and the output projection and "
                                     "residual after, with nodes of their own")
        q, k, v = inputs[:3]
        kv_heads = p.kv_heads or p.heads
        head = self.head_dim(p, q.channels)
        if p.heads * head != q.channels:
            raise RuleError(f"external q is {q.channels} wide, and {p.heads} heads of head_dim {head} make "
                            f"{p.heads * head}", field="head_dim", hint="drop head_dim: q's width over the heads is it")
        for name, t in (("k", k), ("v", v)):
            if t.layout != "tokens":
                raise RuleError(f"external {name} must be tokens [B, N, C], got {t.layout_name()} {t.describe()}",
                                field="from", hint="a rearrange with `as: tokens` makes a rank-3 tensor tokens")
            if t.length != q.length:
                self.check_other_length(p, name, t, q, k)
        if k.channels != kv_heads * head:
            raise RuleError(f"external k is {k.channels} wide, and {kv_heads} key heads of q's head width {head} "
                            f"({q.channels} / {p.heads} heads) make {kv_heads * head}", field="from",
                            hint="q and k share the head width; kv_heads sets the key and value heads")
        if v.channels % kv_heads:
            raise RuleError(f"external v is {v.channels} wide, which {kv_heads} value heads do not divide",
                            field="from")

    def check_other_length(self, p, name: str, t: TensorType, q: TensorType, k: TensorType) -> None:
        """External k or v of another length than q: global attention over keys of their own
        (Funnel's pooled queries, Nystromformer's landmarks), k and v of one length, no rotary
        positions (q's and k's would count from 0 apart); the other kinds' masks order one sequence."""
        if self.kind != "global":
            raise RuleError(f"external {name} has {t.length} tokens and q {q.length}: {self.kind} attention's keys "
                            "are its queries' tokens", field="from",
                            hint="kind: global takes keys and values of a length of their own")
        if name == "v" and t.length != k.length:
            raise RuleError(f"external v has {t.length} tokens and k {k.length}: each key has its value",
                            field="from")
        if p.rope_theta is not None:
            raise RuleError(f"rotary positions turn q and k at their own positions, and external q has {q.length} "
                            f"tokens and {name} {t.length}", field="rope_theta",
                            hint="rotate q and k with nodes of their own, or give them one length")

    def keys(self, p, inputs: list[TensorType]) -> int:
        """The keys: external k's tokens (which may be as many as q's or not), else x's."""
        return dim_value(inputs[1].length) if external(p) else super().keys(p, inputs)

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        """As every kind's; with external projections the kernel's products (and the score parts
        and q/k norms) alone: q·k over the heads' q width, the weights times v over their v width."""
        if not external(p):
            return super().cost(p, inputs, out, ctx)
        q, v = inputs[0], inputs[2]
        queries, keys = dim_value(q.length), self.keys(p, inputs)
        core = self.core_cost(p, inputs)  # the parts' and norms' params, over q's width
        products = 2 * queries * keys * (q.channels + p.heads * (v.channels // (p.kv_heads or p.heads)))
        flops = core.flops - attention_flops(queries, keys, q.channels) + products
        return Cost(core.params, flops, core.buffer_bytes, self.score_bytes(p, inputs))


def off_grid_keys(inputs: list[TensorType]) -> str | None:
    """External k and v as words where either is not tokens of q's grid (and prefix), else None."""
    q = inputs[0]
    for name, t in (("k", inputs[1]), ("v", inputs[2])):
        if t.grid != q.grid or t.prefix != q.prefix:
            return f"{name} {t.describe()}" + ("" if t.grid else " on no grid")  # describe() names a grid
    return None


def external_batch(streams: list[TensorType]):
    """The batch of external q, k and v: the one that is not 1 (a learned query's batch is 1, and
    it is asked by every sample's keys: AIMv2's pooling head), else 1."""
    return next((t.shape[0] for t in streams if t.shape[0] != 1), 1)


def external(p) -> bool:
    """Whether the node reads q, k and v made outside it (`projections: external`)."""
    return getattr(p, "projections", "internal") == "external"


def external_cache_entry(p, types: list[TensorType]) -> tuple[int, int, int] | None:
    """SelfCache's entry_of_types: with external projections, (key/value heads, key width, value
    width) from k's and v's widths; else None (the kind's own)."""
    if not external(p):
        return None
    kv_heads = p.kv_heads or p.heads
    return kv_heads, types[1].channels // kv_heads, types[2].channels // kv_heads


def check_positions(stream: TensorType, positions: TensorType) -> None:
    """qk_positions: a stream's positions are float [B or 1, its length, its width]."""
    want = f"[B or 1, {stream.length}, {stream.channels}]"
    if positions.dtype == "int64" or len(positions.shape) != 3:
        raise RuleError(f"positions added to queries and keys must be a float tensor {want}, got "
                        f"{positions.layout_name()} {positions.describe()}", field="from")
    batch, length, width = positions.shape
    if length != stream.length or width != stream.channels or (batch != 1 and batch != stream.shape[0]):
        raise RuleError(f"positions {positions.describe()} do not fit the tokens {stream.describe()} they are "
                        f"added to (want {want})", field="from",
                        hint="with qk_positions, `from:` lists the token streams, then one position tensor each")


def qk_norm_params(p, head: int) -> int:
    """The weights (and biases) of q_norm and k_norm: per head_dim, per head or over all heads."""
    if p.qk_norm == "none" or not p.qk_norm_affine:
        return 0
    per_value = 2 if p.qk_norm == "layer" and p.qk_norm_bias else 1  # a weight, and a bias
    if p.qk_norm_over == "head":
        return 2 * per_value * head
    return per_value * head * (p.heads + (p.kv_heads or p.heads))  # q's heads and k's heads


def check_qk_norm(p) -> None:
    for name in ("qk_norm_over", "qk_norm_bias", "qk_norm_offset", "qk_norm_eps", "qk_norm_affine", "qk_norm_at"):
        if p.qk_norm == "none" and name in p.model_fields_set:
            kinds = "`qk_norm: rms`" if name == "qk_norm_offset" else "`qk_norm: layer` or `rms`"
            raise RuleError(f"{name} goes with qk_norm", field=name, hint=Remedy(f"give {kinds}"))
    if not p.qk_norm_affine:
        for name in ("qk_norm_bias", "qk_norm_offset"):
            if name in p.model_fields_set:
                raise RuleError(f"{name} goes with a weighted qk_norm, and qk_norm_affine: false has no weight",
                                field=name)
    if p.qk_norm == "rms" and "qk_norm_bias" in p.model_fields_set:
        raise RuleError("qk_norm_bias goes with qk_norm: layer (an rms norm has no bias)", field="qk_norm_bias")
    if p.qk_norm != "rms" and "qk_norm_offset" in p.model_fields_set:
        raise RuleError("qk_norm_offset goes with qk_norm: rms (Gemma's (offset + weight) RMSNorm)",
                        field="qk_norm_offset", hint=Remedy("give `qk_norm: rms`, or drop qk_norm_offset"))


def warn_qk_norm_eps(p, ctx) -> None:
    """qk_norm_eps left at its default (1e-6) beside a layer norm of another epsilon (the node's
    own norm, or the norm node it reads) is told: the models that have q/k norms give them the
    layers' epsilon (StableLM's layer_norm_eps, Qwen3's and OLMo 2's rms_norm_eps), and the
    StableLM trial's spec built silently 1.8e-4 off at 1e-5 (1.9e-2 at 1e-3)."""
    if p.qk_norm == "none" or "qk_norm_eps" in p.model_fields_set:
        return
    layer_eps = norm_eps_read(p, ctx)
    if layer_eps is not None and layer_eps != p.qk_norm_eps:
        ctx.warn(f"qk_norm_eps is {p.qk_norm_eps:g} by default, and the layer's norm has eps {layer_eps:g}: the "
                 "models with q/k norms (StableLM, Qwen3, OLMo 2) give them the layers' epsilon",
                 field="qk_norm", hint=f"give `qk_norm_eps: {layer_eps:g}` (or `qk_norm_eps: {p.qk_norm_eps:g}` "
                                       "where the reference's is that)")


def norm_eps_read(p, ctx) -> float | None:
    """The epsilon of the layer norm before the attention: its own (`norm` other than none), or
    that of the norm node its tokens come from; None when there is none."""
    if p.norm != "none":
        return p.norm_eps
    source = ctx.node_named(ctx.node.inputs[0]) if ctx.node.inputs else None
    if source is None or source.is_input or getattr(source.op, "primitive", None) != "norm":
        return None
    return getattr(source.params, "eps", None)


def check_clip_qkv(p) -> None:
    """clip_qkv_at goes with clip_qkv and qk_norm, and where both are given it must be said: the
    OLMoE trial's clamp fell before qk_norm, Hugging Face's after it, and the model built silently."""
    where = "clip_qkv_at" in p.model_fields_set
    if where and p.clip_qkv is None:
        raise RuleError("clip_qkv_at goes with clip_qkv", field="clip_qkv_at", hint=Remedy("give clip_qkv"))
    if where and p.qk_norm == "none":
        raise RuleError("clip_qkv_at says where the clamp falls against qk_norm, and there is no qk_norm",
                        field="clip_qkv_at", hint=Remedy("drop clip_qkv_at, or give `qk_norm: layer` or `rms`"))
    if p.clip_qkv is not None and p.qk_norm != "none" and not where:
        raise RuleError("clip_qkv with qk_norm: say whether q and k are clamped before qk_norm or after it; the two "
                        "give different models", field="clip_qkv",
                        hint=Remedy("give `clip_qkv_at: before_qk_norm` (allenai's OLMo code) or "
                                    "`clip_qkv_at: after_qk_norm` (Hugging Face's OLMoE)"))


def reads_padding_mask(p) -> bool:
    """SelfCache's key_padding (decoding.py): the node's last input is its key-padding mask."""
    return p.padding_mask


YARN_OPTIONS = ("rope_original_length", "rope_beta_fast", "rope_beta_slow", "rope_truncate", "rope_attention_factor")
LONGROPE_OPTIONS = ("rope_original_length", "rope_attention_factor")  # YaRN's that LongRoPE reads too


def check_llama3(p) -> None:
    """Llama 3's scaling: with rope_theta, alone among the scalings, its original length given (its
    default is YaRN's 4096; Llama 3.1's is 8192), the low factor below the high one."""
    if p.rope_llama3 is None:
        for name in ("rope_low_freq_factor", "rope_high_freq_factor"):
            if name in p.model_fields_set:
                raise RuleError(f"{name} goes with rope_llama3", field=name,
                                hint=Remedy("give `rope_llama3: <factor>` (Llama 3's scaling), or drop it"))
        return
    if p.rope_theta is None:
        raise RuleError("rope_llama3 goes with rope_theta", field="rope_llama3")
    if p.rope_yarn is not None or p.rope_short_factors is not None:
        other = "rope_yarn" if p.rope_yarn is not None else "LongRoPE's factors"
        raise RuleError(f"rope_llama3 and {other} are two scalings of the same frequencies: give one",
                        field="rope_llama3")
    if "rope_original_length" not in p.model_fields_set:
        raise RuleError("rope_llama3 needs rope_original_length", field="rope_llama3",
                        hint=Remedy("the config's rope_scaling original_max_position_embeddings (Llama 3.1: 8192)"))
    if p.rope_low_freq_factor >= p.rope_high_freq_factor:
        raise RuleError(f"rope_low_freq_factor {p.rope_low_freq_factor:g} must be below rope_high_freq_factor "
                        f"{p.rope_high_freq_factor:g}", field="rope_low_freq_factor")


def check_linear(p) -> None:
    """Linear interpolation: with rope_theta, and the one scaling of the frequencies."""
    if p.rope_linear is None:
        return
    if p.rope_theta is None:
        raise RuleError("rope_linear goes with rope_theta", field="rope_linear")
    others = [name for name, given in (("rope_yarn", p.rope_yarn), ("rope_llama3", p.rope_llama3),
                                       ("LongRoPE's factors", p.rope_short_factors)) if given is not None]
    if others:
        raise RuleError(f"rope_linear and {others[0]} are two scalings of the same frequencies: give one",
                        field="rope_linear")


def check_longrope(p, dims: int | None) -> None:
    """LongRoPE's factors: both lists, rope_dims / 2 each, with rope_theta and an attention factor, not with YaRN."""
    short, long = p.rope_short_factors, p.rope_long_factors
    if short is None and long is None:
        return
    given = "rope_short_factors" if short is not None else "rope_long_factors"
    if short is None or long is None:
        other = "rope_long_factors" if short is not None else "rope_short_factors"
        raise RuleError(f"{given} goes with {other} (LongRoPE takes both lists)", field=given)
    if dims is None:
        raise RuleError(f"{given} goes with rope_theta", field=given)
    if p.rope_yarn is not None:
        raise RuleError("rope_yarn and LongRoPE's factors are two scalings of the same frequencies: give one",
                        field="rope_yarn")
    for name, factors in (("rope_short_factors", short), ("rope_long_factors", long)):
        if len(factors) != dims // 2:
            raise RuleError(f"{name} has {len(factors)} factors and the rotation {dims // 2} frequencies "
                            f"(rope_dims / 2)", field=name,
                            hint="one factor per frequency, as the config's short_factor and long_factor lists")
    if p.rope_attention_factor is None:
        raise RuleError("LongRoPE needs rope_attention_factor", field=given,
                        hint=Remedy("Hugging Face's default is sqrt(1 + ln(max / original) / ln(original)) of the "
                                    "config's max_position_embeddings and original_max_position_embeddings (1 where "
                                    "they are equal); give that number"))


def longrope_refill(p) -> int | None:
    """SelfCache's refill: one past LongRoPE's original length, where every key is rotated again
    with the long factors (the long ones apply once the furthest position passes it); else None."""
    return p.rope_original_length + 1 if p.rope_long_factors is not None else None


def option_holding(params, name: str) -> str:
    """The dotted option of a score part's params that gives the tensor `name` (`embeddings`,
    `tensors.1`), for an error to point at."""
    for option, value in params.model_dump().items():
        if value == name:
            return option
        if isinstance(value, list) and name in value:
            return f"{option}.{value.index(name)}"
    return ""


def score_tensors(p) -> tuple[str, ...]:
    """The inputs the score parts read by name (`mod`'s tensors), in order, after the score bias."""
    try:
        uses = parse_scores(p.scores)
    except RuleError:  # the shape rule reports it, located
        return ()
    return tuple(name for use in uses for name in getattr(use.params, "tensors", ()))


def check_score_bias(bias: TensorType, heads: int, queries, keys) -> None:
    """An additive score bias is [B or 1, heads or 1, queries, keys]."""
    want = f"[B or 1, {heads} or 1, {queries}, {keys}]"
    if bias.dtype != "float32" or len(bias.shape) != 4:
        raise RuleError(f"the score bias must be a float tensor {want}, got {bias.layout_name()} "
                        f"{bias.describe()}", field="from",
                        hint=Remedy("feed the output of a relative_bias node (or any [1, h, N, M] tensor)"))
    _, h, n, m = bias.shape
    if h not in (1, heads) or n != queries or m != keys:
        hint = (f"the node that makes the bias gives {h} heads, and this attention has {heads}: give that node "
                f"`heads: {heads}` (a relative_bias's)" if h not in (1, heads) else None)
        raise RuleError(f"the score bias {bias.describe()} does not fit scores {want}", field="from", hint=hint)


def check_rope_sequence(x: TensorType) -> None:
    """Rotary embeddings (rope_theta) rotate each token by its index in a 1-D sequence: over a
    token grid that index is the flattened (row-major) position, and class tokens are rotated
    as the first positions. Both are errors unless `rope_flat: true` says that is meant."""
    if not x.grid and not x.prefix:
        return
    if x.grid:
        h, w = x.grid
        what = (f"these tokens lie on a {h}x{w} grid: each patch would be rotated by its row-major index "
                f"(a patch and the one below it {w} positions apart)")
        if x.prefix:
            what += ", and " + _rotated_prefix(x.prefix)
    else:
        what = f"these tokens begin with class tokens: {_rotated_prefix(x.prefix)}"
    raise RuleError(f"rope_theta rotates tokens by their index in a 1-D sequence, but {what}", field="rope_theta",
                    hint=Remedy("give image tokens 2-D positions (patchify's `pos: learned` or `sincos`, or 2-D "
                                "rotary positions: `scores: [rotary_grid]` instead of rope_theta), or set "
                                "`rope_flat: true` if the model really rotates the flattened positions (class "
                                "tokens included)"))


def _rotated_prefix(prefix: int) -> str:
    return ("the class token as position 0" if prefix == 1
            else f"the {prefix} class tokens as positions 0..{prefix - 1}")


def check_sequence(x: TensorType, kind: str, p) -> None:
    """Causal kinds order tokens in a sequence; a grid of image patches has no such order."""
    if x.grid and not p.over_grid:
        raise RuleError(f"{kind} attention orders tokens in a sequence, and these tokens lie on a "
                        f"{x.grid[0]}x{x.grid[1]} grid (image patches)", field="kind",
                        hint=Remedy("use global or window attention for image tokens, or set `over_grid: true` "
                                    "if a causal order over the patches is what you mean"))
