"""constant (torch): a fixed tensor with a leading dimension of 1, kept as a buffer; or, where a
size is a symbolic dim, made at each call at the sizes of the tensor the node reads."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.constant import CONSTANT, index_axis, sources, symbolic

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make
from .tables import sinusoid_table


def filled(shape, fill=None, value=None, axis=None, dtype=None, device=None):
    """A tensor of `shape` (sizes may be SymInts while exporting): every value `value`, or zeros,
    ones, an identity on the last two axes, or each value its index along `axis`."""
    like = {"dtype": dtype or torch.float32, "device": device}
    if value is not None:
        return torch.full(shape, float(value), **like)
    if fill == "ones":
        return torch.ones(shape, **like)
    if fill == "eye" and all(type(size) is int for size in shape):  # at lowering: no second copy of the table
        identity = torch.zeros(shape, **like)
        identity.diagonal(dim1=-2, dim2=-1).fill_(1)  # the identity on every leading index
        return identity
    if fill == "eye":
        return torch.eye(shape[-2], shape[-1], **like).expand(shape).clone()  # the identity on every leading index
    if fill == "lowest":  # the dtype's own: float32's -3.4e38 rounds to -inf in bfloat16
        return torch.full(shape, torch.finfo(like["dtype"]).min, **like)
    if fill == "index":
        line = [1] * len(shape)
        line[axis] = shape[axis]
        return torch.arange(shape[axis], **like).view(line).expand(shape).clone()  # [1, ...]
    return torch.zeros(shape, **like)


class Constant(nn.Module):
    def __init__(self, shape, fill=None, value=None, axis=None, values=None, sincos_layout="interleaved"):
        super().__init__()
        self.lowest = fill == "lowest"  # made again in the buffer's dtype at each call (the model may be cast)
        if values is not None:
            made = torch.tensor(values, dtype=torch.float32).view(1, *shape)  # [1, ...]
        elif fill == "sinusoid":
            made = sinusoid_table(shape[0], shape[1], sincos_layout)[None]  # [1, positions, width]
        else:
            made = filled((1, *shape), fill, value, axis)  # [1, ...]
        self.register_buffer("value", made, persistent=False)

    def forward(self):
        if self.lowest:
            return torch.full_like(self.value, torch.finfo(self.value.dtype).min)  # [1, ...]
        return self.value  # [1, ...]


class SizedConstant(nn.Module):
    """A constant whose sizes are numbers or ("like", axis): made at each call at the sizes of
    `like` (SymInts while exporting), so one build runs at every length. It keeps no values;
    `anchor`, an empty buffer, follows the module's device and dtype (.to, .half)."""

    def __init__(self, sizes, fill=None, value=None, axis=None):
        super().__init__()
        self.sizes = tuple(tuple(s) if isinstance(s, (tuple, list)) else s for s in sizes)
        self.fill, self.fill_value, self.axis = fill, value, axis
        self.register_buffer("anchor", torch.zeros(0), persistent=False)

    def forward(self, like):
        shape = [1] + [like.shape[s[1]] if isinstance(s, tuple) else s for s in self.sizes]  # [1, L, ...]
        return filled(shape, self.fill, self.fill_value, self.axis, self.anchor.dtype, self.anchor.device)

    def extra_repr(self) -> str:
        sizes = ", ".join(f"like.shape[{s[1]}]" if isinstance(s, tuple) else str(s) for s in self.sizes)
        made = f"value={self.fill_value}" if self.fill_value is not None else f"fill={self.fill or 'zeros'}"
        return f"sizes=[1, {sizes}], {made}" + (f", axis={self.axis}" if self.axis is not None else "")


@lowering(CONSTANT)
def lower(p, inputs, ctx):
    axis = index_axis(p) if p.fill == "index" else None
    if symbolic(p):
        return make(SizedConstant, sizes=sources(p, inputs[0], ctx.graph.dims), fill=p.fill, value=p.value, axis=axis)
    listed = {"values": list(p.values)} if p.values is not None else {}  # model.py as before without them
    if p.fill == "sinusoid":
        listed["sincos_layout"] = p.sincos_layout
    return make(Constant, shape=tuple(p.shape), fill=p.fill, value=p.value, axis=axis, **listed)


register_facts(CONSTANT, grid=KEEPS, classifier=None, resample=None)
