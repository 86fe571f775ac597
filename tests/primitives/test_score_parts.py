"""Attention from parts: score parts (`scores:`), the head size, the scale and an additive score
bias input of the sequence kinds, against references we did not write (timm's TalkingHeadAttn,
torch's own SDPA over hand-made tensors), with their costs against FlopCounterMode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import export_program
from archspec.core.errors import SpecError

DIM, HEADS, TOKENS = 32, 4, 10


def spec(attention: str, inputs: str = "", extra: str = "") -> str:
    return (f"name: t\ninputs:\n  x: [B, {TOKENS}, {DIM}]\n{inputs}graph:\n{extra}"
            f"  - {{id: attn, from: x, attention: {attention}}}\noutputs: [attn]\n")


def perturbed(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return module.eval()


def flops_match(text: str, *args) -> None:
    report = archspec.check_text(text)
    model = archspec.build_text(text).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(*args)
    assert report.flops == counter.get_total_flops()
    assert report.params == sum(p.numel() for p in model.parameters())


# -- talking heads as a part == timm ----------------------------------------------------------

TALKING = spec(f"{{kind: global, heads: {HEADS}, norm: none, residual: false, scores: [talking_heads]}}")


def test_talking_heads_part_equals_timm():
    cait = pytest.importorskip("timm.models.cait")
    ref = perturbed(cait.TalkingHeadAttn(DIM, HEADS, qkv_bias=True))
    model = archspec.build_text(TALKING).eval()
    weights = {f"attn.{k}".replace("proj_l", "talking_heads.proj_l").replace("proj_w", "talking_heads.proj_w"): v
               for k, v in ref.state_dict().items()}
    model.load_state_dict(weights, strict=True)
    x = torch.randn(3, TOKENS, DIM)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(x), atol=1e-5, rtol=0)
    assert archspec.check_text(TALKING).params == sum(p.numel() for p in ref.parameters())
    flops_match(TALKING, torch.randn(1, TOKENS, DIM))


def test_talking_heads_exports_with_a_dynamic_batch():
    report = archspec.check_text(TALKING)
    model = perturbed(archspec.build_text(TALKING))
    program = export_program(model, report.graph)
    x = torch.randn(5, TOKENS, DIM)
    with torch.no_grad():
        assert torch.allclose(program.module()(x), model(x), atol=1e-5, rtol=0)


# -- softcap, scale, head size: against SDPA written by hand ---------------------------------

def by_hand(model, x, scale=None, cap=None, causal=False, bias=None):
    """The attention of `model.attn` computed from its weights with plain torch."""
    attn = model.attn
    B, N, _ = x.shape
    inner = attn.heads * attn.head_dim
    q, k, v = F.linear(x, attn.qkv.weight, attn.qkv.bias).split((inner, inner, inner), dim=-1)
    q, k, v = (t.reshape(B, N, attn.heads, attn.head_dim).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) * (attn.head_dim ** -0.5 if scale is None else scale)
    if bias is not None:
        scores = scores + bias
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    if causal:
        scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, N, inner)
    return F.linear(out, attn.proj.weight, attn.proj.bias)


@pytest.mark.parametrize("kind", ["global", "causal"])
def test_softcap_scale_and_head_dim(kind):
    text = spec(f"{{kind: {kind}, heads: {HEADS}, head_dim: 16, scale: 0.3, norm: none, residual: false, "
                f"scores: [{{softcap: {{cap: 2.0}}}}]}}")
    model = perturbed(archspec.build_text(text))
    assert model.attn.qkv.weight.shape == (3 * HEADS * 16, DIM) and model.attn.proj.weight.shape == (DIM, HEADS * 16)
    x = torch.randn(2, TOKENS, DIM)
    with torch.no_grad():
        assert torch.allclose(model(x), by_hand(model, x, scale=0.3, cap=2.0, causal=kind == "causal"), atol=1e-5)
    flops_match(text, torch.randn(1, TOKENS, DIM))


def test_scale_alone_stays_fused_and_matches():
    text = spec(f"{{kind: global, heads: {HEADS}, scale: 1.0, norm: none, residual: false}}")
    model = perturbed(archspec.build_text(text))
    assert not model.attn.mixes_scores()
    x = torch.randn(2, TOKENS, DIM)
    with torch.no_grad():
        assert torch.allclose(model(x), by_hand(model, x, scale=1.0), atol=1e-5)


# -- an additive score bias input ----------------------------------------------------------------

def test_a_score_bias_input_is_added_to_the_scores():
    text = spec(f"{{kind: causal, heads: {HEADS}, bias: true, norm: none, residual: false}}",
                extra=f"  - {{id: table, param: {{shape: [{HEADS}, {TOKENS}, {TOKENS}]}}}}\n").replace(
        "from: x, attention", "from: [x, table], attention")
    model = perturbed(archspec.build_text(text))
    x = torch.randn(2, TOKENS, DIM)
    with torch.no_grad():
        bias = model.table.value
        assert torch.allclose(model(x), by_hand(model, x, causal=True, bias=bias), atol=1e-5)


@pytest.mark.parametrize("attention, message", [
    ("{kind: global, heads: 4, scores: [nonsense]}", "unknown score part 'nonsense'"),
    ("{kind: global, heads: 4, scores: [{softcap: {cap: -1}}]}", "score part 'softcap': cap"),
    ("{kind: global, heads: 4, scores: [[1, 2]]}", "scores entry 1 must be a part name"),
    ("{kind: global, heads: 4, bias: true}", "reads"),
])
def test_bad_parts_are_located_errors(attention, message):
    with pytest.raises(SpecError) as e:
        archspec.check_text(spec(attention))
    assert message in str(e.value)


def test_a_bias_of_the_wrong_shape_is_refused():
    text = spec(f"{{kind: global, heads: {HEADS}, bias: true}}",
                extra=f"  - {{id: table, param: {{shape: [3, {TOKENS}, {TOKENS}]}}}}\n").replace(
        "from: x, attention", "from: [x, table], attention")
    with pytest.raises(SpecError, match="does not fit scores"):
        archspec.check_text(text)
