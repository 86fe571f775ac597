"""ONNX backend: torch's dynamo-based exporter, opset 18 (LayerNormalization is one op),
a dynamic batch, checked with the onnx checker and against onnxruntime.

The model is traced with the math attention backend: with the fused CPU kernel, torch.export
records the reshape after attention as a view that is only valid for that kernel's output
strides, and the ONNX decomposition of attention then fails ("Cannot view a tensor ...").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from archspec.diagnostics import error

from ..ir import Graph
from .export import dynamic_shapes, example_inputs, max_abs_difference, other_lengths

OPSET = 18


@dataclass
class OnnxResult:
    path: str
    nodes: int
    max_difference: float | None

    def summary(self) -> str:
        text = f"{self.nodes} ONNX nodes"
        if self.max_difference is not None:
            text += f", max |onnxruntime - eager| {self.max_difference:.2e}"
        return text


def export_onnx(gm: torch.fx.GraphModule, graph: Graph, path: str, verify: bool = True) -> OnnxResult:
    try:
        import onnx
    except ImportError:
        raise error("--target onnx needs the onnx and onnxscript packages",
                    hint="pip install 'archspec[onnx]'") from None
    gm.eval()
    names = [n.name for n in graph.inputs()]
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        torch.onnx.export(gm, example_inputs(graph), path, dynamo=True, opset_version=OPSET,
                          dynamic_shapes=dynamic_shapes(graph), input_names=names,
                          output_names=[o.name for o in graph.outputs], external_data=False, verbose=False)
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    gap = run_onnxruntime_check(gm, graph, path) if verify else None
    return OnnxResult(path, len(model.graph.node), gap)


def run_onnxruntime_check(gm, graph: Graph, path: str, batch: int = 3) -> float | None:
    """Max |onnxruntime - eager| at a batch size (and sequence lengths) the export was not traced with."""
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    args = example_inputs(graph, batch=batch, lengths=other_lengths(graph))
    feeds = {n.name: a.numpy() for n, a in zip(graph.inputs(), args)}
    outs = session.run(None, feeds)
    with torch.no_grad():
        expected = gm(*args)
    return max_abs_difference(tuple(torch.from_numpy(o) for o in outs), expected)
