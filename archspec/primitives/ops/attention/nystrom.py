"""nystrom: Nyström self-attention (Xiong et al., 2021, "Nyströmformer"; Hugging Face's
NystromformerSelfAttention). Every token attends to every token through `landmarks` landmark
queries and keys, the means of consecutive segments of N / landmarks tokens:

    q~, k~  = segment means of q and k                         [B, h, m, d]
    F = softmax(q k~^T)   A = softmax(q~ k~^T)   B = softmax(q~ k^T + mask)
    out     = F pinv(A) (B v)   (+ a depthwise conv of v along the tokens, conv_kernel)

q and k are each scaled by head_dim^-1/4 before the products, as Hugging Face's; pinv(A) is
its iterative Moore-Penrose inverse (`pinv_iters` steps, `pinv_init` its first scale). With as
many landmarks as tokens it is plain softmax attention, as Hugging Face's. A padding mask hides
keys in B (and in the plain form); the landmark keys k~ are means over every token of a segment.

    attention: {kind: nystrom, heads: 8, landmarks: 64, conv_kernel: 65}
"""

from __future__ import annotations

from typing import Literal, Optional

from ....core.declared import Field
from ....core.types import Sym, TensorType, dim_value
from ...base import Cost, PositiveInt, RuleError
from ...decoding import Mixes, register_decoding
from ...grids import divisors_near
from ...registry import register
from .sequence import SequenceAttentionOp, SequenceParams


class NystromParams(SequenceParams):
    kind: Literal["nystrom"]
    landmarks: PositiveInt = Field(description="landmark queries and keys, each the mean of N / landmarks consecutive "
                                               "tokens (Hugging Face's num_landmarks); as many as the tokens: plain "
                                               "softmax attention")
    conv_kernel: Optional[PositiveInt] = Field(None, description="a depthwise conv of the values along the tokens, "
                                                                 "added to the output, per head, this long and odd, "
                                                                 "no bias (Hugging Face's conv_kernel_size); none: no "
                                                                 "conv")
    pinv_iters: PositiveInt = Field(6, description="steps of the iterative Moore-Penrose inverse of the landmarks' "
                                                   "softmax")
    pinv_init: Literal["original", "exact"] = Field(
        "original", description="the inverse's first scale: 1 / the largest column sum of the whole batch's "
                                "landmark softmax (original: Hugging Face's default, so a sample's output moves, "
                                "within rounding, with the others in its batch), or of each sample's and head's own "
                                "(exact: Hugging Face's inv_init_coeff_option)")


UNSUPPORTED = (("scores", "score parts"), ("bias", "score bias"), ("rope_theta", "rotary positions"),
               ("kv_heads", "grouped key/value heads"), ("attn_drop", "attention dropout"))


class NystromAttentionOp(SequenceAttentionOp):
    """Self-attention through segment-mean landmarks and an iterative pseudo-inverse."""

    kind = "nystrom"
    Params = NystromParams
    also_called = {"nystromformer": "Nyströmformer's attention", "landmark": "attention through landmarks"}

    def check(self, p, inputs: list[TensorType]) -> None:
        super().check(p, inputs)
        for field, what in UNSUPPORTED:
            value = getattr(p, field)
            if value not in (None, False, 0, 0.0, []) and not (field == "kv_heads" and value == p.heads):
                raise RuleError(f"nystrom attention takes no {what} (Hugging Face's Nyströmformer has none)",
                                field=field, hint=f"remove {field}")
        tokens = inputs[0].length
        if isinstance(tokens, Sym):
            raise RuleError(f"nystrom attention needs a fixed number of tokens, and these are {tokens} "
                            f"({tokens.lo}..{tokens.hi}): its landmarks are the means of N / landmarks consecutive "
                            f"tokens (Hugging Face's segment_means_seq_len, to which inputs are padded)",
                            field="landmarks", hint="declare the sequence at the fixed length its inputs are "
                                                    "padded to, one the landmarks divide")
        if p.landmarks > tokens or tokens % p.landmarks:
            near = ", ".join(str(d) for d in divisors_near(tokens, p.landmarks))
            raise RuleError(f"{p.landmarks} landmarks do not divide the {tokens} tokens into equal segments",
                            field="landmarks", hint=f"use landmarks that divide {tokens}: {near}")
        if p.conv_kernel is not None and p.conv_kernel % 2 == 0:
            raise RuleError(f"conv_kernel {p.conv_kernel} is even: Hugging Face's conv pads {p.conv_kernel // 2} "
                            f"each side, so an even one gives one token more", field="conv_kernel",
                            hint=f"use an odd kernel ({p.conv_kernel - 1} or {p.conv_kernel + 1})")

    def core_cost(self, p, inputs: list[TensorType]) -> Cost:
        """The projections, and in place of softmax attention's two products (torch's FLOP
        counting): q k~^T, q~ k~^T, q~ k^T, B v, F pinv(A), (F pinv(A)) (B v), the inverse's four
        m x m x m products a step, and the conv of the values."""
        x = inputs[0]
        core = super().core_cost(p, inputs)
        n, m = dim_value(x.length), p.landmarks
        width = self.inner_width(p, x.channels)
        plain = 4 * n * n * width  # what the sequence kinds count: Q K^T and A V
        conv = 0 if p.conv_kernel is None else 2 * n * width * p.conv_kernel
        conv_params = 0 if p.conv_kernel is None else p.heads * p.conv_kernel
        if m == n:
            return Cost(core.params + conv_params, core.flops + conv, core.buffer_bytes)
        products = 2 * width * (n * m + m * m + m * n + m * n + n * m) + 2 * n * m * m * p.heads
        pinv = p.pinv_iters * 4 * 2 * m * m * m * p.heads
        return Cost(core.params + conv_params, core.flops - plain + products + pinv + conv, core.buffer_bytes)


NYSTROM = register(NystromAttentionOp())
register_decoding(NYSTROM, Mixes("it lets a token see later tokens (only causal, sliding and alibi attention are "
                                 "cached)"))
