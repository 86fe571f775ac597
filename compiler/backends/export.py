"""torch.export backend: an ExportedProgram with a dynamic batch (and dynamic sequence
lengths where the spec declares ranges), saved as .pt2 and loadable with plain torch."""

from __future__ import annotations

import torch

from ..ir import Graph
from ..types import Sym

EXAMPLE_BATCH = 2  # not 0 or 1, which torch.export would specialise on


def example_inputs(graph: Graph, batch: int = EXAMPLE_BATCH, longest: bool = False) -> tuple[torch.Tensor, ...]:
    """One tensor per graph input: random images/tokens, token ids in [0, 2). Symbolic
    lengths are short (8), or with `longest` as long as they may be (what costs are for)."""
    generator = torch.Generator().manual_seed(0)
    tensors = []
    for node in graph.inputs():
        shape = [batch] + [d.hi if longest and isinstance(d, Sym) else _example_size(d) for d in node.type.shape[1:]]
        if node.type.dtype == "int64":
            tensors.append(torch.randint(0, 2, shape, generator=generator))
        else:
            tensors.append(torch.randn(shape, generator=generator))
    return tuple(tensors)


def _example_size(dim) -> int:
    if isinstance(dim, Sym):
        return min(dim.hi, max(dim.lo, 8))
    return dim


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
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    return max(float((x - y).abs().max()) for x, y in zip(a, b))
