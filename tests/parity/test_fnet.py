"""FNet's Fourier mixing as one word, `fourier: {axes: [1, 2]}`, against Hugging Face's FNetModel
(random weights, every parameter perturbed): the same last hidden state and pooler output. The
FNet trial wrote each mixing layer as DFT tables in 13-16 nodes; here a layer is four nodes."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.conftest import standalone_copy
from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")

SPEC = """
name: fnet_tiny
params: {vocab: 96, dim: 32, depth: 2, ffn: 64, context: 24, types: 4, eps: 1.0e-12}
dims:
  L: [1, context]
inputs:
  input_ids: {shape: [B, L], dtype: int64}
  token_type_ids: {shape: [B, L], dtype: int64}
blocks:
  fnet_layer:
    inputs: [x]
    graph:
      - {id: mix, fourier: {axes: [1, 2]}}             # Re(FFT) over the tokens and the channels
      - {id: mixed, from: [x, mix], add: {}}
      - {id: mix_norm, norm: {eps: "${eps}"}}
      - {id: mlp, mlp: {hidden: "${ffn}", act: gelu_tanh, norm: post, norm_eps: "${eps}"}}
graph:
  - id: embed
    from: [input_ids, token_type_ids]
    embed: {vocab: "${vocab}", dim: "${dim}", pos: learned, max_len: "${context}", types: "${types}"}
  - {id: embed_norm, norm: {eps: "${eps}"}}
  - {id: projection, linear: {dim: "${dim}"}}
  - {id: layers, repeat: "${depth}", fnet_layer: {}}
  - {id: first, select: {index: 0}}
  - {id: pooled, linear: {dim: "${dim}"}}
  - {id: pooler, activation: {fn: tanh}}
outputs: [layers, pooler]
"""


def hugging_faces_model():
    from transformers import FNetConfig, FNetModel

    torch.manual_seed(0)
    config = FNetConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                        max_position_embeddings=24, type_vocab_size=4, hidden_act="gelu_new")
    model = FNetModel(config).eval()
    perturb_everything(model, seed=1, scale=0.1)
    return model


def layer_names(i: int) -> dict[str, str]:
    return {f"encoder.layer.{i}.fourier.output.LayerNorm": f"layers.{i}.mix_norm",
            f"encoder.layer.{i}.intermediate.dense": f"layers.{i}.mlp.fc1",
            f"encoder.layer.{i}.output.dense": f"layers.{i}.mlp.fc2",
            f"encoder.layer.{i}.output.LayerNorm": f"layers.{i}.mlp.norm"}


def ours_from(theirs_model):
    model = archspec.build_text(SPEC).eval()
    names = {"embeddings.word_embeddings": "embed.tokens", "embeddings.position_embeddings": "embed.pos",
             "embeddings.token_type_embeddings": "embed.types", "embeddings.LayerNorm": "embed_norm",
             "embeddings.projection": "projection", "pooler.dense": "pooled", **layer_names(0), **layer_names(1)}
    theirs = theirs_model.state_dict()
    state = {}
    for key, value in theirs.items():
        module, _, leaf = key.rpartition(".")
        if module in names:
            state[f"{names[module]}.{leaf}"] = value
    missing = set(model.state_dict()) - set(state)
    assert not missing, missing
    model.load_state_dict(state, strict=False)
    return model


@pytest.fixture(scope="module")
def pair():
    theirs = hugging_faces_model()
    return theirs, ours_from(theirs)


@pytest.mark.parametrize("length", [24, 7])
def test_fnet_model_as_hugging_faces(pair, length):
    theirs, ours = pair
    ids = torch.randint(0, 96, (2, length))
    types = torch.randint(0, 4, (2, length))
    with torch.no_grad():
        expected = theirs(input_ids=ids, token_type_ids=types)
        hidden, pooled = ours(ids, types)
    assert (hidden - expected.last_hidden_state).abs().max() < 1e-4
    assert (pooled - expected.pooler_output).abs().max() < 1e-4


def test_without_the_mixing_the_outputs_differ(pair):
    """The comparison can fail: the same weights with the imaginary part in place of the real one."""
    theirs, ours = pair
    other = archspec.build_text(SPEC.replace("axes: [1, 2]}", "axes: [1, 2], part: imag}")).eval()
    other.load_state_dict(ours.state_dict())
    ids, types = torch.randint(0, 96, (2, 24)), torch.zeros(2, 24, dtype=torch.long)
    with torch.no_grad():
        assert (other(ids, types)[0] - theirs(input_ids=ids, token_type_ids=types).last_hidden_state).abs().max() > 1e-2


def test_the_transform_is_torchs_in_float64():
    model = archspec.build_text("""
name: fft
inputs: {x: [B, 6, 10]}
graph:
  - {id: f, fourier: {axes: [1, 2], part: imag}}
""").double().eval()
    x = torch.randn(3, 6, 10, dtype=torch.float64)
    assert torch.equal(model(x), torch.fft.fftn(x, dim=(1, 2)).imag)


def test_a_bf16_build_transforms_in_float32():
    model = archspec.build_text("""
name: fft
inputs: {x: [B, 16, 8]}
graph:
  - {id: f, fourier: {axes: [1]}}
""").eval()
    x = torch.randn(2, 16, 8)
    out = model.to(torch.bfloat16)(x.bfloat16())
    assert out.dtype == torch.bfloat16
    exact = torch.fft.fft(x.bfloat16().float(), dim=1).real
    assert (out.float() - exact).abs().max() <= exact.abs().max() * 2 ** -8  # the result's rounding alone


@pytest.mark.parametrize("axes, message", [([0], "the batch"), ([1, -2], "names an axis twice"),
                                           ([3], "outside")])
def test_axes_that_are_not_a_samples_are_located_errors(axes, message):
    with pytest.raises(SpecError) as info:
        archspec.check_text(f"""
name: fft
inputs: {{x: [B, 6, 10]}}
graph:
  - {{id: f, fourier: {{axes: {axes}}}}}
""")
    assert message in info.value.diagnostics[0].message
    assert info.value.diagnostics[0].loc is not None


def test_a_fourier_transform_over_the_tokens_is_not_cached_while_decoding():
    from archspec.primitives.decoding import DECODE, Mixes, Tokenwise
    from archspec.primitives.ops.fourier import FOURIER, FourierParams

    decode = DECODE.of(FOURIER, None)
    assert isinstance(decode(FourierParams(axes=[1, 2])), Mixes)
    assert isinstance(decode(FourierParams(axes=[-1])), Tokenwise)


# -- through every export: the exported programs take the DFT as matrix products ----------------

def test_exports_with_a_dynamic_batch_and_length(pair):
    from archspec.compiler.backends.export import export_program

    _, ours = pair
    program = export_program(ours, archspec.check_text(SPEC).graph)
    for batch, length in ((3, 24), (1, 7)):
        ids, types = torch.randint(0, 96, (batch, length)), torch.randint(0, 4, (batch, length))
        with torch.no_grad():
            for got, want in zip(program.module()(ids, types), ours(ids, types), strict=True):
                assert (got - want).abs().max() < 1e-4


def test_onnx_runs_in_onnxruntime(pair, tmp_path):
    pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.onnx import export_onnx

    _, ours = pair
    result = export_onnx(ours, archspec.check_text(SPEC).graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_every_op(tmp_path, capsys):
    from tests.conftest import checks_tensorrt_coverage

    checks_tensorrt_coverage(SPEC, tmp_path, capsys)


def test_the_standalone_model_py_gives_the_same(pair, tmp_path):
    _, ours = pair
    again = standalone_copy(ours, "fnet_tiny", None, tmp_path)
    again.load_state_dict(ours.state_dict())
    ids, types = torch.randint(0, 96, (2, 24)), torch.randint(0, 4, (2, 24))
    with torch.no_grad():
        for got, want in zip(again(ids, types), ours(ids, types), strict=True):
            assert torch.equal(got, want)
