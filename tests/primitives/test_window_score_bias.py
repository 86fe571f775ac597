"""Score biases on window attention: the score part `offset_table` (LeViT / TinyViT's
attention_biases, one learned bias per head for each absolute 2-D offset) against timm's TinyViT
Attention over a grid (global attention) and TinyVitBlock's padded windows (window attention with
`pad: before_norm`), with perturbed weights and every bias; and an additive score-bias input
(`score_bias: true`, a tensor [1 or windows, heads or 1, A, A] given in `from:`) against a
hand-written torch window attention. Parameter counts; the located errors (`bias: true` names
`score_bias`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.core.errors import SpecError

tiny_vit = pytest.importorskip("timm.models.tiny_vit")

DIM, HEADS, WINDOW = 32, 4, 4


def perturbed(module, seed: int = 0):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    module.eval()  # (TinyViT's Attention.train returns None)
    return module


def tinyvit_qkv(weight):
    """TinyViT's qkv rows [heads x (q, k, v) x d] -> ours [(q, k, v) x heads x d]."""
    d = DIM // HEADS
    return weight.reshape(HEADS, 3, d, *weight.shape[1:]).transpose(0, 1).reshape(weight.shape)


def weights_of(attn) -> dict:
    return {"attn.norm.weight": attn.norm.weight, "attn.norm.bias": attn.norm.bias,
            "attn.qkv.weight": tinyvit_qkv(attn.qkv.weight), "attn.qkv.bias": tinyvit_qkv(attn.qkv.bias),
            "attn.proj.weight": attn.proj.weight, "attn.proj.bias": attn.proj.bias,
            "attn.offset_table.attention_biases": attn.attention_biases}


def grid_spec(grid, attention: str, residual: bool = False) -> str:
    h, w = grid
    tail = "" if residual else ", residual: false"
    return (f"name: t\ninputs:\n  x: {{shape: [B, {h * w}, {DIM}], grid: [{h}, {w}]}}\ngraph:\n"
            f"  - {{id: attn, from: x, attention: {{{attention}, heads: {HEADS}{tail}}}}}\noutputs: [attn]\n")


@pytest.mark.parametrize("grid", [(4, 4), (3, 5)])
def test_offset_table_equals_tinyvit_attention_over_a_grid(grid):
    h, w = grid
    ref = perturbed(tiny_vit.Attention(DIM, DIM // HEADS, HEADS, attn_ratio=1, resolution=grid))
    text = grid_spec(grid, "kind: global, scores: [offset_table]")
    model = archspec.build_text(text).eval()
    model.load_state_dict(weights_of(ref), strict=True)
    x = torch.randn(2, h * w, DIM)
    with torch.no_grad():
        ours, expected = model(x), ref(x)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=1e-5), (ours - expected).abs().max()
    assert archspec.check_text(text).params == sum(p.numel() for p in ref.parameters())


def test_the_offset_table_is_left_out_of_weight_decay_as_timms():
    """timm's TinyViT (and LeViT, EfficientFormer) list attention_biases in no_weight_decay."""
    model = archspec.build_text(grid_spec((4, 4), "kind: global, scores: [offset_table]"))
    assert "attn.offset_table.attention_biases" in model.no_weight_decay()
    keywords = tiny_vit.TinyVit(num_classes=1).no_weight_decay_keywords()
    assert "attention_biases" in {n.rsplit(".", 1)[-1] for n in keywords}


def test_offset_table_in_tinyvits_padded_windows():
    """The whole TinyViT window attention: pad before the norm, windows, offset table, crop."""
    grid = (6, 5)
    block = tiny_vit.TinyVitBlock(DIM, HEADS, window_size=WINDOW)
    perturbed(block.attn)
    block.local_conv, block.mlp = torch.nn.Identity(), Zero()
    block.eval()
    text = grid_spec(grid, f"kind: window, window: {WINDOW}, pad: before_norm, bias: none, scores: [offset_table]",
                     residual=True)
    model = archspec.build_text(text).eval()
    model.load_state_dict(weights_of(block.attn), strict=True)
    x = torch.randn(2, 30, DIM)
    with torch.no_grad():
        ours, expected = model(x), block(x.view(2, *grid, DIM)).reshape(2, 30, DIM)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=1e-5), (ours - expected).abs().max()
    assert archspec.check_text(text).params == sum(p.numel() for p in block.attn.parameters())


class Zero(torch.nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)


# -- an additive score-bias input -----------------------------------------------------------------

GRID = 8
WINDOWS = (GRID // WINDOW) ** 2


def bias_spec(shape: str) -> str:
    """Window attention reading a score bias: a param `shape` ([1, ...] once its leading 1 is
    added), or an input [B, h, A, A] (per sample) when `shape` is `input`."""
    per_sample = shape == "input"
    given = f"  score_bias: [B, {HEADS}, 16, 16]\n" if per_sample else ""
    node = "" if per_sample else f"  - {{id: score_bias, param: {{shape: {shape}}}}}\n"
    return (f"name: t\ninputs:\n  x: {{shape: [B, {GRID * GRID}, {DIM}], grid: [{GRID}, {GRID}]}}\n{given}graph:\n"
            + node +
            f"  - {{id: attn, from: [x, score_bias], attention: {{kind: window, window: {WINDOW}, heads: {HEADS}, "
            f"score_bias: true}}}}\noutputs: [attn]\n")


def by_hand(model, x, bias):
    """Window attention written out: norm, partition into 4x4 windows, qkv, scores with the
    Swin table and the score bias (per window: bias[i] for window i), softmax, merge, proj,
    reverse, residual."""
    attn = model.attn
    B, A, d = x.shape[0], WINDOW * WINDOW, DIM // HEADS
    h = attn.norm(x).view(B, GRID // WINDOW, WINDOW, GRID // WINDOW, WINDOW, DIM)
    windows = h.permute(0, 1, 3, 2, 4, 5).reshape(B, WINDOWS, A, DIM)  # [B, nW, A, C]
    q, k, v = attn.qkv(windows).view(B, WINDOWS, A, 3, HEADS, d).permute(3, 0, 1, 4, 2, 5)  # [B, nW, h, A, d]
    table = attn.position_bias()  # [h, A, A]
    scores = q @ k.transpose(-2, -1) * d ** -0.5 + table + bias[:, None]  # bias [1 or B, 1 or h, A, A]
    out = (scores.softmax(-1) @ v).transpose(2, 3).reshape(B, WINDOWS, A, DIM)  # [B, nW, A, C]
    out = attn.proj(out).view(B, GRID // WINDOW, GRID // WINDOW, WINDOW, WINDOW, DIM)
    return x + out.permute(0, 1, 3, 2, 4, 5).reshape(B, GRID * GRID, DIM)


@pytest.mark.parametrize("shape", [f"[{HEADS}, 16, 16]", "[1, 16, 16]", "input"])
def test_a_score_bias_input_equals_window_attention_by_hand(shape):
    model = perturbed(archspec.build_text(bias_spec(shape)))
    x = torch.randn(2, GRID * GRID, DIM)
    if shape == "input":
        bias = torch.randn(2, HEADS, 16, 16) * 2
        args = (x, bias)
    else:
        with torch.no_grad():
            model.score_bias.value.mul_(10)  # large enough to matter
        bias, args = model.score_bias.value, (x,)
    with torch.no_grad():
        ours, expected = model(*args), by_hand(model, x, bias)
        without = by_hand(model, x, torch.zeros_like(bias))
    assert torch.allclose(ours, expected, atol=1e-5, rtol=1e-5), (ours - expected).abs().max()
    assert not torch.allclose(ours, without, atol=1e-3)  # the bias is read


@pytest.mark.parametrize("text, words", [
    (grid_spec((4, 4), "kind: window, window: 4, bias: true"), r"an additive score-bias input is `score_bias: true`"),
    (bias_spec("[4, 16, 9]"), r"the score bias must be a float tensor \[B or 1, 4 or 1, 16, 16\]"),
    (grid_spec((4, 4), "kind: global, scores: [offset_table]").replace(", grid: [4, 4]", ""),
     "an offset table needs tokens on a grid"),
])
def test_what_does_not_fit_is_refused(text, words):
    with pytest.raises(SpecError, match=words):
        archspec.check_text(text)
