"""attention kind=pooled (MViTv2's pooling attention) against timm's mvitv2.py, which we did not
write: the kind with `norm: none, residual: false` against `MultiScaleAttention` (mode conv, no
class token) with the same weights, over query strides 1 and 2, key strides 1, 2 and 4, with and
without residual pooling and relative positions (decomposed, across the two grids: timm's
cal_rel_pos_type), a width change; the sub-layer (norm: pre) against the attention half of timm's
`MultiScaleBlock` (norm1, shortcut_proj_attn from the normed input, the shortcut's max pool); the
shapes, parameters and FLOPs (FlopCounterMode) the checker gives; the located errors for strides
that do not divide the grid, an even kernel, class tokens, heads that do not divide the output
width, a post-norm; the relative tables' resampling. POOLED_SPEC takes the kind through export
with a dynamic batch, ONNX Runtime, TensorRT's coverage and model.py (mvitv2_xt's and mvitv2_t's
pipeline tests run in the slow tier: conftest.PIPELINE_ELSEWHERE, LARGER_SIBLINGS)."""

from __future__ import annotations

import importlib.util
from functools import partial

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import example_inputs, export_program
from archspec.compiler.backends.onnx import export_onnx
from archspec.compiler.backends.source import standalone_source
from archspec.core.errors import SpecError

from tests.conftest import checks_tensorrt_coverage

mvitv2 = pytest.importorskip("timm.models.mvitv2")

TOL = 1e-5
NORM = partial(torch.nn.LayerNorm, eps=1e-6)  # timm builds mvitv2 with norm_eps 1e-6


def spec(grid: tuple[int, int], width: int, attention: str, cls_token: bool = False) -> str:
    """One attention node over tokens on a grid (with `cls_token`, a patchify's, behind a class token)."""
    h, w = grid
    if cls_token:
        return (f"name: t\ninputs:\n  image: [B, 3, {4 * h}, {4 * w}]\ngraph:\n"
                f"  - {{id: x, patchify: {{patch: 4, dim: {width}, cls_token: true, pos: none}}}}\n"
                f"  - {{id: attn, attention: {attention}}}\noutputs: [attn]\n")
    return (f"name: t\ninputs:\n  x: {{shape: [B, {h * w}, {width}], grid: [{h}, {w}]}}\ngraph:\n"
            f"  - {{id: attn, from: x, attention: {attention}}}\noutputs: [attn]\n")


def perturbed(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Noise on every parameter (the rel_pos tables start at zeros, LayerNorms at 1 and 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return module.eval()


def ours_from_timm(state: dict) -> dict:
    """timm's MultiScaleAttention / MultiScaleBlock names -> the attention node's (`attn.`)."""
    out = {}
    for k, v in state.items():
        k = k.replace("norm1.", "norm.").replace("shortcut_proj_attn.", "shortcut_proj.").replace("attn.", "")
        for t in "qkv":
            k = k.replace(f"pool_{t}.weight", f"pool_{t}.conv.weight").replace(f"norm_{t}.", f"pool_{t}.norm.")
        k = k.replace("rel_pos_", "decomposed.rel_pos_")
        out["attn." + k] = v
    return out


def options(heads, dim, stride_q, stride_kv, residual_pooling=True, rel_pos=True, kernel=3) -> str:
    scores = ", scores: [decomposed]" if rel_pos else ""
    return (f"{{kind: pooled, heads: {heads}, dim: {dim}, kernel: {kernel}, stride_q: {stride_q}, "
            f"stride_kv: {stride_kv}, residual_pooling: {str(residual_pooling).lower()}{scores}")


CASES = [  # (grid, width, heads, dim, stride_q, stride_kv, residual pooling, relative positions)
    ((8, 8), 16, 1, 16, 1, 4, True, True),     # MViTv2's first stage: keys on a 2x2 grid
    ((8, 8), 16, 2, 32, 2, 2, True, True),     # a stage's first block: the grid halves, the width doubles
    ((4, 4), 24, 2, 48, 2, 1, True, True),     # queries coarser than the keys
    ((6, 6), 16, 2, 16, 1, 2, False, False),   # neither residual pooling nor positions
    ((4, 4), 16, 4, 16, 1, 1, True, True),     # kernel 3 at stride 1: still pooled (and normed)
]


@pytest.mark.parametrize("grid,width,heads,dim,stride_q,stride_kv,residual,rel_pos", CASES)
def test_the_attention_equals_timms_multiscale_attention(grid, width, heads, dim, stride_q, stride_kv, residual,
                                                         rel_pos):
    ref = perturbed(mvitv2.MultiScaleAttention(
        width, dim, grid, num_heads=heads, kernel_q=(3, 3), kernel_kv=(3, 3), stride_q=(stride_q,) * 2,
        stride_kv=(stride_kv,) * 2, has_cls_token=False, rel_pos_type="spatial" if rel_pos else "",
        residual_pooling=residual, norm_layer=NORM))
    text = spec(grid, width, options(heads, dim, stride_q, stride_kv, residual, rel_pos)
                + ", norm: none, residual: false}")
    report = archspec.check_text(text)
    model = archspec.build_text(text).eval()
    model.load_state_dict(ours_from_timm({"attn." + k: v for k, v in ref.state_dict().items()}))
    x = torch.randn(2, grid[0] * grid[1], width, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want, size = ref(x, list(grid))
        got = model(x)
    assert got.shape == want.shape
    assert float((got - want).abs().max()) < TOL
    out = report.graph.type_of("attn")
    assert out.grid == tuple(size) and out.shape[1:] == (size[0] * size[1], dim)  # the query grid, carried
    assert sum(p.numel() for p in model.parameters()) == report.params == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("width,dim,stride_q", [(16, 32, 2), (16, 16, 2), (16, 32, 1)])
def test_the_sublayer_equals_the_attention_half_of_timms_block(width, dim, stride_q):
    """norm1, the attention, and the shortcut: projected from the normed input where the width
    changes, max-pooled (kernel s + 1, stride s) where the queries are strided."""
    grid = (8, 8)
    block = perturbed(mvitv2.MultiScaleBlock(
        width, dim, 2, grid, kernel_q=(3, 3), kernel_kv=(3, 3), stride_q=(stride_q,) * 2, stride_kv=(2, 2),
        has_cls_token=False, expand_attn=True, norm_layer=NORM))
    text = spec(grid, width, options(2, dim, stride_q, 2) + ", norm_eps: 1.0e-6}")
    model = archspec.build_text(text).eval()
    state = {k: v for k, v in block.state_dict().items() if not k.startswith(("norm2.", "mlp."))}
    model.load_state_dict(ours_from_timm(state))
    x = torch.randn(2, 64, width, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        normed = block.norm1(x)
        shortcut = x if block.shortcut_proj_attn is None else block.shortcut_proj_attn(normed)
        attended, size = block.attn(normed, list(grid))
        want = block._shortcut_pool(shortcut, list(grid)) + attended  # MultiScaleBlock.forward's first half
        got = model(x)
    assert float((got - want).abs().max()) < TOL
    assert (model.attn.shortcut_pool is None) == (stride_q == 1)
    assert (model.attn.shortcut_proj is None) == (width == dim)


def test_the_comparison_sees_swapped_relative_tables():
    """The tables matter: rows and columns swapped (the same shape on a square grid) change the output."""
    grid, width = (8, 8), 16
    ref = perturbed(mvitv2.MultiScaleAttention(width, width, grid, num_heads=1, kernel_q=(3, 3), kernel_kv=(3, 3),
                                               stride_kv=(4, 4), has_cls_token=False))
    text = spec(grid, width, options(1, width, 1, 4) + ", norm: none, residual: false}")
    model = archspec.build_text(text).eval()
    state = ours_from_timm({"attn." + k: v for k, v in ref.state_dict().items()})
    state["attn.decomposed.rel_pos_h"], state["attn.decomposed.rel_pos_w"] = (state["attn.decomposed.rel_pos_w"],
                                                                              state["attn.decomposed.rel_pos_h"])
    model.load_state_dict(state)
    x = torch.randn(1, 64, width)
    with torch.no_grad():
        assert float((model(x) - ref(x, list(grid))[0]).abs().max()) > 100 * TOL


def test_flops_equal_flop_counter():
    """qkv, the poolings (depthwise convs), the attention, the relative positions' einsums, the
    projection and the shortcut's projection, as FlopCounterMode counts them on the module."""
    text = spec((8, 8), 16, options(2, 32, 2, 2) + "}")
    report = archspec.check_text(text)
    model = archspec.build_text(text).eval()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 64, 16))
    assert report.flops == counter.get_total_flops()


def test_the_relative_tables_resample_to_the_grid():
    """Tables saved at another grid are interpolated linearly along the offsets, as timm's
    checkpoint_filter_fn does, on loading (the RESAMPLE fact)."""
    from archspec.compiler.weights.resample import resamplers

    big = archspec.build_text(spec((16, 16), 16, options(1, 16, 1, 4) + "}")).eval()
    small = archspec.build_text(spec((8, 8), 16, options(1, 16, 1, 4) + "}")).eval()
    table = big.attn.decomposed.rel_pos_h.detach()  # [31, 16]
    resample = resamplers(small)["attn.decomposed.rel_pos_h"]
    want = torch.nn.functional.interpolate(table.T[None], size=15, mode="linear")[0].T  # timm's filter
    assert torch.equal(resample(table), want) and want.shape == small.attn.decomposed.rel_pos_h.shape


@pytest.mark.parametrize("grid,width,attention,cls_token,message", [
    ((6, 6), 16, options(1, 16, 4, 1) + "}", False, "stride_q 4 does not divide the 6x6 token grid"),
    ((8, 6), 16, options(1, 16, 1, 4) + "}", False, "stride_kv 4 does not divide the 8x6 token grid"),
    ((8, 8), 16, options(1, 16, 1, 1, kernel=2) + "}", False, "kernel 2 must be odd"),
    ((8, 8), 16, options(3, 32, 2, 2) + "}", False, "3 heads do not divide the width 32"),
    ((8, 8), 16, options(1, 16, 2, 2) + "}", True, "pooled attention cannot run over class tokens"),
    ((8, 8), 16, options(1, 16, 2, 2) + ", norm: post}", False, "goes with norm: pre or none, not post"),
    ((8, 8), 16, "{kind: pooled, heads: 1, scores: [talking_heads]}", False, "takes score parts that add a bias"),
])
def test_bad_options_are_located_errors(grid, width, attention, cls_token, message):
    with pytest.raises(SpecError) as caught:
        archspec.check_text(spec(grid, width, attention, cls_token))
    diagnostic = caught.value.diagnostics[0]
    assert message in diagnostic.message and diagnostic.path == "attn" and diagnostic.loc.line > 0


# Every way the kind pools: keys coarser than the queries, the grid halved with the width doubled,
# queries coarser than the keys, no pooling at all (kernel 1, stride 1); with its sub-layer and without.
POOLED_SPEC = """
name: pooled_ops
inputs:
  x: {shape: [B, 64, 16], grid: [8, 8]}
graph:
  - {id: first, from: x, attention: {kind: pooled, heads: 1, stride_kv: 4, scores: [decomposed]}}
  - {id: strided, attention: {kind: pooled, heads: 2, dim: 32, stride_q: 2, stride_kv: 2, scores: [decomposed]}}
  - {id: plain, attention: {kind: pooled, heads: 2, kernel: 1, residual_pooling: false}}
  - {id: coarse_queries, from: first, attention: {kind: pooled, heads: 2, stride_q: 2, scores: [decomposed],
                                                 norm: none, residual: false}}
outputs: [plain, coarse_queries]
"""


def built_harness():
    report = archspec.check_text(POOLED_SPEC)
    return report, archspec.build_text(POOLED_SPEC).eval()


def test_the_harness_exports_with_a_dynamic_batch_and_as_model_py(tmp_path):
    from tests.lowering.test_lowering import run_without_archspec

    report, model = built_harness()
    assert [report.graph.type_of(n).grid for n in ("strided", "plain", "coarse_queries")] == [(4, 4)] * 3
    program = export_program(model, report.graph)
    args = example_inputs(report.graph, batch=5)  # not the batch it was traced with
    with torch.no_grad():
        for got, want in zip(program.module()(*args), model(*args), strict=True):
            assert torch.allclose(got, want, atol=TOL)
    (tmp_path / "model.py").write_text(standalone_source(model, report.name, report.file))
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    gap = run_without_archspec(tmp_path, model, example_inputs(report.graph, batch=2), f"""
        import torch, model
        forward = model.{type(model).__name__}().eval()
        forward.load_state_dict(torch.load("weights.pt", weights_only=True))
    """)
    assert gap == 0.0


def test_the_harness_runs_in_onnxruntime_with_one_attention_op_a_node(tmp_path):
    pytest.importorskip("onnxruntime")
    report, model = built_harness()
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"), optimize=True)  # opset 23's Attention
    assert result.max_difference is not None and result.max_difference < 1e-4  # at batch 3, traced at another
    assert [(f.found, f.expected) for f in result.fusions if f.op == "Attention"] == [(4, 4)]


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_pooled_attention(tmp_path, capsys):
    checks_tensorrt_coverage(POOLED_SPEC, tmp_path, capsys, batch="1:4:16")
