"""differential: causal differential attention (Ye et al., 2024, "Differential Transformer";
Hugging Face's DiffLlama). Two softmax maps per output head, the difference of their weighted
values, each head normalised:

    o_h   = softmax(q_h k^T) [v1 | v2]           h = 0 .. heads - 1, values 2 x head_dim wide
    out_i = RMSNorm(o_i - lambda o_{i + heads/2}) (1 - lambda_init)    i = 0 .. heads/2 - 1
    lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init

where v1 and v2 are the first and second halves of the key/value heads, each serving its query
heads as grouped-query attention does, and the RMSNorm over each head's 2 x head_dim values has
no weight. The heads' outputs, heads/2 of 2 x head_dim, are the projection's input as usual
(heads x head_dim wide). Two SDPA calls, one per half of the values (the scores computed in
each), as Hugging Face's; generate caches the keys and values as causal attention's.
"""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType, dim_value
from ...base import Cost, Eps, RuleError
from ...counting import attention_flops
from ...decoding import SelfCache, register_decoding
from ...registry import register
from .scores.base import unless_a_part_refuses
from .sequence import SequenceAttentionOp, SequenceParams, check_sequence, longrope_refill, reads_padding_mask


class DifferentialParams(SequenceParams):
    kind: Literal["differential"]
    over_grid: bool = Field(False, description="allow a causal order over tokens on a grid (image patches)")
    lambda_init: float = Field(description="lambda's constant part, per layer (DiffLlama: 0.8 - 0.6 exp(-0.3 i) "
                                           "of layer i: `${0.8 - 0.6 * exp(-0.3 * i)}`)", allow_inf_nan=False)
    lambda_std: float = Field(0.1, ge=0, allow_inf_nan=False,
                              description="the standard deviation lambda_q1, lambda_k1, lambda_q2 and lambda_k2 start "
                                          "from (DiffLlama's lambda_std_dev)")
    head_norm_eps: Eps = Field(1e-5, description="epsilon of the weightless RMSNorm over each head's output "
                                                 "(DiffLlama: rms_norm_eps)")


class DifferentialAttentionOp(SequenceAttentionOp):
    """Causal attention whose output heads are the differences of pairs of softmax maps."""

    kind = "differential"
    hides_keys = True  # later keys (blockwise shows some of them again)
    Params = DifferentialParams

    def check(self, p, inputs: list[TensorType]) -> None:
        check_sequence(inputs[0], self.kind, p)
        super().check(p, inputs)
        kv_heads = p.kv_heads or p.heads
        if p.heads % 2 or kv_heads % 2:
            raise RuleError(f"differential attention pairs its heads and halves its key/value heads, and it has "
                            f"{p.heads} heads and {kv_heads} key/value heads", field="kv_heads" if p.heads % 2 == 0
                            else "heads", hint="even heads and key/value heads (DiffLlama's num_key_value_heads is "
                                               "even)")

    def core_cost(self, p, inputs: list[TensorType]) -> Cost:
        """The sequence kinds' products twice (one SDPA call per half of the values, the scores
        computed in each), and lambda's four vectors of head_dim."""
        x = inputs[0]
        core = super().core_cost(p, inputs)
        products = attention_flops(dim_value(x.length), self.keys(p, inputs), self.inner_width(p, x.channels))
        return Cost(core.params + 4 * self.head_dim(p, x.channels), core.flops + products, core.buffer_bytes)


DIFFERENTIAL = register(DifferentialAttentionOp())
register_decoding(DIFFERENTIAL, unless_a_part_refuses(SelfCache(key_padding=reads_padding_mask,
                                                                refill=longrope_refill)))
