"""A checkpoint whose tensors differ in shape because of one option of a node: the error names
the option's value that gives the checkpoint's shapes (compiler/weights/shape_options.py), found
by lowering the node with each other value of its choice options (the OLMoE trial's q_norm [64]
against the model's [16] was told only that the shapes differ)."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

SPEC = """\
archspec: 1
name: shapes
params: {gated: true, over: all_heads, layers: 3}
inputs:
  input_ids: {shape: [B, 16], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 100, dim: 64, pos: none}}
  - id: layers
    repeat: ${layers}
    graph:
      - {id: attn, attention: {kind: causal, heads: 4, rope_theta: 10000.0, qkv_bias: false, qk_norm: rms,
                               qk_norm_over: "${over}"}}
      - {id: mlp, mlp: {hidden: 128, act: silu, gated: "${gated}", bias: false}}
  - {id: head, head: {kind: lm, vocab: 100}}
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shapes")
    (folder / "spec.yaml").write_text(SPEC)
    torch.save(archspec.build(str(folder / "spec.yaml")).state_dict(), folder / "ckpt.pt")
    return folder


def load_error(folder, **overrides) -> str:
    with pytest.raises(SpecError) as error:
        archspec.build(str(folder / "spec.yaml"), overrides, weights=str(folder / "ckpt.pt"))
    return str(error.value)


def test_a_gated_checkpoint_into_a_plain_mlp_names_gated(saved):
    said = load_error(saved, gated=False)
    assert "layers.0.mlp.fc1.weight (256, 64) (model has (128, 64))" in said
    assert "`gated: true` on 'layers.0.mlp' (and its 2 other copies) gives the checkpoint's shapes" in said


def test_norms_over_all_heads_into_a_per_head_norm_names_the_option(saved):
    said = load_error(saved, over="head")
    assert "`qk_norm_over: all_heads` on 'layers.0.attn' (and its 2 other copies) gives the checkpoint's shapes" \
        in said
    assert "gated" not in said.split("hint:")[1]  # the mlp's tensors fit: no word on it


def test_two_places_are_both_named(saved):
    said = load_error(saved, over="each_head", gated=False)
    assert "`qk_norm_over: all_heads` on 'layers.0.attn'" in said
    assert "`gated: true` on 'layers.0.mlp'" in said


def test_no_option_is_named_where_none_gives_the_shapes(saved):
    """Another width is a number, not a choice: the hint names no option."""
    spec = SPEC.replace("hidden: 128", "hidden: 96")
    (saved / "other.yaml").write_text(spec)
    with pytest.raises(SpecError) as error:
        archspec.build(str(saved / "other.yaml"), weights=str(saved / "ckpt.pt"))
    assert "with the wrong shape" in str(error.value)
    assert "gives the checkpoint's shapes" not in str(error.value)


def test_values_the_rule_was_never_asked_with_leave_the_error_as_it_was(tmp_path):
    """Trying window attention's choices on a checkpoint of another width asks its rule about
    values that change what the node reads (external queries: an input it does not have); the
    rule's IndexError there ended the load with 'list index out of range' instead of its error."""
    spec = "archspec: 1\nname: w\nparams: {dim: 32}\ninputs:\n  x: [B, 3, 16, 16]\ngraph:\n" \
           "  - {id: embed, patchify: {patch: 2, dim: \"${dim}\"}}\n" \
           "  - {id: attn, attention: {kind: window, heads: 2, window: 4}}\n"
    (tmp_path / "w.yaml").write_text(spec)
    torch.save(archspec.build(str(tmp_path / "w.yaml"), {"dim": 64}).state_dict(), tmp_path / "w.pt")
    with pytest.raises(SpecError, match="with the wrong shape"):
        archspec.build(str(tmp_path / "w.yaml"), weights=str(tmp_path / "w.pt"))
