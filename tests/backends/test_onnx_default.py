"""`archspec build --target onnx` ships the fast file: model.onnx is the export fused for ONNX
Runtime (one Attention op per attention, one Gelu per GELU MLP), the same file `archspec bench`
times; `--plain-onnx` writes the opset 18 one (attention spelled out) for other runtimes.
report.json's "onnx" section says what the file holds, counted in the written file; ONNX
Runtime's outputs are checked against the torch module, and a disagreement stops the build."""

from __future__ import annotations

import io
import json
from collections import Counter
from contextlib import redirect_stderr

import pytest
import torch

import archspec
from archspec.cli.main import main
from archspec.core.errors import InternalError

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from archspec.compiler.backends.export import example_inputs, other_lengths  # noqa: E402

from tests.conftest import ROOT, scratch  # noqa: E402

VIT = str(ROOT / "specs" / "vit_ti16.yaml")
DEPTH = 2
SMALL = {"img": "32", "depth": str(DEPTH)}
SETS = [arg for key, value in SMALL.items() for arg in ("--set", f"{key}={value}")]
ATOL = 1e-4


class Builds:
    """The tiny ViT built at --target onnx: `builds["optimized"]` (no flag) and `builds["plain"]`
    (--plain-onnx), each built the first time it is asked for, in this process (no second torch
    import); `builds.stderr[variant]` is what the build printed."""

    def __init__(self, root):
        self.root, self.folders, self.stderr = root, {}, {}

    def __getitem__(self, variant: str):
        if variant not in self.folders:
            folder = self.root / variant
            status, self.stderr[variant] = run_main("build", VIT, *SETS, "--target", "onnx", *FLAGS[variant],
                                                    "-o", str(folder))
            assert status == 0, self.stderr[variant]
            self.folders[variant] = folder
        return self.folders[variant]


FLAGS = {"optimized": [], "plain": ["--plain-onnx"]}


def run_main(*args) -> tuple[int, str]:
    """`archspec ARGS` in this process: (exit status, what it printed on stderr)."""
    stderr = io.StringIO()
    with redirect_stderr(stderr):
        status = main(list(args))
    return status, stderr.getvalue()


@pytest.fixture(scope="module")
def builds(request, tmp_path_factory):
    return Builds(scratch(request, tmp_path_factory, "onnx_builds"))


@pytest.fixture(scope="module")
def seeded():
    """(the torch model the builds hold, in eval mode: seed 0; its checked graph)."""
    return archspec.build(VIT, overrides=SMALL, seed=0).eval(), archspec.check(VIT, overrides=SMALL).graph


def op_counts(path) -> Counter:
    """Domain-qualified op types of the nodes in the .onnx file at `path`."""
    model = onnx.load(str(path))
    return Counter((f"{n.domain}." if n.domain else "") + n.op_type for n in model.graph.node)


def default_opset(path) -> int:
    return max(o.version for o in onnx.load(str(path)).opset_import if o.domain in ("", "ai.onnx"))


def onnx_section(folder) -> dict:
    return json.loads((folder / "report.json").read_text())["onnx"]


def test_the_default_build_writes_fused_attention(builds):
    ops = op_counts(builds["optimized"] / "model.onnx")
    assert ops["Attention"] == DEPTH and ops["Gelu"] == DEPTH, ops
    assert ops["Softmax"] == 0  # no attention spelled out beside the fused ops
    assert default_opset(builds["optimized"] / "model.onnx") == 23
    assert "optimized" in builds.stderr["optimized"] and "Attention 2" in builds.stderr["optimized"]


def test_plain_onnx_writes_the_opset_18_file_without_fused_ops(builds):
    ops = op_counts(builds["plain"] / "model.onnx")
    assert ops["Attention"] == 0 and ops["Gelu"] == 0 and ops["Softmax"] == DEPTH, ops
    assert default_opset(builds["plain"] / "model.onnx") == 18
    section = onnx_section(builds["plain"])
    assert section["variant"] == "plain" and section["fusions"] == [] and section["opset"] == 18


@pytest.mark.parametrize("variant", ["optimized", "plain"])
def test_report_json_says_what_the_written_file_holds(builds, variant):
    path = builds[variant] / "model.onnx"
    section, ops = onnx_section(builds[variant]), op_counts(path)
    assert section["variant"] == variant
    assert section["nodes"] == sum(ops.values())
    assert section["domains"] == sorted({op.rpartition(".")[0] or "ai.onnx" for op in ops})
    assert section["opset"] == default_opset(path)
    assert {f["op"]: f["count"] for f in section["fusions"]} == {
        op: ops[op] for op in ("Attention", "Gelu") if ops[op]}
    manifest = json.loads((builds[variant] / "manifest.json").read_text())
    assert "report.json" in manifest["files"]  # rewritten before the commit: its hash is the final file's


@pytest.mark.parametrize("variant", ["optimized", "plain"])
def test_model_onnx_agrees_with_the_torch_model_in_onnxruntime(builds, seeded, variant):
    model, graph = seeded
    session = onnxruntime.InferenceSession(str(builds[variant] / "model.onnx"), providers=["CPUExecutionProvider"])
    args = example_inputs(graph, batch=3, lengths=other_lengths(graph))
    (got,) = session.run(None, {n.name: a.numpy() for n, a in zip(graph.inputs(), args)})
    with torch.no_grad():
        want = model(*args)
    assert float((torch.from_numpy(got) - want).abs().max()) < ATOL
    assert onnx_section(builds[variant])["max_difference"] < ATOL  # the build checked it too


def test_plain_onnx_with_another_target_is_a_usage_error(tmp_path):
    status, stderr = run_main("build", VIT, *SETS, "--target", "export", "--plain-onnx", "-o", str(tmp_path / "out"))
    assert status == 2 and "--plain-onnx" in stderr and "--target onnx" in stderr, stderr
    assert "Traceback" not in stderr and not (tmp_path / "out").exists()


def test_bench_times_the_file_the_build_writes(builds, seeded, tmp_path):
    from archspec.compiler.backends import targets

    model, graph = seeded
    targets.get("onnx").bench(model, graph, "fp32", workdir=str(tmp_path), threads=1, device="cpu")
    assert op_counts(tmp_path / "model.onnx") == op_counts(builds["optimized"] / "model.onnx")


def test_a_file_that_disagrees_with_the_torch_model_stops_the_build(builds):
    from archspec.compiler.backends.onnx import run_onnxruntime_check

    model = archspec.build(VIT, overrides=SMALL, seed=1).eval()  # other weights than the file's (seed 0)
    graph = archspec.check(VIT, overrides=SMALL).graph
    with pytest.raises(InternalError, match="ONNX Runtime disagrees with the torch module"):
        run_onnxruntime_check(model, graph, str(builds["optimized"] / "model.onnx"))


def test_a_file_with_onnxruntime_contrib_ops_says_it_needs_onnxruntime(tmp_path):
    from onnx import TensorProto, helper

    from archspec.compiler.backends.onnx import describe_onnx_file

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])
    gamma = helper.make_tensor("gamma", TensorProto.FLOAT, [8], [1.0] * 8)
    beta = helper.make_tensor("beta", TensorProto.FLOAT, [8], [0.0] * 8)
    fused = helper.make_node("SkipLayerNormalization", ["x", "x", "gamma", "beta"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([fused], "g", [x], [y], initializer=[gamma, beta])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, str(tmp_path / "model.onnx"))
    contents = describe_onnx_file(str(tmp_path / "model.onnx"))
    assert contents.domains == ["com.microsoft"] and not contents.portable
    assert contents.fusions == [("skip_layer_norm", "com.microsoft.SkipLayerNormalization", 1)]
    assert contents.runs_on().startswith("ONNX Runtime only") and "--plain-onnx" in contents.runs_on()


BERT_TINY = {"depth": 1, "dim": 32, "heads": 2, "ffn": 64, "vocab": 100}


def test_bert_padding_mask_runs_in_onnxruntimes_fused_attention(tmp_path):
    """A key-padding mask is [B, 1, N, M] (one row per query): ONNX Runtime 1.32's opset 23
    Attention refused BERT's [B, 1, 1, M] ("inconsistent q_sequence_length"), so bert_base and
    t5_tiny were shipped unfused; now their fused file runs and is the one written."""
    from archspec.compiler.backends.onnx import write_model_onnx

    bert = str(ROOT / "specs" / "bert_base.yaml")
    graph = archspec.check(bert, overrides=BERT_TINY).graph
    model = archspec.build(bert, overrides=BERT_TINY, seed=0).eval()
    path = tmp_path / "model.onnx"
    result = write_model_onnx(model, graph, str(path))
    assert result.max_difference is not None and result.max_difference < ATOL
    section = result.report_entry()
    assert section["opset"] == 23 == default_opset(path) and op_counts(path)["Attention"] == 1, section["notes"]
    assert not any("cannot run" in note for note in section["notes"])


def test_a_fused_file_onnxruntime_cannot_run_falls_back_to_the_opset_18_graph(tmp_path, monkeypatch):
    """Where ONNX Runtime refuses the opset 23 graph (an older runtime, a mask it does not take),
    the build ships the opset 18 graph and says why."""
    from archspec.compiler.backends import onnx as onnx_backend

    monkeypatch.setattr(onnx_backend, "onnxruntime_run_failure",
                        lambda graph, path: "Attention: a mask this runtime does not take")
    bert = str(ROOT / "specs" / "bert_base.yaml")
    graph = archspec.check(bert, overrides=BERT_TINY).graph
    model = archspec.build(bert, overrides=BERT_TINY, seed=0).eval()
    path = tmp_path / "model.onnx"
    section = onnx_backend.write_model_onnx(model, graph, str(path)).report_entry()
    assert section["opset"] == 18 == default_opset(path) and op_counts(path)["Attention"] == 0
    assert ("ONNX Runtime cannot run the opset 23 graph (Attention: a mask this runtime does not take); used "
            "the opset 18 graph" in " ".join(section["notes"]))


PAIR_MASKED = """name: pair_masked
dims: {L: [2, 16]}
inputs:
  x: [B, L, 16]
  attention_mask: {shape: [B, L], dtype: int64}
graph:
  - {id: keep, from: attention_mask, compare: {op: ne, value: 0}}
  - {id: pair, from: [keep, keep], einsum: {eq: "b i, b j -> b i j"}}   # mask_i * mask_j, DeBERTa's
  - {id: hidden, shift: {value: -1.0}}
  - {id: pair_min, scale: {factor: 3.4028234663852886e+38}}              # float32's minimum where hidden
  - {id: pair_bias, rearrange: {pattern: "b i j -> b 1 i j"}}
  - {id: attn, from: [x, pair_bias], attention: {kind: global, heads: 2, bias: true}}
outputs: [attn]
"""


def test_a_fused_file_that_disagrees_with_eager_falls_back_to_the_opset_18_graph(tmp_path):
    """The DeBERTa trial: a query-and-key padding mask of float32's minimum hides every key of a
    padded query's row; ONNX Runtime's fused Attention gives those rows otherwise than torch (2.14
    off), and the build failed as a bug. It now writes the opset 18 graph, which agrees, and says so."""
    from archspec.compiler.backends.onnx import write_model_onnx

    graph = archspec.check_text(PAIR_MASKED).graph
    model = archspec.build_text(PAIR_MASKED, seed=0).eval()
    path = tmp_path / "model.onnx"
    result = write_model_onnx(model, graph, str(path))
    section = result.report_entry()
    assert section["opset"] == 18 == default_opset(path) and op_counts(path)["Attention"] == 0, section["notes"]
    assert result.max_difference is not None and result.max_difference < ATOL
    assert any("ONNX Runtime disagrees with the torch module" in note and "used the opset 18 graph" in note
               for note in section["notes"]), section["notes"]
