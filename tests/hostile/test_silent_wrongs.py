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

ROOT = Path(__file__).resolve().parents[2]

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
    assert d.hint == ("give image tokens 2-D positions (patchify's `pos: learned` or `sincos`, or 2-D rotary "
                      "positions: `scores: [rotary_grid]` instead of rope_theta), or set `rope_flat: true` if the "
                      "model really rotates the flattened positions (class tokens included)")


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


# -- 2. inputs outside their declared shape ------------------------------------------------------------

TINY_LM = ROOT / "specs" / "examples" / "tiny_lm.yaml"


def ids_line() -> int:
    lines = TINY_LM.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith("  ids:"))


@pytest.fixture(scope="module")
def tiny_lm():
    return archspec.build(str(TINY_LM), seed=0).eval()


def test_a_too_long_sequence_is_refused_in_eager(tiny_lm):
    where = tiny_lm.meta["archspec_inputs"][0].where
    assert where.endswith(f"tiny_lm.yaml:{ids_line()}")
    with pytest.raises(ValueError) as info, torch.no_grad():
        tiny_lm(torch.randint(0, 100, (2, 600)))
    assert str(info.value) == f"input 'ids' has 600 tokens; the spec declares L in 1..512 ({where})"


@pytest.mark.parametrize("shape,words", [((2, 0), "has 0 tokens; the spec declares L in 1..512"),
                                         ((2, 3, 4), "is [2, 3, 4]; the spec declares [B, L]")])
def test_an_empty_or_misranked_input_is_refused(tiny_lm, shape, words):
    with pytest.raises(ValueError, match=r"^input 'ids' " + words.replace("[", r"\[").replace("]", r"\]")):
        tiny_lm(torch.zeros(shape, dtype=torch.int64))


@pytest.mark.parametrize("length", [1, 17, 512])
def test_a_length_within_range_still_runs(tiny_lm, length):
    with torch.no_grad():
        assert tiny_lm(torch.randint(0, 100, (2, length))).shape == (2, length, 8192)


@pytest.mark.parametrize("wrong", [8192, -1])
def test_a_token_id_outside_the_vocabulary_is_refused_in_words(tiny_lm, wrong):
    """torch's embedding raises "IndexError: index out of range in self"; the model says which
    input, which id and the vocabulary instead (generate already checked its own ids)."""
    where = tiny_lm.meta["archspec_inputs"][0].where
    ids = torch.tensor([[1, 2, wrong, 3]])
    with pytest.raises(ValueError) as info, torch.no_grad():
        tiny_lm(ids)
    assert str(info.value) == (f"input 'ids' holds token id {wrong}, outside the vocabulary of 8,192 ids (0..8191) "
                               f"({where})")
    assert isinstance(info.value.__cause__, IndexError)


def test_an_id_outside_its_own_embeds_vocabulary_names_that_input_and_that_vocabulary():
    """The LayoutLMv3 trial: two id inputs read by embeds of 100 and 8 rows; an id of 9 in the
    second was told 'input ids holds token id 50, outside the vocabulary of 8 ids' (every input
    checked against the smallest table)."""
    model = archspec.build_text("""
name: two_vocabularies
dims: {L: [1, 16]}
inputs:
  ids: {shape: [B, L], dtype: int64}
  small_ids: {shape: [B, L], dtype: int64}
graph:
  - {id: a, from: ids, embed: {vocab: 100, dim: 8, pos: none}}
  - {id: b, from: small_ids, embed: {vocab: 8, dim: 8, pos: none}}
  - {id: s, from: [a, b], add: {}}
""")
    with pytest.raises(ValueError, match=r"^input 'small_ids' holds token id 9, outside the vocabulary of 8 ids"):
        model(torch.tensor([[50, 60]]), torch.tensor([[3, 9]]))
    with pytest.raises(ValueError, match=r"^input 'ids' holds token id 150, outside the vocabulary of 100 ids"):
        model(torch.tensor([[150, 6]]), torch.tensor([[3, 1]]))


def test_a_fixed_size_is_checked_too():
    model = archspec.build_text("""
name: img
inputs:
  image: [B, 3, 32, 32]
graph:
  - patchify: {patch: 8, dim: 16}
""", name="img.yaml").eval()
    with torch.no_grad():
        model(torch.randn(1, 3, 32, 32))
        with pytest.raises(ValueError, match=r"^input 'image' is \[1, 3, 40, 40\]; the spec declares "
                                             r"\[B, 3, 32, 32\] \(img.yaml:4\)$"):
            model(torch.randn(1, 3, 40, 40))


def test_loss_and_forward_features_check_too():
    model = archspec.build_text("""
name: cls
dims:
  L: [1, 16]
inputs:
  ids: {shape: [B, L], dtype: int64}
graph:
  - embed: {vocab: 50, dim: 16, pos: learned, max_len: 16}
  - head: {kind: classify, classes: 3, pool: mean}
""").eval()
    with torch.no_grad():
        model.forward_features(torch.randint(0, 50, (2, 16)))
        with pytest.raises(ValueError, match="has 17 tokens; the spec declares L in 1..16"):
            model.forward_features(torch.randint(0, 50, (2, 17)))


def test_torch_compile_fullgraph_has_no_graph_break(tiny_lm):
    x = torch.randint(0, 100, (2, 10))
    explained = torch._dynamo.explain(tiny_lm)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    torch._dynamo.reset()
    compiled = torch.compile(tiny_lm, fullgraph=True, backend="eager")
    with torch.no_grad():
        assert torch.equal(compiled(x), tiny_lm(x))


def test_exporting_a_module_that_calls_the_model_traces_no_check(tiny_lm):
    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = tiny_lm

        def forward(self, ids):
            return self.model(ids)

    length = torch.export.Dim("L", min=2, max=512)
    program = torch.export.export(Wrap(), (torch.randint(0, 100, (2, 8)),), dynamic_shapes=({1: length},),
                                  strict=False)
    with torch.no_grad():
        assert program.module()(torch.randint(0, 100, (2, 33))).shape == (2, 33, 8192)


def test_archspec_build_target_export_still_works(tmp_path):
    run = subprocess.run([sys.executable, "-m", "archspec", "build", str(TINY_LM), "--target", "export", "-o",
                          str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    program = torch.export.load(tmp_path / "model.pt2")
    with torch.no_grad():
        assert program.module()(torch.randint(0, 100, (2, 33))).shape == (2, 33, 8192)


# -- warnings: legal and rarely meant -----------------------------------------------------------------

WINDOW_OF_ONE = """\
archspec: 1
name: tiny_swin
inputs:
  feats: {shape: [B, 64, 32], grid: [8, 8]}
graph:
  - id: blocks
    repeat: 3
    attention: {kind: window, heads: 2, window: 1}
"""


def test_a_window_of_one_is_a_warning_once_and_the_model_builds(tmp_path):
    """Each token attends only to itself: legal (timm's MobileViT at a small image runs it; a
    user trial could not write that model while it was an error) and rarely meant. One warning
    for the three copies, at the window; `check` exits 0 and the model runs."""
    report = archspec.check_text(WINDOW_OF_ONE)
    said = [(w.message, w.loc.line, w.loc.col) for w in report.warnings]
    assert said == [("window 1 over the 8x8 token grid: each token attends only to itself, and no information "
                     "moves between tokens", 8, 49)]
    model = archspec.build_text(WINDOW_OF_ONE).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 64, 32)).shape == (2, 64, 32)
    spec = tmp_path / "w1.yaml"
    spec.write_text(WINDOW_OF_ONE)
    done = subprocess.run([sys.executable, "-m", "archspec", "check", str(spec)], capture_output=True, text=True)
    assert done.returncode == 0 and f"{spec}:8:49: warning: blocks.0: window 1 over the 8x8" in done.stderr
    assert "Traceback" not in done.stderr
