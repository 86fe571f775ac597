"""Registering an op covers it, or fails here naming it: every op and kind in the registry is
taken through the whole pipeline (shapes against the module, FLOPs, export with a dynamic batch,
ONNX Runtime, TensorRT coverage) by one of the harness specs below or by a shipped spec (the
pipeline tests of tests/parity/test_shipped.py run every shipped spec through the same stages).
A new op that none of them uses fails this test with its name and where to add it."""

from __future__ import annotations

import importlib
import importlib.util

import pytest
import torch

import archspec
from archspec.compiler.backends.export import example_inputs, export_program
from archspec.compiler.lower import lower
from archspec.primitives import registry

from tests.conftest import ALL_SPECS

# The ops no other harness takes, through export, ONNX Runtime and TensorRT coverage here.
REST = """
name: rest
inputs:
  image: [B, 3, 16, 16]
graph:
  - {id: patch, patchify: {patch: 4, dim: 8, pos: none}}
  - {id: conv_attn, attention: {kind: convolutional, heads: 2}}
  - {id: xca_attn, attention: {kind: xca, heads: 2}}
  - {id: channel_attn, attention: {kind: channel, heads: 2}}
  - {id: diff_attn, attention: {kind: differential, heads: 2, lambda_init: 0.5, over_grid: true}}
  - {id: nystrom_attn, attention: {kind: nystrom, heads: 2, landmarks: 4, conv_kernel: 3}}
  - {id: grouped_tokens, norm: {kind: group, groups: 2}}
  - {id: img, to_image: {}}
  - {id: grouped_image, norm: {kind: group, groups: 1}}
  - {id: upsampled, conv_transpose: {kernel: 3, stride: 2, padding: 1, output_padding: 1}}
  - {id: excited, squeeze_excite: {hidden: 2}}
  - {id: up, pixel_shuffle: {factor: 2}}
  - {id: tok, to_tokens: {}}
  - {id: last, select: {index: -1}}
  - {id: positive, from: tok, compare: {op: gt, value: 0.0, dtype: int64}}
  - {id: zero, constant: {shape: [1, 1]}}
  - {id: relu_by_where, from: [positive, tok, zero], where: {}}
outputs: [tok, last, relu_by_where]
"""

# Ops taken through the pipeline elsewhere, each with where (a loss is trained, never exported).
ELSEWHERE = {"loss/contrastive": "clip_vit_b32's objectives, trained by tests/train (objectives are not exported)",
             "loss/mse": "tests/train/test_mse_objective.py (objectives are not exported)"}

# test module -> the spec it runs through eager, FLOPs, export, ONNX Runtime and TensorRT coverage
HARNESS = {
    "tests.primitives.test_op_coverage": "REST",
    "tests.primitives.test_every_op": "EVERY_OP",
    "tests.primitives.test_families": "FAMILIES",
    "tests.primitives.test_pad": "EVERYTHING",
    "tests.primitives.test_topk": "TOPK",
    "tests.primitives.test_norm_options": "NORMS",
    "tests.primitives.test_expand_op": "EXPAND",
    "tests.primitives.test_unfold_fold": "FOLDS",
    "tests.primitives.test_constant_sizes": "MASK",
    "tests.primitives.test_index_ops": "ALL",
    "tests.parity.test_fnet": "SPEC",
}


def labels_of(graph) -> set[str]:
    return {node.op.label for node in graph.nodes() if not node.is_input}


def covered() -> dict[str, str]:
    """op label -> the first harness or shipped spec that takes it through the pipeline."""
    found: dict[str, str] = {}
    for module, name in HARNESS.items():
        text = getattr(importlib.import_module(module), name)
        for label in labels_of(archspec.check_text(text).graph):
            found.setdefault(label, f"{module}.{name}")
    for path in ALL_SPECS:
        for label in labels_of(archspec.check(str(path)).graph):
            found.setdefault(label, path.name)
    return found


def test_every_registered_op_goes_through_the_pipeline_somewhere():
    found = covered()
    missing = sorted(op.label for op in registry.ops() if op.label not in found and op.label not in ELSEWHERE)
    assert not missing, (f"ops no harness or shipped spec takes through export, ONNX Runtime and TensorRT coverage: "
                         f"{missing}; add a node of each to one of {sorted(HARNESS)} (or a spec of its own listed in "
                         "HARNESS)")


def test_every_registered_op_declares_the_dtypes_it_reads():
    from archspec.primitives.dtypes import READS

    missing = sorted(op.label for op in registry.ops() if READS.get(op) is None)
    assert not missing, (f"ops without the READS fact (the dtypes each input may have): {missing}; register it in the "
                         "op's rule file, e.g. READS.register(MY_OP, FLOATS) (archspec/primitives/dtypes.py)")


@pytest.mark.parametrize("module,name", sorted(HARNESS.items()))
def test_each_harness_spec_checks(module, name):
    assert labels_of(archspec.check_text(getattr(importlib.import_module(module), name)).graph)


def test_the_rest_exports_with_a_dynamic_batch_and_runs_in_onnxruntime(tmp_path):
    report = archspec.check_text(REST)
    model = lower(report.graph, seed=0).eval()
    program = export_program(model, report.graph)
    for batch in (1, 3):
        args = example_inputs(report.graph, batch=batch)
        with torch.no_grad():
            for got, want in zip(program.module()(*args), model(*args)):
                assert torch.equal(got, want)
    onnxruntime = pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.onnx import export_onnx

    path = str(tmp_path / "rest.onnx")
    export_onnx(model, report.graph, path, verify=False)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    args = example_inputs(report.graph, batch=2)
    outs = session.run(None, {n.name: a.numpy() for n, a in zip(report.graph.inputs(), args)})
    with torch.no_grad():
        for got, want in zip(outs, model(*args)):
            assert torch.allclose(torch.from_numpy(got), want, atol=1e-5)


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_the_rest():
    from archspec.compiler.backends import tensorrt as T

    coverage = T.coverage_report(archspec.check_text(REST).graph, batch="1:8:64")
    assert coverage.complete, coverage.summary()
