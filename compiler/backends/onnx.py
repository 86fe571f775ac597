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
export fails for a spec, or ONNX Runtime cannot run it (an older runtime; 1.32's Attention
kernel refuses a [B, 1, 1, L] padding mask, which is why the attention modules give theirs as
[B, 1, N, M]), the opset 18 graph is used instead and the result says so.

`write_model_onnx` is the one way `archspec build --target onnx` and `archspec bench` make
model.onnx: the optimised variant by default, the plain opset 18 one with `variant="plain"`.
What the written file holds is read back from it (`describe_onnx_file`: opset, domains, node
count, fused ops), never taken from what was meant to be written. With `verify`, ONNX Runtime's
outputs must agree with the torch module's within FP32_TOLERANCE (scaled by the outputs' size
when they exceed 1), else the build stops with an internal error: a wrong file is not shipped.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from archspec.core.errors import InternalError, bug, error
from archspec.core.ir import Graph

from ..facts import ONNX_FUSIONS
from .export import (dynamic_shapes, example_inputs, largest_magnitude, max_abs_difference, not_finite, not_finite_note,
                     other_lengths)
from .padded_check import gap_at_real_tokens, padding_masks, right_padded
from .out_of_memory import out_of_memory_error, ran_out_of_memory
from .onnx_fusions import fusion_of

OPSET = 18
OPSET_FUSED = 23  # the first opset with an Attention op
ORT_QUIET = 4  # ONNX Runtime logs only fatal errors: a failure comes back as its exception, said once
MS_DOMAIN = "com.microsoft"
FUSIONS = ("attention", "bias_gelu", "skip_layer_norm")
DEFAULT_FUSIONS = ("attention", "bias_gelu")
VARIANTS = ("optimized", "plain")
PLAIN_INSTEAD = f"--plain-onnx writes the opset {OPSET} export instead"
FP32_TOLERANCE = 1e-3  # max |onnxruntime - eager| for outputs up to 1 in size; scaled above (as TensorRT's)
# fused ops a file can hold: (name in report.json, domain-qualified op type)
FILE_FUSIONS = (("attention", "Attention"), ("gelu", "Gelu"), ("attention", "com.microsoft.Attention"),
                ("attention", "com.microsoft.MultiHeadAttention"), ("gelu", "com.microsoft.Gelu"),
                ("bias_gelu", "com.microsoft.BiasGelu"), ("gelu", "com.microsoft.FastGelu"),
                ("skip_layer_norm", "com.microsoft.SkipLayerNormalization"))


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
class OnnxFile:
    """What a written .onnx file holds, read back from it: its default-domain opset, the op
    domains its nodes use, its node count and its fused ops [(name, op, count)]."""

    opset: int
    domains: list[str]
    nodes: int
    fusions: list[tuple[str, str, int]]

    @property
    def contrib_ops(self) -> bool:
        """Whether it uses ONNX Runtime's own (com.microsoft) ops, which other runtimes lack."""
        return MS_DOMAIN in self.domains

    @property
    def portable(self) -> bool:
        """Whether runtimes with opset 18 run it (no contrib ops, no newer opset)."""
        return not self.contrib_ops and self.opset <= OPSET

    def runs_on(self) -> str:
        """Which runtimes run the file, and where to turn for others."""
        if self.contrib_ops:
            return f"ONNX Runtime only (com.microsoft ops); --plain-onnx gives opset {OPSET} for other runtimes"
        if self.opset > OPSET:
            return (f"runtimes with ONNX opset {self.opset}, such as ONNX Runtime; --plain-onnx gives opset {OPSET} "
                    "for others")
        return f"any runtime with ONNX opset {self.opset}"

    def describe(self) -> str:
        fused = ", ".join(f"{op} {count}" for _, op, count in self.fusions) or "none"
        return f"opset {self.opset}, fused ops in the file: {fused}"

    def to_json(self) -> dict:
        return {"opset": self.opset, "domains": self.domains, "nodes": self.nodes,
                "fusions": [{"name": name, "op": op, "count": count} for name, op, count in self.fusions],
                "runs_on": self.runs_on()}


def describe_onnx_file(path: str) -> OnnxFile:
    """Opset, domains, node count and fused ops of the .onnx file at `path` (the file itself)."""
    model = _onnx().load(path)
    ops = Counter(_qualified(n.domain, n.op_type) for n in model.graph.node)
    domains = sorted({n.domain or "ai.onnx" for n in model.graph.node})
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    fusions = [(name, op, ops[op]) for name, op in FILE_FUSIONS if ops[op]]
    return OnnxFile(opset, domains, len(model.graph.node), fusions)


def _qualified(domain: str, op_type: str) -> str:
    """An op type with its domain in front, unless it is the default domain's."""
    return (f"{domain}." if domain and domain != "ai.onnx" else "") + op_type


@dataclass
class OnnxResult:
    path: str
    nodes: int
    max_difference: float | None
    opset: int = OPSET
    fusions: list[Fusion] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    variant: str = "plain"  # or "optimized" (export_onnx's optimize=True)
    contents: OnnxFile | None = None  # read back from the file (write_model_onnx)
    # the decode programs beside it (decode_step.py): report.json's name -> max |onnxruntime - eager|
    decode_gaps: dict[str, float] = field(default_factory=dict)
    eager_not_finite: tuple[int, int] = (0, 0)  # (eager's NaN or infinite output values, all) in the check
    real_tokens_only: bool = False  # the check compared the real tokens of right-padded inputs alone

    def summary(self) -> str:
        text = f"{self.nodes} ONNX nodes"
        if self.contents is not None:
            text = f"{self.variant}: {self.nodes} ONNX nodes, {self.contents.describe()}"
        if self.max_difference is not None:
            text += f", max |onnxruntime - eager| {self.max_difference:.2e}"
            if self.real_tokens_only:  # a padded token's output is no one's, and the runtimes part there
                text += " at the real tokens"
        if self.eager_not_finite[0]:
            text += "; " + not_finite_note(*self.eager_not_finite)
        if self.fusions:
            text += "; fused as ONNX Runtime runs it: " + ", ".join(f.describe() for f in self.fusions)
        for note in self.notes:
            text += f"; {note}"
        return text

    def report_entry(self) -> dict:
        """The "onnx" section of report.json: what the written file holds (read back from it),
        the fusions ONNX Runtime applies when it loads it, and the check against torch."""
        contents = self.contents or describe_onnx_file(self.path)
        return {"variant": self.variant, **contents.to_json(),
                "onnxruntime_fusions": [{"op": f.op, "found": f.found, "expected": f.expected} for f in self.fusions],
                "max_difference": self.max_difference, "notes": self.notes, **self.decode_gaps}

    def to_json(self) -> dict:
        return {"path": self.path, "nodes": self.nodes, "max_difference": self.max_difference, "opset": self.opset,
                "fusions": {f.op: {"found": f.found, "expected": f.expected} for f in self.fusions},
                "notes": self.notes}


def _onnx():
    try:
        import onnx
    except ImportError:
        raise error("--target onnx needs the onnx and onnxscript packages",
                    hint="pip install 'archspec-compiler[onnx]'") from None
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
        result = _export_optimized(gm, graph, path, verify, tuple(fusions))
        result.variant = "optimized"
        return result
    _export(gm, graph, path, OPSET, math_attention=True)
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    check = run_onnxruntime_check(gm, graph, path) if verify else None
    return checked(OnnxResult(path, len(model.graph.node), None), check)


def checked(result: OnnxResult, check: OnnxCheck | None) -> OnnxResult:
    """`result` with what the check against eager found (nothing where it was not run)."""
    if check is not None:
        result.max_difference, result.eager_not_finite = check.gap, check.eager_not_finite
        result.real_tokens_only = check.real_tokens_only
    return result


def write_model_onnx(gm: torch.fx.GraphModule, graph: Graph, path: str, variant: str = "optimized",
                     verify: bool = True) -> OnnxResult:
    """model.onnx as `archspec build --target onnx` writes it and `archspec bench` times it:
    `optimized` (fused for ONNX Runtime, DEFAULT_FUSIONS) or `plain` (opset 18, attention spelled
    out); with `verify`, checked against ONNX Runtime. The result describes the written file."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown ONNX variant {variant!r} (known: {', '.join(VARIANTS)})")
    result = export_onnx(gm, graph, path, verify=verify, optimize=variant == "optimized")
    result.contents = describe_onnx_file(path)
    return result


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
    failure = onnxruntime_run_failure(graph, path) if opset == OPSET_FUSED else None
    if failure is not None:  # e.g. an ONNX Runtime without opset 23, or a mask its Attention kernel refuses
        notes.append(f"ONNX Runtime cannot run the opset {OPSET_FUSED} graph ({failure}); used the opset {OPSET} "
                     "graph (attention stays MatMul/Softmax)")
        opset = OPSET
        _export(gm, graph, path, OPSET, math_attention=True)
    try:
        result = _fused_and_checked(gm, graph, path, verify, fusions)
    except InternalError as exc:
        if opset != OPSET_FUSED:
            raise
        first = exc.diagnostics[0].message  # ONNX Runtime's fused attention disagrees: a degenerate mask row
        notes.append(f"{first}; used the opset {OPSET} graph (attention stays MatMul/Softmax), which agrees "
                     "(ONNX Runtime's Attention kernel treats a score bias of float32's minimum, or rows whose every "
                     "key is hidden, otherwise than torch)")
        opset = OPSET
        _export(gm, graph, path, OPSET, math_attention=True)
        result = _fused_and_checked(gm, graph, path, verify, fusions)
    result.opset, result.notes = opset, notes + result.notes
    return result


def _fused_and_checked(gm, graph: Graph, path: str, verify: bool, fusions: tuple[str, ...]) -> OnnxResult:
    """The exported file at `path` with archspec's own fusions, checked (the ONNX checker, what
    ONNX Runtime fuses of it, its outputs against eager's: an InternalError when they differ)."""
    onnx = _onnx()
    model = onnx.load(path)
    fused = None
    if "skip_layer_norm" in fusions:
        fused = fuse_skip_layer_norm(model)
        onnx.save(model, path)
    onnx.checker.check_model(path, full_check=fused is None)  # contrib ops: the checker knows only their names
    found = count_fusions(path, graph, skip_layer_norms=fused)
    fusions = [f for f in found if f.op != "Attention" or "attention" in fusions]
    check = run_onnxruntime_check(gm, graph, path, instead=PLAIN_INSTEAD) if verify else None
    missing = [f for f in fusions if not f.complete]
    notes = ["fewer fused nodes than the spec implies: " + ", ".join(f.describe() for f in missing)] if missing else []
    return checked(OnnxResult(path, len(model.graph.node), None, None, fusions, notes), check)


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
    return Counter(_qualified(n.domain, n.op_type) for n in model.graph.node)


def expected_fusions(graph: Graph) -> dict[str, int]:
    """What the spec implies: as many of each fused op as nodes whose ONNX_FUSION fact names it
    (onnx_fusions.py: one attention op per attention node; one fused GELU per GELU MLP whose
    GELU follows its first linear), of the nodes forward runs: those an output depends on (a node
    kept for its parameters alone is not exported: the MusicGen trial's unused cross attention)."""
    run = graph.ancestors([o.node for o in graph.outputs])
    found = Counter(fusion_of(node) for node in graph.nodes() if not node.is_input and node.name in run)
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


@dataclass(frozen=True)
class OnnxCheck:
    """What the check against eager found: max |onnxruntime - eager|, and (eager's NaN or infinite
    output values, all), which the build line reports."""

    gap: float
    eager_not_finite: tuple[int, int]
    real_tokens_only: bool = False  # a padded check: compared at the real tokens alone (padded_check.py)


def run_onnxruntime_check(gm, graph: Graph, path: str, batch: int = 3,
                          instead: str | None = None) -> OnnxCheck | None:
    """Max |onnxruntime - eager| at a batch size (and sequence lengths) the export was not traced
    with, which must be within the tolerance (`tolerance`; an internal error otherwise). Running
    out of memory there (ONNX Runtime holds each attention's scores whole) is a located error,
    not a crash (memory.py). `instead`: what the user can do instead, said in that error."""
    try:
        import onnxruntime
    except ImportError:
        return None
    try:
        gap, scale, bad = _onnxruntime_gap(onnxruntime, gm, graph, path, batch)
        padded = bool(padding_masks(graph))
    except Exception as exc:  # noqa: BLE001 - only an allocation failure is turned into an error here
        _raise_if_out_of_memory(exc, graph, path, batch)
        raise
    if not gap <= tolerance(scale):  # NaN included
        raise bug(f"ONNX Runtime disagrees with the torch module on {os.path.basename(path)}: max |onnxruntime - "
                  f"eager| = {gap:.2e} > {tolerance(scale):.1e} at batch {batch} (outputs up to {scale:.2e})",
                  hint="this is likely an ONNX Runtime, torch exporter or archspec bug"
                       + (f"; {instead}" if instead else ""))
    return OnnxCheck(gap, bad, padded)


def onnxruntime_run_failure(graph: Graph, path: str, batch: int = 3) -> str | None:
    """Why ONNX Runtime cannot run the file at `path` at the check's batch and lengths (the first
    line of its error), or None when it runs (or onnxruntime is not installed). Running out of
    memory is the located error, as in the check."""
    try:
        import onnxruntime
    except ImportError:
        return None
    try:
        session = _onnxruntime_session(onnxruntime, path)
        args = example_inputs(graph, batch=batch, lengths=other_lengths(graph))
        session.run(None, {n.name: a.numpy() for n, a in zip(graph.inputs(), args)})
    except Exception as exc:  # noqa: BLE001 - the runtime's refusal, reported by the caller
        _raise_if_out_of_memory(exc, graph, path, batch)
        return onnxruntime_reason(str(exc)) or type(exc).__name__
    return None


def onnxruntime_reason(text: str) -> str:
    """The gist of an ONNX Runtime error: the failing op and its message, without the C++
    signature ("Attention: inconsistent q_sequence_length (between attn_mask and Q)")."""
    op = re.search(r"running (\w+) node", text)
    message = text.split("Status Message:", 1)[-1]
    message = message.split(" was false. ", 1)[-1]  # an ORT_ENFORCE: the condition's own words follow
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    gist = (lines[0] if lines else "")[:200]
    return f"{op.group(1)}: {gist}" if op else gist


def _raise_if_out_of_memory(exc: BaseException, graph: Graph, path: str, batch: int) -> None:
    if ran_out_of_memory(exc):
        raise out_of_memory_error(f"ONNX Runtime's check of {os.path.basename(path)} at batch {batch}", graph,
                                  exc, scores=True, hint="--target export (PyTorch's fused attention streams "
                                                         "the scores)") from None


def _onnxruntime_session(onnxruntime, path: str):
    options = onnxruntime.SessionOptions()
    options.log_severity_level = ORT_QUIET
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def tolerance(scale: float) -> float:
    """The largest |onnxruntime - eager| accepted for outputs up to `scale` in size (fp32)."""
    return FP32_TOLERANCE * max(1.0, scale)


def _onnxruntime_gap(onnxruntime, gm, graph: Graph, path: str,
                    batch: int) -> tuple[float, float, tuple[int, int]]:
    """(max |onnxruntime - eager|, max |eager|, (eager's NaN or infinite values, all)) over the
    outputs; a spec that reads a padding mask is checked right-padded, at its real tokens
    (padded_check.py)."""
    session = _onnxruntime_session(onnxruntime, path)
    masks = padding_masks(graph)
    args = right_padded(example_inputs(graph, batch=batch, lengths=other_lengths(graph)), masks)
    feeds = {n.name: a.numpy() for n, a in zip(graph.inputs(), args)}
    outs = session.run(None, feeds)
    with torch.no_grad():
        expected = gm(*args)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    scale = largest_magnitude(expected)
    outs = tuple(torch.from_numpy(o) for o in outs)
    if masks:
        return gap_at_real_tokens(outs, expected, args, masks), scale, not_finite(expected)
    return max_abs_difference(outs, expected), scale, not_finite(expected)
