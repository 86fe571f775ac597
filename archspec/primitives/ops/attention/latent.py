"""latent: multi-head latent attention (MLA; DeepSeek-V2, DeepSeek-V3), causal.

Queries come through a low-rank bottleneck (q_a, an RMSNorm, q_b; or one projection without
`q_rank`), each head's query `nope_dim + rope_dim` wide. Keys and values come from one latent
per token: kv_a gives a `kv_rank`-wide latent (then an RMSNorm) and a `rope_dim`-wide rotary key
shared by every head; kv_b expands the latent to each head's `nope_dim` key part and `v_dim`
value. A head's key is [its nope part, the shared rotary part], its value narrower or wider than
the key (`v_dim`). Rotary positions turn only the rope parts. The scores are scaled by
1/sqrt(nope_dim + rope_dim) unless `scale` says otherwise (YaRN's mscale: Hugging Face's
DeepseekV3 multiplies it by mscale^2).

generate() caches the latent and the rotary key (kv_rank + rope_dim numbers per token and layer,
not the expanded keys and values), and expands them at every step.
"""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.suggestions import Remedy
from ....core.types import TensorType, dim_value
from ...base import Cost, Eps, PositiveInt, RuleError, sublayer_params
from ...counting import linear_flops, linear_params
from ...decoding import SelfCache, register_decoding
from ...registry import register
from .common import AttentionOp, AttentionParams
from .sequence import SequenceParams, YARN_OPTIONS, check_sequence

_SEQ = SequenceParams.model_fields


class LatentParams(AttentionParams):
    kind: Literal["latent"]
    qkv_bias: bool = Field(False, description="biases on q_a and kv_a (DeepSeek's attention_bias); q_b, kv_b and "
                                              "a single query projection (no q_rank) have none, as DeepSeek's")
    proj_bias: bool = Field(False, description="a bias on the output projection (DeepSeek's attention_bias)")
    q_rank: PositiveInt | None = Field(None, description="width of the queries' low-rank bottleneck (q_lora_rank): "
                                                         "q_a, an RMSNorm, q_b; none: one query projection")
    kv_rank: PositiveInt = Field(description="width of the key/value latent (kv_lora_rank), what generate caches")
    nope_dim: PositiveInt = Field(description="each head's key/query part without rotary positions "
                                              "(qk_nope_head_dim)")
    rope_dim: PositiveInt = Field(description="each head's rotary part (qk_rope_head_dim); the key's is shared "
                                              "by the heads")
    v_dim: PositiveInt = Field(description="each head's value width (v_head_dim)")
    latent_eps: Eps = Field(1e-6, description="eps of the RMSNorms on the query bottleneck and the latent")
    rope_theta: float = Field(10000.0, gt=0, description="rotary position embedding base")
    rope_interleaved: bool = Field(True, description="rotate the pairs (2i, 2i + 1) of the rope part (DeepSeek's "
                                                     "rope_interleave, the default); false: (i, i + rope_dim/2)")
    rope_yarn: float | None = _SEQ["rope_yarn"]
    rope_original_length: PositiveInt = _SEQ["rope_original_length"]
    rope_beta_fast: float = _SEQ["rope_beta_fast"]
    rope_beta_slow: float = _SEQ["rope_beta_slow"]
    rope_truncate: bool = _SEQ["rope_truncate"]
    rope_attention_factor: float | None = _SEQ["rope_attention_factor"]
    over_grid: bool = Field(False, description="allow a causal order over tokens on a grid (image patches)")
    scale: float | None = Field(None, gt=0, allow_inf_nan=False,
                                description="multiply the scores by this (default: 1/sqrt(nope_dim + rope_dim); "
                                            "DeepSeek with YaRN: that times mscale^2, mscale = 0.1 mscale_all_dim "
                                            "ln(factor) + 1)")


def query_width(p) -> int:
    """Each head's query and key width."""
    return p.nope_dim + p.rope_dim


class LatentAttentionOp(AttentionOp):
    """Causal attention with low-rank queries and a shared key/value latent (DeepSeek's MLA)."""

    kind = "latent"
    Params = LatentParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if x.layout != "tokens":
            raise RuleError(f"attention reads tokens, got {x.layout_name()}",
                            hint="patchify the image first" if x.layout == "image" else None)
        p.check_structure()
        self.check(p, inputs)
        return x  # same shape

    def check(self, p, inputs: list[TensorType]) -> None:
        check_sequence(inputs[0], self.kind, p)
        if p.rope_dim % 2:
            raise RuleError(f"rope_dim {p.rope_dim} must be even (rotary positions turn pairs of dims)",
                            field="rope_dim")
        if p.rope_yarn is None:
            for name in YARN_OPTIONS:
                if name in p.model_fields_set and getattr(p, name) is not None:  # a none is not given
                    raise RuleError(f"{name} goes with rope_yarn", field=name,
                                    hint=Remedy("give `rope_yarn: <factor>` (YaRN), or drop it"))

    def kv_width(self, p, width: int) -> int:
        return p.heads * p.nope_dim  # the keys' expanded part (the values: heads x v_dim)

    def inner_width(self, p, width: int) -> int:
        return p.heads * query_width(p)

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        x = inputs[0]
        width, n = x.channels, dim_value(x.length)
        heads, qk = p.heads, query_width(p)
        if p.q_rank is None:
            linears = [(width, heads * qk, False)]  # q: no bias, as DeepSeek's q_proj
        else:
            linears = [(width, p.q_rank, p.qkv_bias), (p.q_rank, heads * qk, False)]  # q_a, q_b
        linears += [(width, p.kv_rank + p.rope_dim, p.qkv_bias),  # kv_a: the latent and the rotary key
                    (p.kv_rank, heads * (p.nope_dim + p.v_dim), False),  # kv_b
                    (heads * p.v_dim, width, p.proj_bias)]  # proj
        params = sum(linear_params(i, o, b) for i, o, b in linears) + (p.q_rank or 0) + p.kv_rank  # + the norms
        flops = sum(linear_flops(n, i, o) for i, o, _ in linears)
        flops += 2 * n * n * heads * qk + 2 * n * n * heads * p.v_dim  # q k^T and a v
        return Cost(params + sublayer_params(p, width), flops, 0, self.score_bytes(p, inputs))


def latent_entry(p, width: int) -> tuple[int, int, int]:
    """What a latent layer caches per token: one 'head' of the latent (kv_rank) and the rotary key (rope_dim)."""
    return 1, p.kv_rank, p.rope_dim


LATENT = register(LatentAttentionOp())
register_decoding(LATENT, SelfCache(entry=latent_entry))
