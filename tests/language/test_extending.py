"""A kind and a primitive added the way the README says: each is a rule file under
archspec/primitives/ops/ and a torch file under compiler/modules/, found by discovery, with
no list or switch edited anywhere. Checked against their definitions written out here."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import archspec

SEQUENCE = """
name: a
inputs:
  x: [B, 7, 16]
graph:
  - id: attn
    attention: {kind: alibi, heads: HEADS, qkv_bias: false, norm: none}
"""


@pytest.mark.parametrize("heads", [4, 2, 8, 1])
def test_alibi_attention_is_the_papers(heads):
    model = archspec.build_text(SEQUENCE.replace("HEADS", str(heads))).eval()
    attn = model.attn
    x = torch.randn(2, 7, 16)
    d = 16 // heads
    q, k, v = (x @ attn.qkv.weight.t()).split(16, dim=-1)
    q, k, v = (t.reshape(2, 7, heads, d).transpose(1, 2) for t in (q, k, v))
    slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)])  # Press et al., n a power of 2
    i, j = torch.arange(7)[:, None], torch.arange(7)[None, :]
    scores = q @ k.transpose(-1, -2) / math.sqrt(d) - slopes[:, None, None] * (i - j)
    scores = scores.masked_fill(j > i, float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 7, 16) @ attn.proj.weight.t() + attn.proj.bias
    with torch.no_grad():
        assert torch.allclose(model(x), x + out, atol=1e-5)


def test_alibi_slopes_for_a_head_count_not_a_power_of_two():
    from archspec.compiler.modules.attention.alibi import alibi_slopes

    # the paper: the 4 slopes of 4 heads, then the 1st and 3rd of 8 heads' (2^-1, 2^-2, 2^-3, ...)
    expected = [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]
    assert alibi_slopes(6) == pytest.approx(expected)


def test_alibi_refuses_rotary_embeddings_too():
    with pytest.raises(archspec.SpecError, match="ALiBi's biases take the place of rotary embeddings"):
        archspec.check_text(SEQUENCE.replace("HEADS", "2").replace("norm: none}", "norm: none, rope_theta: 10000}"))


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_upsample_is_torchs_interpolation(mode):
    report = archspec.check_text(f"""
name: u
inputs:
  image: [B, 3, 8, 8]
graph:
  - upsample: {{factor: 4, mode: {mode}}}
""")
    assert report.outputs["output"].shape[1:] == (3, 32, 32)
    model = archspec.build_text(f"""
name: u
inputs:
  image: [B, 3, 8, 8]
graph:
  - upsample: {{factor: 4, mode: {mode}}}
""")
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(model(x), F.interpolate(x, scale_factor=4, mode=mode))


@pytest.mark.parametrize("mode, size", [("nearest", 6), ("bilinear", [12, 10]), ("bicubic", 7)])
def test_resize_is_torchs_interpolation_to_a_size(mode, size):
    text = f"""
name: r
inputs:
  image: [B, 3, 8, 8]
graph:
  - resize: {{size: {size}, mode: {mode}}}
"""
    hw = (size, size) if isinstance(size, int) else tuple(size)
    assert archspec.check_text(text).outputs["output"].shape[1:] == (3, *hw)
    model = archspec.build_text(text)
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(model(x), F.interpolate(x, size=hw, mode=mode))


def test_resize_with_aligned_corners_and_its_refusals():
    model = archspec.build_text("name: r\ninputs:\n  image: [B, 3, 8, 8]\ngraph:\n"
                                "  - resize: {size: 5, mode: bicubic, align_corners: true}\n")
    x = torch.randn(1, 3, 8, 8)
    assert torch.equal(model(x), F.interpolate(x, size=(5, 5), mode="bicubic", align_corners=True))
    with pytest.raises(archspec.SpecError, match="align_corners goes with mode: bilinear or bicubic"):
        archspec.check_text("name: r\ninputs:\n  image: [B, 3, 8, 8]\ngraph:\n"
                            "  - resize: {size: 5, mode: nearest, align_corners: true}\n")
    with pytest.raises(archspec.SpecError, match="resize reads an image, got a token sequence"):
        archspec.check_text("name: r\ninputs:\n  x: [B, 4, 8]\ngraph:\n  - resize: {size: 2}\n")


def test_upsample_reads_an_image():
    with pytest.raises(archspec.SpecError, match="upsample reads an image, got a token sequence"):
        archspec.check_text("name: u\ninputs:\n  x: [B, 4, 8]\ngraph:\n  - upsample: {factor: 2}\n")


def test_pool_is_torchs_pooling_over_an_image_or_a_token_grid():
    model = archspec.build_text("""
name: p
inputs:
  image: [B, 3, 16, 16]
graph:
  - {id: avg, pool: {fn: mean, kernel: 2}}
  - {id: grid, to_tokens: {}}
  - {id: biggest, pool: {fn: max, kernel: 3, stride: 2, padding: 1}}
  - {id: smooth, pool: {fn: mean, kernel: 3, stride: 1, padding: 1, count_include_pad: false}}
outputs: [avg, smooth]
""")
    x = torch.randn(2, 3, 16, 16)
    avg, smooth = model(x)
    expected_avg = F.avg_pool2d(x, 2)  # [2, 3, 8, 8]
    assert torch.equal(avg, expected_avg)
    biggest = F.max_pool2d(expected_avg, 3, 2, 1)  # [2, 3, 4, 4]
    expected = F.avg_pool2d(biggest, 3, 1, 1, count_include_pad=False).flatten(2).transpose(1, 2)
    assert torch.equal(smooth, expected)


def test_pool_refusals():
    def check(params):
        archspec.check_text("name: p\ninputs:\n  image: [B, 3, 8, 8]\ngraph:\n  - pool: " + params + "\n")

    with pytest.raises(archspec.SpecError, match="padding 2 is more than half the kernel 3"):
        check("{fn: max, kernel: 3, padding: 2}")
    with pytest.raises(archspec.SpecError, match="count_include_pad goes with fn: mean"):
        check("{fn: max, kernel: 2, count_include_pad: false}")
    with pytest.raises(archspec.SpecError, match="kernel 9 is larger than the 8x8 input padded to 8"):
        check("{fn: mean, kernel: 9}")


def test_embed_pos_offset_is_barts_learned_positions():
    from transformers.models.bart.modeling_bart import BartLearnedPositionalEmbedding

    text = "name: e\ninputs:\n  ids: {shape: [B, 7], dtype: int64}\ngraph:\n" \
           "  - embed: {vocab: 50, dim: 16, max_len: 12, pos_offset: 2}\n"
    report, model = archspec.check_text(text), archspec.build_text(text)
    assert report.params == 50 * 16 + (12 + 2) * 16 and model.embed.pos.weight.shape == (14, 16)
    ref = BartLearnedPositionalEmbedding(12, 16)  # HF: 12 + 2 rows, position p reads row p + 2
    ref.weight.data.copy_(model.embed.pos.weight.data)
    ids = torch.randint(0, 50, (3, 7))
    assert torch.equal(model(ids), model.embed.tokens(ids) + ref(ids))
    with pytest.raises(archspec.SpecError, match="pos_offset moves a learned position table; these positions are sincos"):
        archspec.check_text(text.replace("pos_offset: 2", "pos_offset: 2, pos: sincos"))
