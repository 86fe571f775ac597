"""attention kind=outlook (issue 35): VOLO's outlook attention against timm's OutlookAttention
with the same weights (stride 2 over an even and an odd grid, where the average pool rounds up;
stride 1), as a pre-norm sub-layer; parameters, FLOPs against FlopCounterMode, node shapes, its
facts (DECODE: it mixes neighbouring tokens; no ONNX fusion), located errors, and the exports
(torch.export with a dynamic batch, ONNX against onnxruntime, TensorRT's operator coverage: the
stride's average pool is a padded sum over cells, since avg_pool2d with ceil_mode has no
TensorRT converter with a dynamic batch). These exports are what let specs/volo_d1.yaml run its
pipeline tests in the slow tier only (tests/conftest.py's PIPELINE_ELSEWHERE).

Small specs; all CPU fp32."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.backends.onnx import export_onnx
from archspec.compiler.backends.onnx_fusions import fusion_of
from archspec.primitives.decoding import DECODE, ROLE, Mixes
from archspec.primitives.ops.attention.outlook import OUTLOOK

from tests.conftest import build_counted, checks_shapes, checks_tensorrt_coverage
from tests.primitives.test_every_op import TOL

volo = pytest.importorskip("timm.models.volo")

OUTLOOK_SPEC = """
name: outlook_ops
inputs:
  x: {shape: [B, 64, 16], grid: [8, 8]}
  odd: {shape: [B, 49, 16], grid: [7, 7]}
graph:
  - {id: strided, from: x, attention: {kind: outlook, heads: 2, stride: 2, norm: none, residual: false}}
  - {id: dense, from: x, attention: {kind: outlook, heads: 4, kernel_size: 3, padding: 1, qkv_bias: true,
                                     norm: none, residual: false}}
  - {id: odd_grid, from: odd, attention: {kind: outlook, heads: 2, stride: 2, norm: none, residual: false}}
  - {id: block, from: x, attention: {kind: outlook, heads: 2, stride: 2}}
outputs: [strided, dense, odd_grid, block]
"""

# node -> timm OutlookAttention's arguments (dim 16) and the input it reads
REFERENCES = {
    "strided": (dict(num_heads=2, stride=2), "x"),
    "dense": (dict(num_heads=4, stride=1, qkv_bias=True), "x"),
    "odd_grid": (dict(num_heads=2, stride=2), "odd"),
}


def timm_outlook(model, node: str, **kwargs):
    """timm's OutlookAttention holding the node's weights (noise on them first: timm zeroes biases)."""
    ref = volo.OutlookAttention(16, **kwargs).eval()
    weights = {k: v for k, v in getattr(model, node).state_dict().items() if not k.startswith("norm.")}
    ref.load_state_dict(weights)
    return ref


def grid_form(x, side):
    return x.reshape(x.shape[0], side, side, x.shape[-1])  # [B, N, C] -> [B, H, W, C], timm's layout


def perturbed(model):
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=generator))
    return model


def inputs(batch: int = 2):
    generator = torch.Generator().manual_seed(1)
    return torch.randn(batch, 64, 16, generator=generator), torch.randn(batch, 49, 16, generator=generator)


def test_against_timm_outlook_attention():
    _, model = build_counted(OUTLOOK_SPEC)
    perturbed(model)
    x, odd = inputs()
    outs = dict(zip(("strided", "dense", "odd_grid", "block"), model(x, odd)))
    with torch.no_grad():
        for node, (kwargs, source) in REFERENCES.items():
            ref = timm_outlook(model, node, **kwargs)
            tokens = {"x": x, "odd": odd}[source]
            side = 8 if source == "x" else 7
            want = ref(grid_form(tokens, side)).reshape(tokens.shape)
            assert torch.allclose(outs[node], want, atol=TOL), node
        # the pre-norm sub-layer: x + attn(norm(x)) (timm's Outlooker's first half)
        ref = timm_outlook(model, "block", num_heads=2, stride=2)
        want = x + ref(grid_form(model.block.norm(x), 8)).reshape(x.shape)
        assert torch.allclose(outs["block"], want, atol=TOL)


def test_a_wrong_stride_is_seen():
    """The comparison can fail: timm's module with stride 1 where the node has 2 differs."""
    _, model = build_counted(OUTLOOK_SPEC)
    perturbed(model)
    x, odd = inputs()
    with torch.no_grad():
        wrong = timm_outlook(model, "strided", num_heads=2, stride=1)(grid_form(x, 8)).reshape(x.shape)
        assert not torch.allclose(model(x, odd)[0], wrong, atol=1e-3)


def test_shapes_params_and_flops():
    report, model = build_counted(OUTLOOK_SPEC)
    x, odd = inputs(1)
    checks_shapes(report, model, (x, odd))
    per_node = {name: sum(p.numel() for p in getattr(model, name).parameters()) for name in ("strided", "dense")}
    timm_counts = {name: sum(p.numel() for p in volo.OutlookAttention(16, **kw).parameters())
                   for name, (kw, _) in REFERENCES.items() if name in per_node}
    assert per_node == timm_counts
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(x, odd)
    assert counter.get_total_flops() == report.flops


def test_facts():
    """It mixes neighbouring tokens (generate refuses it, naming why), heads no role, no ONNX fusion."""
    decode = DECODE.of(OUTLOOK)
    assert isinstance(decode, Mixes) and "neighbourhood" in decode.why
    assert ROLE.of(OUTLOOK) is None
    report = archspec.check_text(OUTLOOK_SPEC)
    assert fusion_of(report.graph.node("strided")) is None


def test_exports_with_a_dynamic_batch():
    report, model = build_counted(OUTLOOK_SPEC)
    program = export_program(model, report.graph)
    x, odd = inputs(5)  # not the batch it was traced with
    with torch.no_grad():
        for got, want in zip(program.module()(x, odd), model(x, odd), strict=True):
            assert torch.allclose(got, want, atol=TOL)


def test_onnx_matches_onnxruntime(tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    report, model = build_counted(OUTLOOK_SPEC)
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4  # at batch 3, traced at another


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_outlook_attention(tmp_path, capsys):
    checks_tensorrt_coverage(OUTLOOK_SPEC, tmp_path, capsys, batch="1:4:16")


@pytest.mark.parametrize("node, message, hint", [
    ("{from: seq, attention: {kind: outlook, heads: 2}}", "outlook attention needs a token grid, got",
     "grid: [H, W]"),
    ("{from: cls, attention: {kind: outlook, heads: 2}}", "outlook attention cannot run over class tokens",
     "global attention"),
    ("{from: x, attention: {kind: outlook, heads: 3}}", "3 heads do not divide the width 16", None),
    ("{from: x, attention: {kind: outlook, heads: 2, kernel_size: 11, padding: 1}}",
     "a 11x11 neighbourhood is larger than the 8x8 token grid padded by 1", "smaller kernel_size"),
    ("{from: x, attention: {kind: outlook, heads: 2, padding: 0}}",
     "kernel_size 3, padding 0 and stride 1 give 6 neighbourhoods along an axis, but the grid pooled by the "
     "stride has 8 places", "padding 1"),
    ("{from: x, attention: {kind: outlook, heads: 2, stride: 0}}", "stride", None),
    ("{from: x, attention: {kind: outlook, heads: 2, window: 3}}", "window", None),
])
def test_bad_parameters_are_located_errors(node, message, hint):
    text = ("name: bad\ninputs:\n  x: {shape: [B, 64, 16], grid: [8, 8]}\n  seq: [B, 10, 16]\ngraph:\n"
            "  - {id: cls, from: x, tokens: {count: 1}}\n"
            f"  - {node}\n")
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    d = info.value.diagnostics[0]
    assert message in d.message, d.message
    assert d.loc is not None and d.loc.line == 7
    if hint:
        assert hint in str(d.hint or ""), d.hint
