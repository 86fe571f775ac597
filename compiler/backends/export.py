"""torch.export backend: an ExportedProgram with a dynamic batch (and dynamic sequence
lengths where the spec declares ranges), saved as .pt2 and loadable with plain torch."""

from __future__ import annotations

from typing import Mapping

import torch

from ..infer import RuleContext
from ..ir import Graph
from ..primitives.embed import table_shape
from ..types import Sym

EXAMPLE_BATCH = 2  # not 0 or 1, which torch.export would specialise on


def example_inputs(graph: Graph, batch: int = EXAMPLE_BATCH, longest: bool = False,
                   lengths: Mapping[str, int] | None = None) -> tuple[torch.Tensor, ...]:
    """One tensor per graph input: random images/tokens, and token ids drawn from the whole
    vocabulary of the embed nodes that read them. Symbolic lengths are `lengths[name]`, else
    short (8), or with `longest` as long as they may be (what costs are for)."""
    generator = torch.Generator().manual_seed(0)
    tensors = []
    for node in graph.inputs():
        shape = [batch] + [_example_size(d, longest, lengths or {}) for d in node.type.shape[1:]]
        if node.type.dtype == "int64":
            tensors.append(torch.randint(0, _vocabulary(graph, node.name), shape, generator=generator))
        else:
            tensors.append(torch.randn(shape, generator=generator))
    return tuple(tensors)


def other_lengths(graph: Graph) -> dict[str, int]:
    """Sizes for the symbolic lengths that differ from the traced ones (8) and from each other:
    running an export at these shows that its lengths really are dynamic."""
    names = sorted(graph.dims.keys() - {"B"})
    return {name: min(graph.dims[name].hi, max(graph.dims[name].lo, 5 + 6 * i)) for i, name in enumerate(names)}


def _example_size(dim, longest: bool, lengths: Mapping[str, int]) -> int:
    if not isinstance(dim, Sym):
        return dim
    if longest:
        return dim.hi
    return lengths.get(dim.name, min(dim.hi, max(dim.lo, 8)))


def _vocabulary(graph: Graph, input_name: str) -> int:
    """The smallest vocabulary among the embed tables that read this input (2 if none does)."""
    readers = [graph.node(name) for name in graph.nx.successors(input_name)]
    sizes = [table_shape(n.params, RuleContext(graph, n))[0] for n in readers if n.op == "embed"]
    return min(sizes, default=2)


def dynamic_shapes(graph: Graph, batch_range: tuple[int, int] | None = None) -> dict:
    """torch.export dynamic_shapes: B (and declared symbolic dims) per input."""
    dims: dict[str, torch.export.Dim] = {}
    spec = {}
    for node in graph.inputs():
        axes = {}
        for axis, d in enumerate(node.type.shape):
            if isinstance(d, Sym):
                lo, hi = (batch_range if d.name == "B" and batch_range else (d.lo, d.hi))
                if d.name not in dims:
                    dims[d.name] = torch.export.Dim(_dim_name(d.name), min=lo, max=hi)
                axes[axis] = dims[d.name]
        spec[node.name] = axes
    return spec


def _dim_name(name: str) -> str:
    return "batch" if name == "B" else name


def export_program(gm: torch.fx.GraphModule, graph: Graph,
                   batch_range: tuple[int, int] | None = None) -> torch.export.ExportedProgram:
    gm.eval()
    args = example_inputs(graph)
    with torch.no_grad():
        return torch.export.export(gm, args, dynamic_shapes=dynamic_shapes(graph, batch_range), strict=False)


def max_abs_difference(a, b) -> float:
    """The largest |a - b| over all outputs; NaN if any difference is NaN (max() would hide it)."""
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    if len(a) != len(b):
        raise ValueError(f"{len(a)} outputs compared with {len(b)}")
    return float(torch.stack([(x.float() - y.float()).abs().max() for x, y in zip(a, b)]).max())
