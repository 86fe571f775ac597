"""norm kind=group: torch's GroupNorm over an image's channels, and over tokens' (their places
the tokens), against nn.GroupNorm with perturbed weights; Moonshine's audio front-end (conv,
tanh, GroupNorm(1), two convs with GELU), which the Moonshine user trial wrote as 7 nodes for
the norm, against Hugging Face's MoonshineEncoder's own modules; counts, FLOPs (none for the
norm), export and ONNX Runtime; a spec that generates refuses it on the target side, in words."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import archspec
from archspec.compiler.backends.export import export_program
from archspec.core.errors import SpecError

from tests.parity.test_vocabulary import perturb_everything

IMAGE = """name: grouped
inputs:
  image: [B, 8, 5, 7]
graph:
  - {id: norm, norm: {kind: group, groups: GROUPS, eps: 1.0e-6}}
outputs: [norm]
"""


@pytest.mark.parametrize("groups", [1, 2, 8])
def test_an_image_is_torchs_group_norm(groups):
    model = perturb_everything(archspec.build_text(IMAGE.replace("GROUPS", str(groups)), seed=0).eval(), seed=3)
    ref = nn.GroupNorm(groups, 8, eps=1e-6)
    ref.load_state_dict({k.removeprefix("norm."): v for k, v in model.state_dict().items()})
    x = torch.randn(2, 8, 5, 7)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(x), atol=1e-6)
    assert archspec.check_text(IMAGE.replace("GROUPS", str(groups))).params == 16


FRONT = """name: moonshine_front
params: {dim: 16, samples: 1000}
inputs:
  audio: [B, "${samples}"]
graph:
  - {id: wave, rearrange: {pattern: "b (n c) -> b n c", sizes: {c: 1}, as: tokens}}
  - {id: conv1, conv: {dim: 1, out: "${dim}", kernel: 127, stride: 64, bias: false}}
  - {id: squashed, activation: {fn: tanh}}
  - {id: groupnorm, norm: {kind: group, groups: 1}}
  - {id: conv2, conv: {dim: 1, out: "${2 * dim}", kernel: 7, stride: 3}}
  - {id: act2, activation: {fn: gelu}}
  - {id: conv3, conv: {dim: 1, out: "${dim}", kernel: 3, stride: 2}}
  - {id: act3, activation: {fn: gelu}}
outputs: [act3]
"""


def test_moonshines_audio_front_end():
    moonshine = pytest.importorskip("transformers.models.moonshine.modeling_moonshine")
    from transformers import MoonshineConfig

    torch.manual_seed(0)
    encoder = perturb_everything(moonshine.MoonshineEncoder(MoonshineConfig(hidden_size=16)).eval(), seed=1, scale=0.2)
    state = {f"{name}.conv.{k}" if name.startswith("conv") else f"{name}.{k}": v
             for name in ("conv1", "conv2", "conv3", "groupnorm")
             for k, v in getattr(encoder, name).state_dict().items()}
    model = archspec.build_text(FRONT, weights=state).eval()
    audio = torch.randn(3, 1000)
    with torch.no_grad():
        h = torch.tanh(encoder.conv1(audio[:, None]))  # HF's forward, its first steps: [B, 1, N] -> [B, C, T]
        h = nn.functional.gelu(encoder.conv2(encoder.groupnorm(h)))
        want = nn.functional.gelu(encoder.conv3(h)).transpose(1, 2)  # -> [B, T, C]
        got = model(audio)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)
        plain = model.groupnorm.weight.clone()
        model.groupnorm.weight.zero_()  # the norm's weight matters: the comparison can fail
        assert not torch.allclose(model(audio), want, atol=1e-3)
        model.groupnorm.weight.copy_(plain)
    assert archspec.check_text(FRONT).params == sum(p.numel() for name, p in encoder.named_parameters()
                                                    if name.split(".")[0] in ("conv1", "conv2", "conv3", "groupnorm"))
    program = export_program(model, archspec.check_text(FRONT).graph)
    with torch.no_grad():
        assert torch.allclose(program.module()(audio[:2]), model(audio[:2]), atol=1e-6)


@pytest.mark.parametrize("variant", ["optimized", "plain"])
def test_onnx_runtime_gives_the_eager_outputs(tmp_path, variant):
    """Both files build writes (the optimized one asks each op its ONNX fusion: the new-words trial
    met `norm/group has no ONNX_FUSION registered`, exit 3)."""
    pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.onnx import write_model_onnx

    text = IMAGE.replace("GROUPS", "2")
    model = perturb_everything(archspec.build_text(text, seed=0).eval(), seed=3)
    result = write_model_onnx(model, archspec.check_text(text).graph, str(tmp_path / "model.onnx"), variant)
    assert result.max_difference is not None and result.max_difference < 1e-5


def test_groups_that_do_not_divide_and_generation_are_refused_in_words():
    with pytest.raises(SpecError, match="3 groups do not divide the 8 channels"):
        archspec.check_text(IMAGE.replace("GROUPS", "3"))
    from archspec.primitives.kv_cache import refusal

    lm = """name: grouped_lm
dims: {L: [1, 16]}
inputs:
  ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 50, dim: 8, pos: none}}
  - {id: mixed, norm: {kind: group, groups: 2}}
  - {id: attn, attention: {kind: causal, heads: 2}}
  - {id: head, head: {kind: lm, vocab: 50}}
"""
    assert refusal(archspec.check_text(lm).graph) == ("mixed", "a group norm's statistics run over every token of "
                                                               "the sample")
