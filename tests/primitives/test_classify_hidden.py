"""head classify's `hidden`: a hidden layer (a linear and tanh) between the pooled, normed tokens and
the classes, timm's NormMlpClassifierHead with hidden_size (MaxViT's tf heads; the MaxViT trial
wrote it as three nodes after a features head). Against timm's head on the same weights, its
parameter count and state dict names, the checker's count, and a located error for hidden_act alone."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

timm = pytest.importorskip("timm")

SPEC = """
name: t
inputs: {x: {shape: [B, 16, 32], grid: [4, 4]}}
graph:
  - {id: head, head: {kind: classify, classes: 10, pool: mean, norm: true, norm_eps: 1.0e-5, hidden: 24 HIDDEN_ACT}}
"""


def test_the_hidden_layer_is_timms_norm_mlp_classifier_head():
    from timm.layers import NormMlpClassifierHead

    theirs = NormMlpClassifierHead(32, 10, hidden_size=24, pool_type="avg", norm_layer="layernorm2d",
                                   act_layer="tanh").eval()
    theirs.norm.eps = 1e-5
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
    model = archspec.build_text(SPEC.replace(" HIDDEN_ACT", "")).eval()
    assert {f"head.{k}" for k in theirs.state_dict()} == set(model.state_dict())
    model.load_state_dict({f"head.{k}": v for k, v in theirs.state_dict().items()})
    count = sum(p.numel() for p in theirs.parameters())
    assert sum(p.numel() for p in model.parameters()) == count == archspec.check_text(SPEC.replace(" HIDDEN_ACT", "")).params
    x = torch.randn(2, 16, 32)
    image = x.transpose(1, 2).reshape(2, 32, 4, 4)  # [B, N, C] -> [B, C, H, W]
    with torch.no_grad():
        assert (model(x) - theirs(image)).abs().max() < 1e-5
        other = archspec.build_text(SPEC.replace(" HIDDEN_ACT", ", hidden_act: gelu")).eval()
        other.load_state_dict(model.state_dict())
        assert (other(x) - theirs(image)).abs().max() > 1e-3  # the activation is read


def test_hidden_act_without_hidden_is_a_located_error():
    with pytest.raises(SpecError) as error:
        archspec.check_text(SPEC.replace(", hidden: 24 HIDDEN_ACT", ", hidden_act: tanh"))
    assert error.value.message == "hidden_act goes with hidden" and error.value.loc.line == 5


def test_the_checker_counts_a_hidden_layer_after_an_attention_pool():
    text = SPEC.replace("pool: mean", "pool: map, pool_heads: 2").replace(" HIDDEN_ACT", "")
    model = archspec.build_text(text)
    assert archspec.check_text(text).params == sum(p.numel() for p in model.parameters())
