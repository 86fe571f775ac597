"""activation (torch): the named non-linearity."""

from __future__ import annotations

from archspec.primitives.ops.activation import ACTIVATION

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .activations import activation_class
from .common import make


@lowering(ACTIVATION)
def lower(p, inputs, ctx):
    cls, kwargs = activation_class(p.fn)
    return make(cls, **kwargs)


register_facts(ACTIVATION, grid=KEEPS, fusion=None, head=None)
