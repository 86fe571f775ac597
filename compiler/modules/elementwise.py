"""The element-wise family (torch): one table, name -> what the op computes from its inputs and its
parameters, and one module that computes a row (inductor's `register_pointwise` is the model).
Its rows are the rule floor's (archspec/primitives/ops/elementwise.py); a row the rule floor has
and this floor lacks fails here, naming it. Every member keeps the token grid of its input.

    Elementwise(name="scale", factor=0.125)      x * 0.125; model.<node>.factor == 0.125

activation, dropout, drop_path and compare are modules of their own kind (nn.GELU, nn.Dropout,
DropPath, Compare: MODULES; Compare follows the model's floating dtype).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.elementwise import ELEMENTWISE_OPS

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .activations import activation_class
from .common import DropPath, make

COMPARISONS = {"lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}


def add_all(x, *others):
    """x + y (+ more), left to right."""
    for y in others:
        x = x + y  # broadcast
    return x


ELEMENTWISE_FUNCTIONS = {  # op -> fn(inputs..., **params), the params as keywords
    "add": add_all,
    "subtract": lambda x, y: x - y,  # broadcast
    "multiply": lambda x, y: x * y,  # broadcast
    "divide": lambda x, y: x / y,  # broadcast
    "maximum": torch.maximum,  # broadcast
    "minimum": torch.minimum,  # broadcast
    "power": lambda x, exponent: x ** exponent,
    "scale": lambda x, factor: x * factor,
    "shift": lambda x, value: x + value,
    "clamp": lambda x, min, max: torch.clamp(x, min, max),
    "where": lambda condition, x, y: torch.where(condition != 0, x, y),  # broadcast
}

MODULES = {  # op -> (params -> (module class, its keyword arguments)): the rows that are a module of their own
    "activation": lambda p: activation_class(p.fn),
    "dropout": lambda p: (nn.Dropout, {"p": p.rate}),
    "drop_path": lambda p: (DropPath, {"rate": p.rate}),
    "compare": lambda p: (Compare, p.model_dump()),
    "cast": lambda p: (Cast, p.model_dump()),
}


class Cast(nn.Module):
    """x as int64, or as floats of the model's floating dtype (float32 until the model is cast:
    `anchor` follows .to(bfloat16), as Compare's)."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype
        self.register_buffer("anchor", torch.zeros(0), persistent=False)

    def forward(self, x):
        return x.to(torch.int64 if self.dtype == "int64" else self.anchor.dtype)  # same shape

    def extra_repr(self) -> str:
        return self.dtype


class Compare(nn.Module):
    """(x <op> value) as 0/1: int64, or floats of the model's floating dtype (float32 until the
    model is cast: `anchor`, an empty buffer, follows .to(bfloat16) and .half(), so that a mask
    made here adds to bf16 scores without promoting them to float32)."""

    def __init__(self, op, value, dtype):
        super().__init__()
        self.op, self.value, self.dtype = op, value, dtype
        self.register_buffer("anchor", torch.zeros(0), persistent=False)

    def forward(self, x):
        dtype = torch.int64 if self.dtype == "int64" else self.anchor.dtype
        return COMPARISONS[self.op](x, self.value).to(dtype)  # same shape, 0/1

    def extra_repr(self) -> str:
        return f"{self.op} {self.value!r}, {self.dtype}"


class Elementwise(nn.Module):
    """One row of ELEMENTWISE_FUNCTIONS, `name`, with its parameters as constants (attributes)."""

    def __init__(self, name, **constants):
        super().__init__()
        self.name, self.constants = name, constants
        for key, value in constants.items():
            setattr(self, key, value)  # e.g. .factor of a scale

    def forward(self, x, *others):
        return ELEMENTWISE_FUNCTIONS[self.name](x, *others, **self.constants)

    def extra_repr(self) -> str:
        return ", ".join([self.name] + [f"{key}={value!r}" for key, value in self.constants.items()])


def _lowering(name: str):
    """The lowering rule of the row `name`: its own module (MODULES), or an Elementwise."""
    if name in MODULES:
        def lower(p, inputs, ctx):
            cls, kwargs = MODULES[name](p)
            return make(cls, **kwargs)
    elif name in ELEMENTWISE_FUNCTIONS:
        def lower(p, inputs, ctx):
            return make(Elementwise, name=name, **p.model_dump())
    else:
        raise KeyError(f"the element-wise op {name!r} has no torch function in compiler/modules/elementwise.py")
    return lower


for _name, _op in ELEMENTWISE_OPS.items():  # each keeps its input's token grid, and is no head
    lowering(_op)(_lowering(_name))
    register_facts(_op, grid=KEEPS, classifier=None, resample=None)
