"""constant's `fill: sinusoid`: a fixed sinusoid table made at build in float64, as VideoMAE's
get_sinusoid_encoding_table (the VideoMAE trial wrote it as 11 nodes from `fill: index`, which
in a bf16 build counted 257 as 256 and came out 0.1+ off)."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

SPEC = """
name: table
inputs: {x: [B, 40, 24]}
graph:
  - {id: table, constant: {shape: [40, 24], fill: sinusoid LAYOUT}}
  - {id: placed, from: [x, table], add: {}}
"""


def table_of(layout: str = "") -> torch.Tensor:
    model = archspec.build_text(SPEC.replace("LAYOUT", layout)).eval()
    with torch.no_grad():
        return model(torch.zeros(1, 40, 24))[0]  # [40, 24]


def test_videomaes_table():
    videomae = pytest.importorskip("transformers.models.videomae.modeling_videomae")
    theirs = videomae.get_sinusoid_encoding_table(40, 24)[0]  # float64 rounded once, as ours
    assert torch.equal(table_of(), theirs)


def test_the_halves_layout_is_marians_and_differs():
    modeling_marian = pytest.importorskip("transformers.models.marian.modeling_marian")
    expected = modeling_marian.MarianSinusoidalPositionalEmbedding(40, 24).create_weight()
    halves = table_of(", sincos_layout: halves")
    assert (halves - expected).abs().max() < 1e-6
    assert (halves - table_of()).abs().max() > 0.5


def test_a_bf16_build_rounds_the_table_once():
    model = archspec.build_text(SPEC.replace("LAYOUT", "").replace("40", "600")).eval().to(torch.bfloat16)
    videomae = pytest.importorskip("transformers.models.videomae.modeling_videomae")
    theirs = videomae.get_sinusoid_encoding_table(600, 24)[0]
    with torch.no_grad():
        ours = model(torch.zeros(1, 600, 24, dtype=torch.bfloat16))[0].float()
    assert (ours - theirs).abs().max() <= 2 ** -8  # bf16's rounding of values in [-1, 1], not a wrong position


@pytest.mark.parametrize("shape, message", [("[40]", "two axes"), ("[40, 23]", "is odd"),
                                            ("[L, 24]", "made once, at build")])
def test_a_table_that_cannot_be_made_is_a_located_error(shape, message):
    text = f"""
name: table
dims: {{L: [1, 40]}}
inputs: {{x: [B, L, 24]}}
graph:
  - {{id: table, {"from: x, " if "L" in shape else ""}constant: {{shape: {shape}, fill: sinusoid}}}}
"""
    with pytest.raises(SpecError) as info:
        archspec.check_text(text)
    assert message in info.value.diagnostics[0].message
    assert info.value.diagnostics[0].loc is not None


def test_a_layout_without_a_sinusoid_is_an_error():
    with pytest.raises(SpecError) as info:
        archspec.check_text("""
name: table
inputs: {x: [B, 4, 8]}
graph:
  - {id: table, constant: {shape: [4, 8], sincos_layout: halves}}
""")
    assert "lays out a sinusoid table" in info.value.diagnostics[0].message
