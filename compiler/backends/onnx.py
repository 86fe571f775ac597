"""ONNX backend: torch's dynamo-based exporter, opset 18 (LayerNormalization is one op),
a dynamic batch, checked with the onnx checker and against onnxruntime.

The model is traced with the math attention backend: with the fused CPU kernel, torch.export
records the reshape after attention as a view that is only valid for that kernel's output
strides, and the ONNX decomposition of attention then fails ("Cannot view a tensor ...").

`optimize=True` writes a graph for ONNX Runtime instead (still one dynamic-batch file), with
the fusions in `fusions`:

  attention         opset 23, where attention is one `Attention` op, which ONNX Runtime runs
                    as one kernel (the opset 18 export spells it out as MatMul, Mul, Add,
                    Softmax, MatMul). Measured here: 15% faster than the spelled-out form for
                    Swin's 49-token windows, the same for ViT's 197 tokens.
  bias_gelu         ONNX Runtime's own fusion at load: a linear's bias add and the GELU after
                    it become one `BiasGelu` (counted, not written).
  skip_layer_norm   (not by default) every residual add that feeds a LayerNormalization, with
                    the bias add of the linear before it, becomes one com.microsoft
                    `SkipLayerNormalization` (archspec's own pass: it knows both inputs of a
                    residual add have the sub-layer's shape, which ONNX Runtime's fusion
                    cannot prove through the dynamic batch and the window gathers). Off by
                    default because ONNX Runtime 1.32's CPU kernel for it is slower than the
                    Add and LayerNormalization it replaces: 13.4 ms against 2.1 ms for
                    [8, 3136, 96] on 2 threads here (it is the op to fuse for its GPU kernels).

Each fusion is counted in the graph ONNX Runtime actually runs (its optimised model, saved at
the portable `extended` level) and compared with what the spec says there should be (one
attention per attention node, one GELU per GELU MLP): `OnnxResult.fusions`. If the opset 23
export fails for a spec, the opset 18 graph is used instead and the result says so.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from archspec.core.errors import error
from archspec.core.ir import Graph

from ..facts import ONNX_FUSIONS, fusion_of
from .export import dynamic_shapes, example_inputs, max_abs_difference, other_lengths
from .memory import out_of_memory_error, ran_out_of_memory

OPSET = 18
OPSET_FUSED = 23  # the first opset with an Attention op
ORT_QUIET = 4  # ONNX Runtime logs only fatal errors: a failure comes back as its exception, said once
MS_DOMAIN = "com.microsoft"
FUSIONS = ("attention", "bias_gelu", "skip_layer_norm")
DEFAULT_FUSIONS = ("attention", "bias_gelu")


@dataclass
class Fusion:
    """One kind of fused node: how many the graph ONNX Runtime runs holds, and how many the spec
    implies (None where it does not say)."""

    op: str
    found: int
    expected: int | None = None

    @property
    def complete(self) -> bool:
        return self.found > 0 if self.expected is None else self.found >= self.expected

    def describe(self) -> str:
        return f"{self.op} {self.found}" + (f"/{self.expected}" if self.expected is not None else "")


@dataclass
class OnnxResult:
    path: str
    nodes: int
    max_difference: float | None
    opset: int = OPSET
    fusions: list[Fusion] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.nodes} ONNX nodes"
        if self.max_difference is not None:
            text += f", max |onnxruntime - eager| {self.max_difference:.2e}"
        if self.fusions:
            text += ", fused for ONNX Runtime: " + ", ".join(f.describe() for f in self.fusions)
        for note in self.notes:
            text += f"; {note}"
        return text

    def to_json(self) -> dict:
        return {"path": self.path, "nodes": self.nodes, "max_difference": self.max_difference, "opset": self.opset,
                "fusions": {f.op: {"found": f.found, "expected": f.expected} for f in self.fusions},
                "notes": self.notes}


def _onnx():
    try:
        import onnx
    except ImportError:
        raise error("--target onnx needs the onnx and onnxscript packages",
                    hint="pip install 'archspec[onnx]'") from None
    return onnx


def export_onnx(gm: torch.fx.GraphModule, graph: Graph, path: str, verify: bool = True,
                optimize: bool = False, fusions=DEFAULT_FUSIONS) -> OnnxResult:
    """Export to `path` (dynamic batch); `optimize`: the graph for ONNX Runtime, with `fusions`
    (module docstring)."""
    unknown = set(fusions) - set(FUSIONS)
    if unknown:
        raise ValueError(f"unknown ONNX fusions {sorted(unknown)} (known: {', '.join(FUSIONS)})")
    onnx = _onnx()
    gm.eval()
    if optimize:
        return _export_optimized(gm, graph, path, verify, tuple(fusions))
    _export(gm, graph, path, OPSET, math_attention=True)
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    gap = run_onnxruntime_check(gm, graph, path) if verify else None
    return OnnxResult(path, len(model.graph.node), gap)


def _export(gm, graph: Graph, path: str, opset: int, math_attention: bool) -> None:
    names = [n.name for n in graph.inputs()]
    context = sdpa_kernel(SDPBackend.MATH) if math_attention else _nothing()
    with torch.no_grad(), context:
        torch.onnx.export(gm, example_inputs(graph), path, dynamo=True, opset_version=opset,
                          dynamic_shapes=dynamic_shapes(graph), input_names=names,
                          output_names=[o.name for o in graph.outputs], external_data=False, verbose=False)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _export_optimized(gm, graph: Graph, path: str, verify: bool, fusions: tuple[str, ...]) -> OnnxResult:
    onnx = _onnx()
    notes = []
    opset = OPSET_FUSED if "attention" in fusions else OPSET
    try:
        _export(gm, graph, path, opset, math_attention=opset == OPSET)
    except Exception as exc:  # noqa: BLE001 - a spec whose attention does not export at 23: use the 18 graph
        if opset == OPSET:
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        notes.append(f"opset {OPSET_FUSED} export failed ({type(exc).__name__}: {first}); used the opset "
                     f"{OPSET} graph (attention stays MatMul/Softmax)")
        opset = OPSET
        _export(gm, graph, path, OPSET, math_attention=True)
    model = onnx.load(path)
    fused = None
    if "skip_layer_norm" in fusions:
        fused = fuse_skip_layer_norm(model)
        onnx.save(model, path)
    onnx.checker.check_model(path, full_check=fused is None)  # contrib ops: the checker knows only their names
    found = count_fusions(path, graph, skip_layer_norms=fused)
    fusions = [f for f in found if f.op != "Attention" or "attention" in fusions]
    gap = run_onnxruntime_check(gm, graph, path) if verify else None
    missing = [f for f in fusions if not f.complete]
    if missing:
        notes.append("fewer fused nodes than the spec implies: " + ", ".join(f.describe() for f in missing))
    return OnnxResult(path, len(model.graph.node), gap, opset, fusions, notes)


# -- archspec's fusion: residual add (+ bias) + LayerNormalization -> SkipLayerNormalization -------------


def fuse_skip_layer_norm(model) -> int:
    """Rewrite, in place, every LayerNormalization over the last axis whose input is Add(a, b)
    of two computed tensors of the same rank 3 (a residual add) into one com.microsoft
    SkipLayerNormalization(a, b, scale, bias[, linear bias]); when a (or b) is itself Add(t, c)
    with c a constant vector of the hidden size used nowhere else (a linear's bias), c becomes
    the fused node's bias input. The residual sum stays available (the fused node's 4th output)
    to the other readers of the add. Returns the number of fused nodes."""
    import onnx
    from onnx import helper, numpy_helper

    g = model.graph
    inferred = _shapes(model)
    constants = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for node in g.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    producer = {o: n for n in g.node for o in n.output}
    readers = Counter(i for n in g.node for i in n.input)
    outputs = {o.name for o in g.output}
    remove, add_after = set(), {}
    count = 0
    for ln in list(g.node):
        if ln.op_type != "LayerNormalization" or ln.domain not in ("", "ai.onnx") or len(ln.input) < 3:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in ln.attribute}
        add = producer.get(ln.input[0])
        if add is None or add.op_type != "Add" or id(add) in remove:
            continue
        a, b = add.input
        ranks = [inferred.get(t) for t in (a, b, ln.input[0])]
        if a in constants or b in constants or ln.input[1] not in constants or ln.input[2] not in constants:
            continue
        if any(r is not None and len(r) != 3 for r in ranks) or ranks[0] != ranks[1] and None not in ranks[:2]:
            continue
        if attrs.get("axis", -1) not in (-1, 2) or ranks[2] is None:
            continue  # only [B, N, C] tensors, normalised over C (SkipLayerNormalization's layout)
        hidden = constants[ln.input[1]].shape
        bias_name = ""
        for side, other in ((a, b), (b, a)):
            inner = producer.get(side)
            if (inner is not None and inner.op_type == "Add" and readers[side] == 1 and side not in outputs
                    and id(inner) not in remove):
                consts = [t for t in inner.input if t in constants and constants[t].shape == hidden]
                if len(consts) == 1:
                    bias_name = consts[0]
                    computed = [t for t in inner.input if t != bias_name][0]
                    a, b = computed, other
                    remove.add(id(inner))
                    break
        sum_out = add.output[0]
        sum_needed = readers[sum_out] > 1 or sum_out in outputs
        fused_outputs = [ln.output[0], "", "", sum_out if sum_needed else ""]
        while fused_outputs and fused_outputs[-1] == "":
            fused_outputs.pop()
        inputs = [a, b, ln.input[1], ln.input[2]] + ([bias_name] if bias_name else [])
        fused = helper.make_node("SkipLayerNormalization", inputs, fused_outputs, name=f"{ln.name}_skip",
                                 domain=MS_DOMAIN, epsilon=float(attrs.get("epsilon", 1e-5)))
        remove.add(id(add))
        remove.add(id(ln))
        add_after[id(ln)] = fused
        count += 1
    if not count:
        return 0
    kept = []
    for node in g.node:
        if id(node) in add_after:
            kept.append(add_after[id(node)])
        elif id(node) not in remove:
            kept.append(node)
    # SkipLayerNormalization sits where its LayerNormalization was: after all of its inputs (the
    # add's and, for the bias, the inner add's inputs come before them) and before its readers;
    # the residual sum is produced there too, which is before every reader of the add that came
    # after the LayerNormalization. Readers of the sum placed between the add and the norm are
    # moved behind it by a topological sort.
    del g.node[:]
    g.node.extend(_topological(kept, {i.name for i in g.input} | set(constants)))
    if not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(MS_DOMAIN, 1))
    return count


def _shapes(model) -> dict[str, list | None]:
    """name -> its dims (symbolic or not) from ONNX shape inference, where known."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - no shapes: the fusion then relies on structure alone
        return {}
    shapes = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        t = v.type.tensor_type
        if t.HasField("shape"):
            shapes[v.name] = [d.dim_param or d.dim_value for d in t.shape.dim]
    return shapes


def _topological(nodes: list, available: set[str]) -> list:
    ready = set(available) | {""}
    placed, pending = [], list(nodes)
    while pending:
        rest = []
        for node in pending:
            if all(i in ready for i in node.input):
                placed.append(node)
                ready.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):  # a cycle cannot come from a fusion; keep the rest as they were
            placed.extend(rest)
            break
        pending = rest
    return placed


# -- counting what ONNX Runtime runs ----------------------------------------------------------------------


def ort_optimized_ops(path: str, level: str = "extended") -> Counter:
    """Op types (domain-qualified for contrib ops) of the graph ONNX Runtime runs for `path`
    after its own optimisations at `level` (`extended`: portable fusions; `all` adds layouts
    for this CPU)."""
    import onnx

    from .timing import onnxruntime_session

    with tempfile.TemporaryDirectory(prefix="archspec-ort-") as work:
        out = os.path.join(work, "optimized.onnx")
        onnxruntime_session(path, threads=1, optimization=level, optimized_path=out)
        model = onnx.load(out)
    return Counter((f"{n.domain}." if n.domain and n.domain != "ai.onnx" else "") + n.op_type
                   for n in model.graph.node)


def expected_fusions(graph: Graph) -> dict[str, int]:
    """What the spec implies: as many of each fused op as nodes whose ONNX_FUSION fact names it
    (compiler/facts.py: one attention op per attention node; one fused GELU per GELU MLP whose
    GELU follows its first linear)."""
    found = Counter(fusion_of(node) for node in graph.nodes() if not node.is_input)
    return {fusion: found[fusion] for fusion in ONNX_FUSIONS}


def count_fusions(path: str, graph: Graph, skip_layer_norms: int | None = None) -> list[Fusion]:
    """The fused nodes in the graph ONNX Runtime runs, against what the spec implies."""
    ops = ort_optimized_ops(path)
    expected = expected_fusions(graph)
    attention = ops["Attention"] + ops["com.microsoft.Attention"] + ops["com.microsoft.MultiHeadAttention"]
    # fused forms only: a plain ONNX Gelu (opset 20) after an Add is what there was before fusing
    gelu = ops["com.microsoft.BiasGelu"] + ops["com.microsoft.Gelu"] + ops["com.microsoft.FastGelu"]
    fusions = [Fusion("Attention", attention, expected["attention"]),
               Fusion("Gelu/BiasGelu", gelu, expected["gelu"])]
    if skip_layer_norms is not None:
        fusions.append(Fusion("SkipLayerNormalization", ops["com.microsoft.SkipLayerNormalization"], skip_layer_norms))
    return [f for f in fusions if f.found or f.expected]


def run_onnxruntime_check(gm, graph: Graph, path: str, batch: int = 3) -> float | None:
    """Max |onnxruntime - eager| at a batch size (and sequence lengths) the export was not traced
    with. Running out of memory there (ONNX Runtime holds each attention's scores whole) is a
    located error, not a crash (memory.py)."""
    try:
        import onnxruntime
    except ImportError:
        return None
    try:
        return _onnxruntime_gap(onnxruntime, gm, graph, path, batch)
    except Exception as exc:  # noqa: BLE001 - only an allocation failure is turned into an error here
        if ran_out_of_memory(exc):
            raise out_of_memory_error(f"ONNX Runtime's check of {os.path.basename(path)} at batch {batch}", graph,
                                      exc, scores=True, hint="--target export (PyTorch's fused attention streams "
                                                             "the scores)") from None
        raise


def _onnxruntime_gap(onnxruntime, gm, graph: Graph, path: str, batch: int) -> float:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = ORT_QUIET
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    args = example_inputs(graph, batch=batch, lengths=other_lengths(graph))
    feeds = {n.name: a.numpy() for n, a in zip(graph.inputs(), args)}
    outs = session.run(None, feeds)
    with torch.no_grad():
        expected = gm(*args)
    return max_abs_difference(tuple(torch.from_numpy(o) for o in outs), expected)
