"""attention kind=class (torch): CaiT's class attention. Queries from the class tokens (the first
`prefix` tokens, projected by `q`), keys and values from all tokens (projected by `kv`); the
module returns the class tokens alone, and its residual adds the input's class tokens
(timm LayerScaleBlockClassAttn: x_cls + gamma_1 * attn(norm1(cat(x_cls, x))))."""

from __future__ import annotations

from archspec.primitives.ops.attention.class_ import CLASS

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .sequence import SequenceAttention, make_sequence_attention


class ClassAttention(SequenceAttention):
    """The class tokens attend to every token; out: the class tokens [B, prefix, C]."""

    def __init__(self, dim, heads, prefix=1, **kwargs):
        super().__init__(dim, heads, memory_width=dim, **kwargs)
        self.prefix = prefix

    def body(self, x, *extra):
        bias, padding = self.split_extra(extra)
        return self.attend(x[:, : self.prefix], x, padding, bias)  # [B, N, C] -> [B, prefix, C]

    def forward(self, x, *extra):
        """The sub-layer with the class tokens as what the residual adds (the norms as the place says)."""
        cls = x[:, : self.prefix]  # [B, N, C] -> [B, prefix, C]
        if self.place == "post":
            return self.norm(self.scaled_shortcut(cls) + self.branch(self.body(x, *extra)))
        h = self.branch(self.normed_body(x, *extra))
        return self.scaled_shortcut(cls) + h if self.residual else h


@lowering(CLASS)
def lower(p, inputs, ctx):
    return make_sequence_attention(ClassAttention, CLASS, p, inputs, prefix=inputs[0].prefix)


register_facts(CLASS, grid=KEEPS, classifier=None, resample=None)
