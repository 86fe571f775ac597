"""VALUES: how far the values of an op's integer output may reach (a fact registered against the
ops that make or carry indices), and the check that an index never reaches past what reads it.

    VALUES.register(ARGSORT, lambda p, inputs, bounds: inputs[0].shape[-1])   # positions 0 .. N-1
    VALUES.register(SLICE, KEEPS)                                            # a part of its input's values

An op without VALUES makes values check knows nothing of (an input's ids, a sum): no bound, no
error. Where a node reads an integer input whose values are bounded (Op.value_range: gather's and
scatter's positions, an embed's vocabulary, a mask's 0/1), an index whose bound exceeds it is a
located error at check: an argsort of 40 positions used on 16 tokens reads past them (torch's
IndexError at export, or silently wrong values on a GPU).
"""

from __future__ import annotations

from ..core.errors import Diagnostic
from ..core.interpreter import NodeFailed
from ..core.types import Sym
from .facts import Fact

VALUES = Fact("VALUES", "how far the op's integer output values may reach: f(params, input types, input bounds) -> "
                        "the bound (values 0 .. bound-1), or None", where="the op's rule file, beside its shape rule")
KEY = "value_bound"  # node meta: the bound of a node's output values (an int, a Sym, or None)


def keeps(p, inputs, bounds):
    """The values are some of the first input's (a slice, a rearrange, a gather of an index)."""
    return bounds[0] if bounds else None


def largest(p, inputs, bounds):
    """The values are some of every input's (a concat): the largest bound, if all are known."""
    if not bounds or any(b is None for b in bounds):
        return None
    return max(bounds, key=highest)


def last_axis(p, inputs, bounds):
    """Positions along the input's last axis (an argsort)."""
    return inputs[0].shape[-1] if inputs and inputs[0].shape else None


def highest(bound) -> int:
    return bound.hi if isinstance(bound, Sym) else bound


def record_and_check(node, inputs, graph, ctx) -> None:
    """Record the node's output bound (VALUES) in its meta, and refuse an input whose bound can
    exceed the values the node accepts at that slot (Op.value_range)."""
    bounds = [graph.node(name).meta.get(KEY) for name in node.inputs]
    for slot, (name, bound) in enumerate(zip(node.inputs, bounds)):
        if bound is None:
            continue
        accepted = node.op.value_range(node.params, slot, ctx)
        if accepted is None:
            continue
        reaches = bound.lo if isinstance(bound, Sym) else bound  # a symbolic bound: only what it surely reaches
        if reaches > accepted:
            raise NodeFailed(Diagnostic(
                f"the index '{name}' may hold values up to {reaches - 1}, and {node.op.label} reads only "
                f"0..{accepted - 1} there", node.param_loc("from"),
                node.name, hint=f"make '{name}' over {accepted} positions: an argsort or a topk of a tensor of "
                                f"{accepted} along the axis it sorts"))
    rule = VALUES.get(node.op)
    node.meta[KEY] = None if rule is None else rule(node.params, inputs, bounds)
