"""The program TensorRT is given: the eager model torch.exported in the engine's precision and
batch range (`export_for_tensorrt`), and its inputs' optimisation profile (`input_profiles`).

Precision is the dtype of the exported graph: for fp16 the model is cast with .half() before
torch.export (TensorRT-RTX networks are strongly typed; the old `enabled_precisions` knob is
ignored there).
"""

from __future__ import annotations

import torch

from archspec.core.ir import Graph
from archspec.core.types import Sym

from ...hierarchy import copy_model
from ..batch import BatchRange
from ..export import dynamic_shapes, example_inputs, with_spec_frames
from .runtime import DTYPES, quiet


def export_for_tensorrt(model: torch.nn.Module, graph: Graph, precision: str = "fp32",
                        batch=None) -> torch.export.ExportedProgram:
    """torch.export the eager model in the engine's precision, dynamic in the batch range (or
    static), and dynamic in the spec's other symbolic lengths."""
    batch = BatchRange.of(batch)
    args = _example_args(graph, precision, batch.example)
    if precision != "fp32":
        model = copy_model(model).to(DTYPES[precision])
    model.eval()
    dyn = dynamic_shapes(graph, None if batch.static else (batch.min, batch.max))
    if batch.static:
        dyn = {name: {axis: d for axis, d in axes.items() if not _is_batch_axis(graph, name, axis)}
               for name, axes in dyn.items()}
    with torch.no_grad(), quiet():
        return with_spec_frames(torch.export.export(model, args, dynamic_shapes=dyn, strict=False), graph)


def _is_batch_axis(graph: Graph, name: str, axis: int) -> bool:
    d = graph.node(name).type.shape[axis]
    return isinstance(d, Sym) and d.name == "B"


def _example_args(graph: Graph, precision: str, batch: int) -> tuple:
    args = example_inputs(graph, batch=batch)
    return tuple(a.to(DTYPES[precision]) if a.is_floating_point() else a for a in args)


def input_profiles(graph: Graph, precision: str, batch) -> list[dict]:
    """Per input: name, dtype and min/opt/max shapes (the engine's optimisation profile)."""
    batch = BatchRange.of(batch)
    profiles = []
    for node, example in zip(graph.inputs(), example_inputs(graph, batch=1)):
        lo, opt, hi, dims = [], [], [], {}
        for axis, d in enumerate(node.type.shape):
            if isinstance(d, Sym):
                dims[axis] = d.name
            if isinstance(d, Sym) and d.name == "B":
                sizes = (batch.min, batch.opt, batch.max)
            elif isinstance(d, Sym):
                sizes = (d.lo, example.shape[axis], d.hi)
            else:
                sizes = (d, d, d)
            for out, size in zip((lo, opt, hi), sizes):
                out.append(int(size))
        dtype = "int64" if not example.is_floating_point() else str(DTYPES[precision]).replace("torch.", "")
        profiles.append({"name": node.name, "dtype": dtype, "min": lo, "opt": opt, "max": hi,
                         "dynamic_axes": {axis: name for axis, name in dims.items() if lo[axis] != hi[axis]}})
    return profiles
