"""Attention between channels: `kind: xca` (XCiT's cross-covariance attention, timm's XCA) and
`kind: channel` (DaViT's channel group attention, timm's ChannelAttention), each one fused
attention kernel over the heads transposed.

Against timm's modules with the same weights (every parameter perturbed by seeded noise):
outputs (timm's XCA both ways: its default path and its fused one), gradients, parameter counts
and FLOPs against torch's FlopCounterMode; the two kinds differ from each other and from global
attention over the same weights, so the comparison can fail; the temperature is weight-decayed as
timm's optimizer decays it (the XCiT new-words trial caught a first version that left it out);
generate refuses them in words.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import count_flops, perturb_everything

timm = pytest.importorskip("timm")
from timm.models.davit import ChannelAttention  # noqa: E402
from timm.models.xcit import XCA  # noqa: E402

WIDTH, HEADS, TOKENS = 48, 4, 10

SPEC = """\
archspec: 1
name: channel_attention
inputs:
  x: [B, TOKENS, WIDTH]
graph:
  - id: attn
    attention: {kind: KIND, heads: HEADS, norm: none, residual: false}
"""


def build(kind: str):
    text = SPEC.replace("TOKENS", str(TOKENS)).replace("WIDTH", str(WIDTH)).replace("HEADS", str(HEADS))
    return archspec.build_text(text.replace("KIND", kind)).eval()


def reference(kind: str):
    torch.manual_seed(0)
    ref = XCA(WIDTH, HEADS, qkv_bias=True) if kind == "xca" else ChannelAttention(WIDTH, HEADS, qkv_bias=True)
    perturb_everything(ref, seed=1, scale=0.3)
    return ref.eval()


def loaded(kind: str, ref):
    ours = build(kind)
    ours.attn.load_state_dict(ref.state_dict())  # the same names: qkv, proj (and temperature)
    return ours


def tokens(batch: int = 2):
    return torch.randn(batch, TOKENS, WIDTH, generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("kind", ["xca", "channel"])
def test_outputs_and_gradients_as_timm(kind):
    ref = reference(kind)
    ours = loaded(kind, ref)
    x = tokens()
    theirs, mine = ref(x), ours(x)
    assert (theirs - mine).abs().max() < 1e-5
    theirs.square().sum().backward()
    mine.square().sum().backward()
    for name, p in ref.named_parameters():
        gap = (p.grad - ours.attn.get_parameter(name).grad).abs().max()
        assert gap < 1e-5 * p.grad.abs().max(), (name, gap)


def test_xca_matches_both_of_timms_paths():
    """timm's XCA multiplies the products by the temperature (default) or q before SDPA (fused)."""
    ref = reference("xca")
    ours = loaded("xca", ref)
    x = tokens()
    with torch.no_grad():
        mine = ours(x)
        ref.fused_attn = False
        unfused = ref(x)
        ref.fused_attn = True
        fused = ref(x)
    assert (unfused - mine).abs().max() < 1e-5 and (fused - mine).abs().max() < 1e-5


@pytest.mark.parametrize("kind", ["xca", "channel"])
def test_parameter_count_and_flops_as_timm(kind):
    ref = reference(kind)
    report = archspec.check_text(SPEC.replace("TOKENS", str(TOKENS)).replace("WIDTH", str(WIDTH))
                                 .replace("HEADS", str(HEADS)).replace("KIND", kind))
    assert report.params == sum(p.numel() for p in ref.parameters()) == sum(p.numel() for p in build(kind).parameters())
    with torch.no_grad():
        measured = count_flops(lambda: ref(tokens(1)))
    assert report.flops == measured, (report.flops, measured)


def test_the_kinds_differ_so_the_comparison_can_fail():
    """XCiT's and DaViT's products, and global attention between the tokens, over one set of weights."""
    ref = reference("channel")
    x = tokens()
    with torch.no_grad():
        outs = {kind: loaded(kind, ref)(x) for kind in ("channel", "global")}
        xca = build("xca")
        xca.attn.load_state_dict({**ref.state_dict(), "temperature": torch.ones(HEADS, 1, 1)})
        outs["xca"] = xca(x)
    assert (outs["channel"] - ref(x)).abs().max() < 1e-5
    for kind in ("global", "xca"):
        assert (outs[kind] - outs["channel"]).abs().max() > 0.05, kind


def test_temperature_is_weight_decayed_as_timms_optimizer_decays_it():
    """XCA.no_weight_decay() names the temperature, but timm's Xcit lists only pos_embed and
    cls_token, and create_optimizer_v2 reads the model's list: a [h, 1, 1] temperature decays."""
    from timm.optim import create_optimizer_v2

    model = build("xca")
    assert "attn.temperature" not in model.no_weight_decay()
    ref = timm.create_model("xcit_nano_12_p16_224", depth=1, pretrained=False)
    names = {id(p): n for n, p in ref.named_parameters()}
    decayed = {names[id(p)] for group in create_optimizer_v2(ref, "adamw", weight_decay=0.05).param_groups
               if group["weight_decay"] > 0 for p in group["params"]}
    assert "blocks.0.attn.temperature" in decayed


def test_generate_runs_them_without_a_cache_saying_why(caplog):
    """Their weights sum over every token, so no cache holds them: generate runs the whole
    sequence through forward at each step (as forward gives it), and says why."""
    text = """\
archspec: 1
name: lm
dims: {L: [1, 16]}
inputs:
  ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 50, dim: 32, max_len: 16}}
  - {id: attn, attention: {kind: xca, heads: 4}}
  - {id: head, head: {kind: lm, vocab: 50}}
"""
    model = archspec.build_text(text, seed=0).eval()
    ids = torch.tensor([[1, 2, 3]])
    with caplog.at_level("WARNING", logger="archspec"):
        got = model.generate(ids, max_new_tokens=2)
    assert any("decodes without a cache ('attn'" in r.getMessage() and "sums over every token" in r.getMessage()
               for r in caplog.records)
    with torch.no_grad():
        first = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
        expected = torch.cat([first, model(first)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(got, expected)
    with pytest.raises(ValueError, match="pad_token_id 2 occurs in input_ids, which Hugging Face's rule reads as "
                                         "padding, and lm decodes without a cache"):
        model.generate(ids, max_new_tokens=2, pad_token_id=2)  # the HunYuan trial: told its prompts were padded
    assert torch.equal(model.generate(ids, max_new_tokens=2, pad_token_id=2, attention_mask=torch.ones_like(ids)), got)
