"""The `decomposed` score part (2-D relative positions split into rows and columns: MViTv2, SAM)
and padded window attention (`pad: true`), against timm's vision_transformer_sam, which we did not
write: the part's bias against `get_decomposed_rel_pos_bias`, global attention with the part
against timm's `Attention(use_rel_pos=True)`, padded windows against timm's `Block` (norm, zero
padding, window partition, attention, crop, residual) on grids the window does not divide; the
located errors; parameters, FLOPs (FlopCounterMode) and fixed tables against the built module."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import export_program
from archspec.core.errors import SpecError

sam = pytest.importorskip("timm.models.vision_transformer_sam")

DIM, HEADS = 32, 4


def spec(grid: tuple[int, int], attention: str) -> str:
    """One attention node over tokens on a grid."""
    h, w = grid
    return (f"name: t\ninputs:\n  x: {{shape: [B, {h * w}, {DIM}], grid: [{h}, {w}]}}\ngraph:\n"
            f"  - {{id: attn, from: x, attention: {attention}}}\noutputs: [attn]\n")


def perturbed(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Noise on every parameter (the rel_pos tables start at zeros in both)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return module.eval()


def timm_names(ref_state: dict, prefix: str) -> dict:
    """timm's Attention / Block names -> the attention node's (`attn.`)."""
    out = {}
    for k, v in ref_state.items():
        k = k.replace("norm1.", "norm.").replace("attn.", "")
        k = k.replace("rel_pos_", "decomposed.rel_pos_")
        out[prefix + k] = v
    return out


def counted(model, *args) -> int:
    """FlopCounterMode's count, with SDPA as its math kernel (matmuls it counts on CPU)."""
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(*args)
    return counter.get_total_flops()


# -- the part's bias == get_decomposed_rel_pos_bias -------------------------------------------

@pytest.mark.parametrize("grid", [(4, 4), (3, 5)])
def test_the_bias_equals_timms_get_decomposed_rel_pos_bias(grid):
    from archspec.compiler.modules.attention.scores.decomposed import DecomposedPositions

    d = DIM // HEADS
    part = perturbed(DecomposedPositions(grid, d))
    q = torch.randn(2, HEADS, grid[0] * grid[1], d)
    want = sam.get_decomposed_rel_pos_bias(q.reshape(2 * HEADS, -1, d), part.rel_pos_h, part.rel_pos_w, grid, grid)
    got = part.bias(q, q)
    assert got.shape == (2, HEADS, grid[0] * grid[1], grid[0] * grid[1])
    assert torch.allclose(got.reshape(want.shape), want, atol=1e-6, rtol=0)


# -- global attention with the part == timm Attention(use_rel_pos) ----------------------------

GLOBAL = f"{{kind: global, heads: {HEADS}, norm: none, residual: false, scores: [decomposed]}}"


@pytest.mark.parametrize("grid", [(4, 4), (3, 5)])
def test_global_attention_with_decomposed_positions_equals_timm(grid):
    ref = perturbed(sam.Attention(DIM, HEADS, use_rel_pos=True, input_size=grid))
    text = spec(grid, GLOBAL)
    model = archspec.build_text(text).eval()
    model.load_state_dict(timm_names(ref.state_dict(), "attn."), strict=True)
    x = torch.randn(3, grid[0], grid[1], DIM)
    with torch.no_grad():
        want = ref(x).reshape(3, -1, DIM)  # [B, H, W, C] -> [B, N, C]
        assert torch.allclose(model(x.reshape(3, -1, DIM)), want, atol=1e-5, rtol=0)
    report = archspec.check_text(text)
    assert report.params == sum(p.numel() for p in ref.parameters()) == sum(p.numel() for p in model.parameters())
    assert report.flops == counted(model, torch.randn(1, grid[0] * grid[1], DIM))
    assert not model.attn.mixes_scores()  # a bias: one fused SDPA


# -- padded windows == timm Block -------------------------------------------------------------

WINDOWED = f"{{kind: window, heads: {HEADS}, window: {{w}}, pad: true, bias: none, scores: [decomposed]}}"


def timm_attention_half(block, x):
    """The attention half of timm's SAM Block (its MLP half is archspec's mlp sub-layer)."""
    B, H, W, C = x.shape
    y, pad_hw = sam.window_partition(block.norm1(x), block.window_size)
    y = sam.window_unpartition(block.attn(y), block.window_size, (H, W), pad_hw)
    return x + y


@pytest.mark.parametrize("grid, window", [((5, 7), 3), ((4, 4), 6), ((6, 6), 3)],
                         ids=["5x7-by-3", "window-larger-than-grid", "no-padding-needed"])
def test_padded_windows_equal_timms_block(grid, window):
    """Grids the window does not divide are padded (SAM pads a 4x4 grid to one 6x6 window, where
    Swin would shrink the window); a grid it divides is not."""
    ref = perturbed(sam.Block(DIM, HEADS, use_rel_pos=True, window_size=window, input_size=grid))
    text = spec(grid, WINDOWED.replace("{w}", str(window)))
    model = archspec.build_text(text).eval()
    own = {k: v for k, v in ref.state_dict().items() if not k.startswith(("norm2.", "mlp."))}
    model.load_state_dict(timm_names(own, "attn."), strict=True)
    assert model.attn.decomposed.rel_pos_h.shape == (2 * window - 1, DIM // HEADS)  # the window's table
    x = torch.randn(2, grid[0], grid[1], DIM)
    with torch.no_grad():
        want = timm_attention_half(ref, x).reshape(2, -1, DIM)
        assert torch.allclose(model(x.reshape(2, -1, DIM)), want, atol=1e-5, rtol=0)


def test_padding_changes_the_output_so_the_comparison_can_fail():
    """Padded places read the zero token (their keys are the qkv bias, attended to); pointing
    them at a real token instead gives other outputs: the test above sees the padding."""
    grid, window = (5, 7), 3
    model = perturbed(archspec.build_text(spec(grid, WINDOWED.replace("{w}", str(window)))))
    x = torch.randn(2, grid[0] * grid[1], DIM)
    with torch.no_grad():
        right = model(x)
        order = model.attn.order.clone()
        model.attn.order.masked_fill_(order == grid[0] * grid[1], 0)
        assert (model(x) - right).abs().max() > 1e-3


@pytest.mark.parametrize("attention", [GLOBAL, WINDOWED.replace("{w}", "3"),
                                       f"{{kind: window, heads: {HEADS}, window: 3, pad: true}}"],
                         ids=["global", "window-pad-decomposed", "window-pad-table"])
def test_params_flops_and_tables_equal_the_built_module(attention):
    """Parameters and FlopCounterMode's count of our module (the padding tokens' projections and
    attention included); the fixed tables of the window kinds (order, inverse, offset indexes)."""
    grid = (5, 7)
    text = spec(grid, attention)
    report, model = archspec.check_text(text), archspec.build_text(text).eval()
    assert report.params == sum(p.numel() for p in model.parameters())
    assert report.flops == counted(model, torch.randn(1, grid[0] * grid[1], DIM))
    if "window" in attention:
        held = sum(b.numel() * b.element_size() for _, b in model.named_buffers())
        assert sum(row.buffer_bytes for row in report.nodes) == held


def test_padded_window_flops_equal_timms_block():
    """Against the reference itself: timm's Block (its MLP too) and ours, attention + mlp."""
    grid, window = (5, 7), 3
    ref = perturbed(sam.Block(DIM, HEADS, use_rel_pos=True, window_size=window, input_size=grid))
    text = spec(grid, WINDOWED.replace("{w}", str(window))).replace(
        "outputs: [attn]", "  - {id: mlp, mlp: {ratio: 4.0}}\noutputs: [mlp]")
    assert archspec.check_text(text).flops == counted(ref, torch.randn(1, grid[0], grid[1], DIM))


def test_a_padded_window_exports_with_a_dynamic_batch():
    text = spec((5, 7), WINDOWED.replace("{w}", "3"))
    report = archspec.check_text(text)
    model = perturbed(archspec.build_text(text))
    program = export_program(model, report.graph)
    x = torch.randn(3, 35, DIM)
    with torch.no_grad():
        assert torch.allclose(program.module()(x), model(x), atol=1e-5, rtol=0)


# -- located errors ----------------------------------------------------------------------------

WITH_CLS = (f"name: t\ninputs:\n  image: [B, 3, 32, 32]\ngraph:\n"   # a 4x4 grid and a class token
            f"  - {{patchify: {{patch: 8, dim: {DIM}, cls_token: true}}}}\n  - {{id: attn, attention: {GLOBAL}}}\n")
SEQUENCE = (f"name: t\ninputs:\n  x: [B, 10, {DIM}]\ngraph:\n"
            f"  - {{id: attn, from: x, attention: {{kind: global, heads: {HEADS}, scores: [decomposed]}}}}\n")


@pytest.mark.parametrize("text, message, key", [
    (SEQUENCE, "decomposed relative positions need tokens on a grid", "scores"),
    (WITH_CLS, "need every query on the 4x4 grid, but there are 17 queries", "scores"),
    (spec((5, 7), f"{{kind: shifted, heads: {HEADS}, window: 3, pad: true}}"), "pad goes with unshifted windows",
     "pad"),
    (spec((6, 6), f"{{kind: window, heads: {HEADS}, window: 3, scores: [talking_heads]}}"),
     "takes score parts that add a bias, and talking_heads", "scores"),
    (spec((5, 7), f"{{kind: window, heads: {HEADS}, window: 3}}"), "window 3 does not divide the 5x7", "window"),
    (spec((6, 6), f"{{kind: window, heads: {HEADS}, window: 3, scores: [{{decomposed: {{size: 3}}}}]}}"),
     "score part 'decomposed' has no option 'size'", "{decomposed: {"),  # at the option itself
], ids=["no-grid", "class-token", "pad-shifted", "explicit-part-on-window", "no-pad-misfit", "unknown-option"])
def test_bad_uses_are_located_errors(text, message, key):
    with pytest.raises(SpecError) as e:
        archspec.check_text(text)
    assert message in str(e.value)
    diagnostic = e.value.diagnostics[0]
    assert diagnostic.path == "attn"
    line = text.splitlines()[diagnostic.loc.line - 1]
    at = key if key.endswith("{") else f"{key}:"  # at its value, or at a score part's option
    assert line[:diagnostic.loc.col - 1].rstrip().endswith(at), (line, diagnostic.loc.col)
