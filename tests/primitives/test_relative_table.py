"""The `relative_table` score part (a learned per-head bias for each 2-D offset on a token grid,
plus BEiT's class-token rows), against timm code we did not write: its index against BEiT's
`gen_relative_position_index` and Swin's `get_relative_position_index`, its bias against BEiT's
`RelativePositionBias`, global attention with the part against BEiT's `Attention` (with a class
token, q/v biases) and against Swin's `WindowAttention` over a window as large as the grid
(without one). Also: it stays one fused SDPA, exports with a dynamic batch, keeps timm's names
(the index not saved), costs what the built module holds and FlopCounterMode counts, and every
misuse is an error located at `scores` with a hint."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.modules.attention.scores.relative_table import RelativeTable, grid_offset_index
from archspec.core.errors import SpecError

beit = pytest.importorskip("timm.models.beit")
swin = pytest.importorskip("timm.models.swin_transformer")

DIM, HEADS = 32, 4
GRIDS = [(3, 4), (4, 4), (2, 5)]


def spec(grid: tuple[int, int], attention: str, class_token: bool = True) -> str:
    """One attention node over tokens on a grid, after a learned class token when asked."""
    h, w = grid
    cls = "  - {id: cls, from: x, tokens: {count: 1}}\n" if class_token else ""
    return (f"name: t\ninputs:\n  x: {{shape: [B, {h * w}, {DIM}], grid: [{h}, {w}]}}\ngraph:\n{cls}"
            f"  - {{id: attn, attention: {attention}}}\noutputs: [attn]\n")


BEIT_ATTN = f"{{kind: global, heads: {HEADS}, qkv_bias: qv, norm: none, residual: false, scores: [relative_table]}}"
GRID_ATTN = (f"{{kind: global, heads: {HEADS}, norm: none, residual: false, "
             "scores: [{relative_table: {class_tokens: false}}]}")


def perturbed(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Noise on every parameter (the tables and q/v biases start at zeros)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return module.eval()


def ours_from(ref_state: dict, extra: dict | None = None) -> dict:
    """timm's Attention names -> the attention node's (`attn.`, the table in its part)."""
    out = dict(extra or {})
    for k, v in ref_state.items():
        if k != "relative_position_index":
            out["attn." + k.replace("relative_position_bias_table", "relative_table.relative_position_bias_table")] = v
    return out


def counted(model, *args) -> int:
    """FlopCounterMode's count, with SDPA as its math kernel (matmuls it counts on CPU)."""
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(*args)
    return counter.get_total_flops()


# -- the index and the bias == timm's ----------------------------------------------------------

@pytest.mark.parametrize("grid", GRIDS + [(14, 14)], ids=str)
def test_the_index_equals_beits_and_swins(grid):
    assert torch.equal(grid_offset_index(*grid, class_tokens=True), beit.gen_relative_position_index(grid))
    assert torch.equal(grid_offset_index(*grid, class_tokens=False), swin.get_relative_position_index(*grid))


@pytest.mark.parametrize("grid", GRIDS, ids=str)
def test_the_bias_equals_beits_relative_position_bias(grid):
    ref = perturbed(beit.RelativePositionBias(grid, HEADS))
    ours = RelativeTable(grid, HEADS)
    ours.load_state_dict(ref.state_dict())
    with torch.no_grad():
        bias = ours.bias(None, None)
    assert bias.shape == (1, HEADS, grid[0] * grid[1] + 1, grid[0] * grid[1] + 1)
    assert torch.equal(bias[0], ref())


# -- attention with the part == timm's BEiT and Swin attention ------------------------------------

@pytest.mark.parametrize("fused", [True, False], ids=["timm-fused", "timm-explicit"])
@pytest.mark.parametrize("grid", GRIDS, ids=str)
def test_global_attention_with_the_part_equals_beits_attention(grid, fused):
    ref = perturbed(beit.Attention(DIM, HEADS, qkv_bias=True, window_size=grid))
    ref.fused_attn = fused
    model = perturbed(archspec.build_text(spec(grid, BEIT_ATTN)), seed=1)
    model.load_state_dict(ours_from(ref.state_dict(), {"cls.tokens": model.cls.tokens.detach()}), strict=True)
    x = torch.randn(2, grid[0] * grid[1], DIM)
    with torch.no_grad():
        expected = ref(torch.cat((model.cls.tokens.expand(2, -1, -1), x), dim=1))  # the class token in front
        assert torch.allclose(model(x), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("grid", GRIDS, ids=str)
def test_without_class_tokens_it_is_swins_table_over_the_whole_grid(grid):
    ref = perturbed(swin.WindowAttention(DIM, HEADS, window_size=grid, qkv_bias=True))
    model = archspec.build_text(spec(grid, GRID_ATTN, class_token=False)).eval()
    model.load_state_dict(ours_from(ref.state_dict()), strict=True)
    x = torch.randn(2, grid[0] * grid[1], DIM)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(x), atol=1e-5, rtol=0)


def test_it_stays_one_fused_attention_and_exports_with_a_dynamic_batch():
    text = spec((3, 4), BEIT_ATTN)
    report = archspec.check_text(text)
    model = perturbed(archspec.build_text(text))
    assert not model.attn.mixes_scores()  # a bias: SDPA with it as attn_mask, not written out
    program = export_program(model, report.graph)
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert any("scaled_dot_product_attention" in op for op in ops) and not any("softmax" in op for op in ops), ops
    x = torch.randn(5, 12, DIM)
    with torch.no_grad():
        assert torch.allclose(program.module()(x), model(x), atol=1e-5, rtol=0)


def test_timms_names_and_no_saved_index():
    model = archspec.build_text(spec((3, 4), BEIT_ATTN))
    state = model.state_dict()
    assert state["attn.relative_table.relative_position_bias_table"].shape == ((2 * 3 - 1) * (2 * 4 - 1) + 3, HEADS)
    assert not any("relative_position_index" in k for k in state)  # rebuilt from the grid, as timm's
    assert model.attn.relative_table.relative_position_index.shape == (13, 13)


# -- costs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("attention, class_token", [(BEIT_ATTN, True), (GRID_ATTN, False)], ids=["beit", "grid"])
def test_params_and_flops_equal_the_built_module(attention, class_token):
    """The table's rows x heads; no FLOPs of its own (a lookup), so the node costs what the same
    attention without the part costs plus the table."""
    grid = (3, 4)
    text = spec(grid, attention, class_token)
    report, model = archspec.check_text(text), archspec.build_text(text).eval()
    assert report.params == sum(p.numel() for p in model.parameters())
    assert report.flops == counted(model, torch.randn(1, grid[0] * grid[1], DIM))
    plain = archspec.check_text(text.replace(", scores: [relative_table]", "").replace(
        ", scores: [{relative_table: {class_tokens: false}}]", ""))
    rows = (2 * grid[0] - 1) * (2 * grid[1] - 1) + (3 if class_token else 0)
    assert report.params - plain.params == rows * HEADS
    assert report.flops == plain.flops


# -- located errors ----------------------------------------------------------------------------

SEQUENCE = (f"name: t\ninputs:\n  x: [B, 10, {DIM}]\ngraph:\n"
            f"  - {{id: attn, from: x, attention: {BEIT_ATTN}}}\n")
TWO_TOKENS = (f"name: t\ninputs:\n  image: [B, 3, 32, 32]\ngraph:\n"
              f"  - {{patchify: {{patch: 8, dim: {DIM}, cls_token: 2}}}}\n  - {{id: attn, attention: {BEIT_ATTN}}}\n")
CROSS = (f"name: t\ninputs:\n  x: {{shape: [B, 12, {DIM}], grid: [3, 4]}}\n  m: [B, 5, {DIM}]\ngraph:\n"
         f"  - {{id: cls, from: x, tokens: {{count: 1}}}}\n"
         f"  - {{id: attn, from: [cls, m], attention: {BEIT_ATTN.replace('global', 'cross')}}}\n")


@pytest.mark.parametrize("text, message, hint", [
    (SEQUENCE, "a relative position table needs tokens on a grid", "grid"),
    (spec((3, 4), BEIT_ATTN, class_token=False), "needs one class token and the 3x4 grid (13 tokens), got 12",
     "class_tokens: false"),
    (spec((3, 4), GRID_ATTN), "needs exactly the 3x4 grid (12 tokens), got 13", "class_tokens: true"),
    (TWO_TOKENS, "needs one class token and the 4x4 grid (17 tokens), got 18", "there are 2"),
    (CROSS, "needs the keys on the queries' 3x4 grid, but there are 5 keys for 13 queries", "self-attention"),
    (spec((3, 4), BEIT_ATTN.replace("[relative_table]", "[{relative_table: {size: 3}}]")),
     "score part 'relative_table' has no option 'size'", None),
], ids=["no-grid", "no-class-token", "unexpected-class-token", "two-class-tokens", "cross", "unknown-option"])
def test_bad_uses_are_located_errors(text, message, hint):
    with pytest.raises(SpecError) as e:
        archspec.check_text(text)
    diagnostic = e.value.diagnostics[0]
    assert message in diagnostic.message, diagnostic.message
    assert diagnostic.path == "attn"
    if hint is not None:
        assert hint in diagnostic.hint, diagnostic.hint
    line = text.splitlines()[diagnostic.loc.line - 1]
    at = line[diagnostic.loc.col - 1:]  # at `scores:`, at the part's entry, or at the part's option it is about
    assert line[:diagnostic.loc.col - 1].rstrip().endswith("scores:") or at.startswith(("relative_table", "size")), \
        (line, diagnostic.loc.col)
