"""Padded windows with the norm after the padding (`pad: before_norm`, TinyViT: its norm sits
inside its attention, so the padded tokens are normed too, and attended to as the norm's bias)
against timm's TinyVitBlock's attention half (pad, window partition, Attention with its norm,
reverse, crop, residual) with perturbed weights on grids the window does not divide; `pad: true`
(SAM's order) gives a different result with the same weights; the located error without a
pre-norm. The TinyViT attention's offset table is zeroed here (bias: none); the score part
`offset_table` and its test (test_window_score_bias.py) cover it."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

tiny_vit = pytest.importorskip("timm.models.tiny_vit")

DIM, HEADS, WINDOW = 32, 4, 4


def spec(grid: tuple[int, int], pad: str = "before_norm", extra: str = "") -> str:
    h, w = grid
    return (f"name: tinyvit_attention\ninputs:\n  x: {{shape: [B, {h * w}, {DIM}], grid: [{h}, {w}]}}\ngraph:\n"
            f"  - {{id: attn, from: x, attention: {{kind: window, window: {WINDOW}, heads: {HEADS}, pad: {pad}, "
            f"bias: none{extra}}}}}\noutputs: [attn]\n")


def reference():
    """A TinyVitBlock whose local conv and MLP are taken out: its forward is then the attention
    half, x + attn(x) over padded windows (the attention's norm inside)."""
    torch.manual_seed(0)
    block = tiny_vit.TinyVitBlock(DIM, HEADS, window_size=WINDOW).eval()
    with torch.no_grad():
        for p in block.attn.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        block.attn.attention_biases.zero_()  # bias: none here
    block.local_conv = torch.nn.Identity()
    block.mlp = ZeroBranch()
    return block


class ZeroBranch(torch.nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)


def tinyvit_qkv(weight):
    """TinyViT's qkv rows [heads x (q, k, v) x d] -> ours [(q, k, v) x heads x d]."""
    d = DIM // HEADS
    return weight.reshape(HEADS, 3, d, *weight.shape[1:]).transpose(0, 1).reshape(weight.shape)


def weights_of(block) -> dict:
    attn = block.attn
    return {"attn.norm.weight": attn.norm.weight, "attn.norm.bias": attn.norm.bias,
            "attn.qkv.weight": tinyvit_qkv(attn.qkv.weight), "attn.qkv.bias": tinyvit_qkv(attn.qkv.bias),
            "attn.proj.weight": attn.proj.weight, "attn.proj.bias": attn.proj.bias}


@pytest.mark.parametrize("grid", [(6, 6), (5, 7), (3, 3), (8, 8)])
def test_before_norm_equals_tinyvits_padded_windows(grid):
    h, w = grid
    block = reference()
    model = archspec.build_text(spec(grid)).eval()
    model.load_state_dict(weights_of(block), strict=True)
    x = torch.randn(2, h * w, DIM)
    with torch.no_grad():
        expected = block(x.view(2, h, w, DIM)).reshape(2, h * w, DIM)
        ours = model(x)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=1e-5), (ours - expected).abs().max()
    table = block.attn.attention_biases.numel()  # the offset table, not in this spec
    assert archspec.check_text(spec(grid)).params == sum(p.numel() for p in block.attn.parameters()) - table
    if (h % WINDOW, w % WINDOW) != (0, 0):  # padding: SAM's order pads zeros after the norm, another network
        after = archspec.build_text(spec(grid, "true")).eval()
        after.load_state_dict(weights_of(block))
        with torch.no_grad():
            assert not torch.allclose(after(x), expected, atol=1e-3)


def test_before_norm_needs_a_pre_norm():
    with pytest.raises(SpecError, match="pad: before_norm pads the tokens before the sub-layer's norm"):
        archspec.check_text(spec((6, 6), extra=", norm: post"))
