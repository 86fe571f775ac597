"""The head-merge order (`merge_heads: dim_major`: the heads' outputs concatenated as (head_dim,
heads), NesT's `permute(0, 2, 3, 4, 1)`) on window and global attention, against timm's NesT
Attention over blockified tokens with perturbed weights; the default (head_major) is timm's
ViT/Swin order and gives a different result with the same weights; the option is refused on a
kind that does not take it."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

nest = pytest.importorskip("timm.models.nest")

DIM, HEADS, GRID = 32, 4, 8


def spec(attention: str) -> str:
    return (f"name: nest_attention\ninputs:\n  x: {{shape: [B, {GRID * GRID}, {DIM}], grid: [{GRID}, {GRID}]}}\n"
            f"graph:\n  - {{id: attn, from: x, attention: {{{attention}, heads: {HEADS}, norm: none, "
            f"residual: false}}}}\noutputs: [attn]\n")


WINDOW = spec("kind: window, window: 4, bias: none, merge_heads: dim_major")
GLOBAL = spec("kind: global, merge_heads: dim_major")


def reference():
    torch.manual_seed(0)
    ref = nest.Attention(DIM, HEADS, qkv_bias=True).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return ref


def built(text: str, ref):
    model = archspec.build_text(text).eval()
    model.load_state_dict({f"attn.{k}": v for k, v in ref.state_dict().items()}, strict=True)
    return model


def run_reference(ref, x, block: int):
    """NesT's layer: blockify the grid into blocks of `block` x `block`, attention, deblockify."""
    B = x.shape[0]
    with torch.no_grad():
        out = nest.deblockify(ref(nest.blockify(x.view(B, GRID, GRID, DIM), block)), block)
    return out.reshape(B, GRID * GRID, DIM)


@pytest.mark.parametrize("text, block", [(WINDOW, 4), (GLOBAL, GRID)], ids=["window", "global"])
def test_dim_major_equals_nest_attention(text, block):
    ref = reference()
    x = torch.randn(2, GRID * GRID, DIM)
    expected = run_reference(ref, x, block)
    with torch.no_grad():
        ours = built(text, ref)(x)
        usual = built(text.replace(", merge_heads: dim_major", ""), ref)(x)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=1e-5), (ours - expected).abs().max()
    assert not torch.allclose(usual, expected, atol=1e-3)  # head_major (the default) is another network
    assert archspec.check_text(text).params == sum(p.numel() for p in ref.parameters())


def test_a_kind_without_the_option_refuses_it():
    with pytest.raises(SpecError, match="merge_heads"):
        archspec.check_text(spec("kind: causal, over_grid: true, merge_heads: dim_major"))
