"""reduce's `as`: a reduced tensor read as tokens or an image, as rearrange's `as` does. The
Nystromformer trial's segment-mean landmarks (a mean over each segment of the sequence, [B, m, C])
needed an identity rearrange per landmark to become tokens that attention reads; with
`as: tokens` the reduce gives them, and global attention over them is torch's SDPA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import archspec

LANDMARKS = """
name: landmarks
inputs: {x: [B, 16, 32]}
graph:
  - {id: segments, rearrange: {pattern: "b (m k) c -> b m k c", sizes: {m: 4}}}
  - {id: means, reduce: {fn: mean, axes: [2], as: tokens}}
  - {id: attn, from: [means, x, x], attention: {kind: global, heads: 4, projections: external}}
"""


def test_segment_means_as_tokens_are_attention_queries():
    report = archspec.check_text(LANDMARKS)
    assert report.graph.type_of("means").layout == "tokens" and report.graph.type_of("attn").shape[1] == 4
    model = archspec.build_text(LANDMARKS).eval()
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(0))
    heads = lambda t: t.reshape(2, -1, 4, 8).transpose(1, 2)  # noqa: E731 - [B, N, 32] -> [B, 4, N, 8]
    means = x.reshape(2, 4, 4, 32).mean(2)  # [B, 4, 32]: Nystromformer's landmarks
    want = F.scaled_dot_product_attention(heads(means), heads(x), heads(x)).transpose(1, 2).reshape(2, 4, 32)
    with torch.no_grad():
        assert torch.allclose(model(x), want, atol=1e-6)


def test_as_a_layout_of_another_rank_is_a_located_error():
    with pytest.raises(archspec.SpecError, match="`as: image` needs a rank-4 result"):
        archspec.check_text(LANDMARKS.replace("as: tokens", "as: image"))
    without = LANDMARKS.replace(", as: tokens", "")
    with pytest.raises(archspec.SpecError, match="tokens"):  # a rank-3 tensor is no tokens by itself
        archspec.check_text(without)
