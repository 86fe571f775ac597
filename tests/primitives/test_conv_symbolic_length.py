"""A strided 1-D conv over a symbolic length: audio of any length through a feature encoder
(Wav2Vec2's, WavLM's, Speech2Text's convs). The WavLM and Speech2Text trials had to build once
per length ("a 1-D conv over the symbolic length must keep the length"). The output length is
a symbol named by its formula, bounded by the conv of the input's bounds; the model and its
exported program run at every length, as the same spec at that fixed length does."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.backends.export import example_inputs, export_program
from archspec.core.errors import SpecError

SPEC = """
name: feature_encoder
dims: {S: [400, 16000]}
inputs: {audio: {shape: [B, S]}}
graph:
  - {id: wave, rearrange: {pattern: "b n -> b n 1", as: tokens}}
  - {id: c0, conv: {dim: 1, out: 16, kernel: 10, stride: 5, bias: false}}
  - {id: a0, activation: {fn: gelu}}
  - {id: c1, conv: {dim: 1, out: 16, kernel: 3, stride: 2, padding: 1}}
  - {id: proj, linear: {dim: 32}}
  - {id: attn, attention: {kind: global, heads: 4}}
"""


def frames(samples: int) -> int:
    return ((samples - 10) // 5 + 1 + 2 - 3) // 2 + 1


def test_the_length_is_the_convs_formula_and_its_bounds():
    length = archspec.check_text(SPEC).graph.type_of("attn").shape[1]
    assert (str(length), length.lo, length.hi) == ("((S-10)//5)//2+1", frames(400), frames(16000))


def test_the_model_and_its_program_run_at_every_length_as_the_fixed_spec():
    torch.manual_seed(0)
    model = archspec.build_text(SPEC).eval()
    graph = archspec.check_text(SPEC).graph
    program = export_program(model, graph).module()
    for samples in (400, 1237):
        fixed = archspec.build_text(SPEC.replace("dims: {S: [400, 16000]}\n", "").replace("[B, S]", f"[B, {samples}]"))
        fixed.load_state_dict(model.state_dict())
        audio = torch.randn(2, samples)
        with torch.no_grad():
            out = model(audio)
            assert out.shape == (2, frames(samples), 32) and torch.equal(out, fixed.eval()(audio))
            assert (program(audio) - out).abs().max() < 1e-5


def test_a_shortest_length_the_kernel_overreaches_is_a_located_error():
    with pytest.raises(SpecError) as info:
        archspec.check_text(SPEC.replace("[400, 16000]", "[4, 16000]"))
    d = info.value.diagnostics[0]
    assert "kernel 10 is larger than the shortest S (4)" in d.message and "from at least 10" in d.hint


CHANNELS_FIRST = """
name: channels_first
dims: {S: [256, 4096]}
inputs: {x: [B, 1, S]}
graph:
  - {id: c, conv: {dim: 1, kernel: 127, stride: 64, out: 8}}
"""


def test_a_signal_channels_first_is_a_located_error_with_the_rearrange():
    """The Moonshine trial: [B, 1, S] with S symbolic was taken for tokens whose channels change with
    the input, and conv, norm, attention and mlp raised a TypeError in `check` (exit 3)."""
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(CHANNELS_FIRST)
    problem = info.value.diagnostics[0]
    assert "a 1-D conv reads tokens [B, N, C], got a rank-3 tensor" in problem.message
    assert "'b c n -> b n c', as: tokens" in str(problem.hint) and problem.loc is not None
    moved = CHANNELS_FIRST.replace("  - {id: c,", '  - {rearrange: {pattern: "b c n -> b n c", as: tokens}}\n  - {id: c,')
    model = archspec.build_text(moved).eval()
    x = torch.randn(2, 1, 640)
    with torch.no_grad():
        assert torch.allclose(model(x), model.c(x.transpose(1, 2)))
