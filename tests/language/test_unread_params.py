"""Two quiet mistakes the CodeGen and Longformer trials made, now said: a param nothing reads
whose name is close to one that is read (a misspelt override under `extends`: the base's value
stayed in force); two inputs that give one dim two sizes at run time (a torch error deep in the
model before)."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT

CHILD = """archspec: 1
name: codegen_like
extends: {base}
params:
  vocab: 101
  dim: 64
  layers: 1
  heads: 4
  rotary_dims: 8
  context: 64
"""


def test_a_misspelt_override_is_a_warning_with_the_closest_name(tmp_path):
    (tmp_path / "child.yaml").write_text(CHILD.format(base=ROOT / "specs" / "gptj.yaml"))
    report = archspec.check(str(tmp_path / "child.yaml"))
    found = [w for w in report.graph.warnings if "is read by nothing" in w.message]
    assert [w.message for w in found] == ["param 'rotary_dims' is read by nothing in the spec"]
    assert "did you mean 'rotary_dim'?" in found[0].hint and found[0].loc.line == 9
    right = archspec.check(str(ROOT / "specs" / "gptj.yaml"))
    assert not [w for w in right.graph.warnings if "is read by nothing" in w.message]


def test_an_unread_param_unlike_any_other_stays_quiet():
    text = "name: q\nparams: {dim: 8, mp_num: 4}\ninputs:\n  x: [B, 4, 8]\ngraph:\n  - {linear: {dim: '${dim}'}}\n"
    assert not [w for w in archspec.check_text(text).graph.warnings if "is read by nothing" in w.message]


TWO_INPUTS = """name: two
dims: {L: [1, 16]}
inputs:
  ids: {shape: [B, L], dtype: int64}
  attention_mask: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, from: ids, embed: {vocab: 50, dim: 8, pos: none}}
  - {id: attn, from: [embed, attention_mask], attention: {kind: global, heads: 2, padding_mask: true}}
"""


def test_two_inputs_that_give_one_dim_two_sizes_are_refused_in_words():
    model = archspec.build_text(TWO_INPUTS, seed=0).eval()
    with pytest.raises(ValueError, match="input 'attention_mask' has L = 9, and input 'ids' has L = 8: inputs that "
                                         "share L must agree"):
        model(torch.ones(2, 8, dtype=torch.long), torch.ones(2, 9, dtype=torch.long))
    assert model(torch.ones(2, 8, dtype=torch.long), torch.ones(2, 8, dtype=torch.long)).shape == (2, 8, 8)


def test_inputs_of_two_batches_and_float_ids_are_refused_in_words():
    """The CLIP trial: 2 images and 5 texts ran in eager (the spec's output says [B, B]) and
    failed in its exports with a guard or ONNX Runtime's broadcast error; float ids met torch's
    embedding error."""
    model = archspec.build_text(TWO_INPUTS, seed=0).eval()
    with pytest.raises(ValueError, match="input 'attention_mask' has B = 3, and input 'ids' has B = 2: inputs that "
                                         "share B must agree"):
        model(torch.ones(2, 8, dtype=torch.long), torch.ones(3, 8, dtype=torch.long))
    with pytest.raises(ValueError, match=r"input 'ids' holds float32 values; the spec declares token ids \(int64"):
        model(torch.ones(2, 8), torch.ones(2, 8, dtype=torch.long))


def test_an_unread_param_computed_from_others_is_no_misspelling():
    """The Wav2Vec2 trial's `frames: ${samples // 320}`, read by nothing, was told 'did you mean
    samples?': a computed param is nobody's misspelt override."""
    text = """
name: derived
params: {samples: 800, frames: "${samples // 5}", dimm: 32, dim: 32}
inputs: {x: [B, 8, dim]}
graph:
  - {id: a, attention: {kind: global, heads: 2}}
"""
    warned = [w.message for w in archspec.check_text(text).warnings if "read by nothing" in w.message]
    assert warned == ["param 'dimm' is read by nothing in the spec"]


def test_a_param_read_by_defaults_that_set_replaced_is_no_misspelling():
    """The Swin2SR trial: `--set h=8 w=8` where h and w default to ${img} warned that img was read
    by nothing and asked 'did you mean dim?'."""
    text = """
name: s
params: {img: 16, h: "${img}", w: "${img}", dim: 8}
inputs: {image: [B, 3, h, w]}
graph:
  - {id: p, patchify: {patch: 4, dim: "${dim}"}}
"""
    report = archspec.check_text(text, {"h": 8, "w": 8})
    assert not report.warnings
    assert report.graph.type_of("p").grid == (2, 2)
