"""Silent wrongs made loud (issue 18):

1. A 1-D rotary embedding (`rope_theta`) over tokens on a grid, or over tokens with class
   tokens, rotates flattened positions and the class token: a located error at `rope_theta`
   unless `rope_flat: true` says that is meant.
2. A built model refuses an input outside its declared shape (a sequence longer than the
   declared range of its dim) in eager, naming the input, the range and the spec's file:line;
   torch.compile (fullgraph) and torch.export are unaffected.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import archspec

ROOT = Path(__file__).resolve().parent.parent

GRID = """\
archspec: 1
name: rope_grid
inputs:
  image: [B, 3, 32, 32]
graph:
  - patchify: {patch: 8, dim: 16, cls_token: CLS}
  - id: attn
    attention: {kind: KIND, heads: 2, rope_theta: 10000OPTS}
"""


def grid_spec(kind="global", cls=False, opts=""):
    return GRID.replace("KIND", kind).replace("CLS", "true" if cls else "false").replace("OPTS", opts)


def diagnostic(text):
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text, name="rope.yaml")
    (d,) = info.value.diagnostics
    return d


# -- 1. rotary embeddings over a grid or class tokens ------------------------------------------------


@pytest.mark.parametrize("kind,opts", [("global", ""), ("causal", ", over_grid: true"),
                                       ("sliding", ", window: 4, over_grid: true")])
def test_rope_over_a_token_grid_is_a_located_error(kind, opts):
    text = grid_spec(kind, opts=opts)
    d = diagnostic(text)
    assert d.path == "attn"
    line = text.splitlines()[7]
    assert (d.loc.file, d.loc.line, d.loc.col) == ("rope.yaml", 8, line.index("10000") + 1)  # at rope_theta
    assert d.message == ("rope_theta rotates tokens by their index in a 1-D sequence, but these tokens lie on a "
                         "4x4 grid: each patch would be rotated by its row-major index (a patch and the one below "
                         "it 4 positions apart)")
    assert d.hint == ("give image tokens 2-D positions (patchify's `pos: learned` or `sincos`), or set "
                      "`rope_flat: true` if the model really rotates the flattened positions (class tokens "
                      "included)")


def test_rope_over_class_tokens_says_the_class_token_is_rotated():
    d = diagnostic(grid_spec(cls=True))
    assert d.message.endswith("4 positions apart), and the class token as position 0")
    assert "rope_flat: true" in d.hint


def test_rope_over_grid_is_refused_by_the_cli_too(tmp_path):
    path = tmp_path / "rope.yaml"
    path.write_text(grid_spec(cls=True))
    run = subprocess.run([sys.executable, "-m", "archspec", "check", str(path)], capture_output=True, text=True,
                         cwd=ROOT)
    assert run.returncode == 1 and "Traceback" not in run.stderr + run.stdout
    assert "rope.yaml:8:" in run.stdout + run.stderr and "rope_flat: true" in run.stdout + run.stderr


@pytest.mark.parametrize("cls", [False, True])
def test_rope_flat_opts_in(cls):
    text = grid_spec(cls=cls, opts=", rope_flat: true")
    archspec.check_text(text)
    model = archspec.build_text(text).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 16 + cls, 16)


def test_rope_flat_goes_with_rope_theta():
    text = grid_spec().replace("rope_theta: 10000", "rope_flat: true")
    d = diagnostic(text)
    assert d.message == "rope_flat goes with rope_theta"
    assert d.loc.col == text.splitlines()[7].index("true}") + 1


def test_rope_over_a_plain_sequence_is_still_fine():
    archspec.check_text("""
name: seq
inputs:
  x: [B, 6, 16]
graph:
  - attention: {kind: causal, heads: 2, rope_theta: 10000}
""")


def test_no_shipped_spec_trips_the_rope_rule():
    specs = sorted((ROOT / "specs").glob("*.yaml")) + sorted((ROOT / "specs" / "examples").glob("*.yaml"))
    assert specs
    for path in specs:
        archspec.check(path)  # raises SpecError on any error
