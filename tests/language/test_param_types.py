"""Typed params (`param_types:`): a param's declared type and choices are checked for its default,
at `--set`, in create_model's keywords and for what an expression gives, with a did-you-mean; an
`if:` comparing a param with a value it can never take is a warning (issue 39: `--set
norm_type=batchnorm` skipped both norms silently). And `timm_args:`, the schema key that maps
timm's create_model keywords onto a spec's params."""

from __future__ import annotations

import pytest

import archspec
from archspec.core.errors import SpecError

from tests.conftest import ROOT

SPEC = """\
archspec: 1
name: typed
params: {norm_type: layer, dim: 32}
param_types:
  norm_type: {type: str, choices: [layer, batch]}
  dim: {type: int}
inputs:
  x: [B, 8, "${dim}"]
graph:
  - {id: n, if: "${norm_type == 'layer'}", norm: {}}
  - {id: n, if: "${norm_type == 'batch'}", norm: {}}
  - {mlp: {ratio: 2}}
"""


def failure(text: str, **overrides):
    with pytest.raises(SpecError) as info:
        archspec.check_text(text, **overrides)
    return info.value.diagnostics[0]


def test_a_value_outside_the_choices_at_set_is_an_error_with_a_did_you_mean():
    assert archspec.check_text(SPEC, overrides={"norm_type": "batch"}).params > 0
    problem = failure(SPEC, overrides={"norm_type": "batchnorm"})
    assert problem.message == "--set param 'norm_type' takes one of 'layer', 'batch'; 'batchnorm' is not one of them"
    assert problem.hint == "did you mean 'batch'?" and problem.loc.file == "<command line>"
    assert "is a whole number (int); 3.5 is not" in failure(SPEC, overrides={"dim": "3.5"}).message


def test_an_expression_and_a_default_are_checked_too():
    problem = failure(SPEC, overrides={"norm_type": "${'bat' + 'chnorm'}"})
    assert "'batchnorm' is not one of them" in problem.message
    bad_default = SPEC.replace("{norm_type: layer,", "{norm_type: lyer,")
    problem = failure(bad_default)
    assert problem.loc.line == 3 and problem.hint == "did you mean 'layer'?"


def test_an_if_comparing_with_a_value_never_taken_is_a_warning():
    assert archspec.check_text(SPEC).warnings == []
    text = SPEC.replace("norm_type == 'batch'", "norm_type == 'batchnorm'")
    warned = [w for w in archspec.check_text(text).warnings if "can never be" in w.message]
    assert len(warned) == 1 and warned[0].loc.line == 11 and warned[0].hint == "did you mean 'batch'?"
    typed = SPEC.replace("\"${norm_type == 'batch'}\"", "\"${dim == 'wide'}\"")
    assert any("param 'dim' with 'wide'" in w.message for w in archspec.check_text(typed).warnings)


def test_a_declaration_names_a_param():
    problem = failure(SPEC.replace("  dim: {type: int}", "  dimm: {type: int}"))
    assert problem.message == "param_types: 'dimm' is not a param of this spec" and "'dim'" in problem.hint
    assert "type" in failure(SPEC.replace("{type: int}", "{type: integer}")).message


def test_create_model_refuses_a_value_outside_the_choices_as_a_python_error(tmp_path):
    path = tmp_path / "typed.yaml"
    path.write_text(SPEC)
    assert archspec.create_model(str(path), norm_type="batch") is not None
    with pytest.raises(ValueError, match="did you mean 'batch'") as info:
        archspec.create_model(str(path), norm_type="batchnorm")
    assert not isinstance(info.value, SpecError)


def test_timm_args_is_a_key_every_shipped_spec_writes_so():
    for path in sorted((ROOT / "specs").glob("*.yaml")):
        assert "# timm_args:" not in path.read_text(), path.name
    assert archspec.models.timm_args(str(ROOT / "specs" / "vit_ti16.yaml"))["img_size"] == "img"  # from vit_b16
    problem = failure(SPEC.replace("param_types:", "timm_args: {img_size: image}\nparam_types:"))
    assert problem.message == "timm_args: 'image' is not a param of this spec"
    problem = failure(SPEC.replace("param_types:", "timm_args: {image_size: dim}\nparam_types:"))
    assert problem.message == "timm_args: 'image_size' is not one of timm.create_model's keywords"
    assert problem.hint == "did you mean 'img_size'?"


LIST_SPEC = """\
archspec: 1
name: typed_list
params: {layer_types: [conv, full_attention]}
param_types:
  layer_types: {type: list, choices: [conv, full_attention]}
inputs:
  x: [B, 8, 16]
graph:
  - {mlp: {ratio: 2}}
"""


def test_a_list_params_choices_are_its_items_values():
    """LFM2's trial: choices given for layer_types' items refused the default itself, so the
    spec could not say which words an item may be (a misspelt item dropped its layer's mixer)."""
    assert archspec.check_text(LIST_SPEC).params > 0
    problem = failure(LIST_SPEC, overrides={"layer_types": "[conv, attention]"})
    assert problem.message == ("--set param 'layer_types' holds items among 'conv', 'full_attention'; item 1 "
                               "('attention') is not one of them")
    assert problem.hint == "did you mean 'full_attention'?"
    whole = LIST_SPEC.replace("choices: [conv, full_attention]", "choices: [[conv, full_attention], [conv, conv]]")
    assert archspec.check_text(whole).params > 0  # choices that are lists: the whole value is one of them
    assert "is not one of them" in failure(whole, overrides={"layer_types": "[full_attention, conv]"}).message


@pytest.mark.parametrize("kind", ["causal", "global", "sliding"])
def test_hugging_faces_partial_rotary_factor_points_at_rope_dims(kind):
    """The Persimmon trial's `partial_rotary_factor: 0.5` met "unknown key" and fifty keys."""
    window = ", window: 4" if kind == "sliding" else ""
    text = ("name: prf\ninputs: {ids: {shape: [B, 16], dtype: int64}}\ngraph:\n"
            "  - {id: e, embed: {vocab: 10, dim: 16, pos: none}}\n"
            f"  - {{id: a, attention: {{kind: {kind}, heads: 2, rope_theta: 10000.0, partial_rotary_factor: 0.5"
            f"{window}}}}}\n")
    with pytest.raises(archspec.SpecError) as error:
        archspec.check_text(text)
    assert error.value.diagnostics[0].hint.startswith("rope_dims: the first dims of each head the rotation covers")


@pytest.mark.parametrize("option, says", [
    ("softcap: 50.0", "a cap on the scores is the score part `scores: [{softcap: {cap: 50.0}}]`"),
    ("window: 4", "a causal window is `kind: sliding`; where layers alternate"),
])
def test_a_sliding_or_capped_layers_option_on_causal_attention_says_where_it_goes(option, says):
    """The VaultGemma trial: `softcap` and `window` on causal layers met the fifty allowed keys."""
    text = ("name: sc\ninputs: {ids: {shape: [B, 16], dtype: int64}}\ngraph:\n"
            "  - {id: e, embed: {vocab: 10, dim: 16, pos: none}}\n"
            f"  - {{id: a, attention: {{kind: causal, heads: 2, {option}}}}}\n")
    with pytest.raises(archspec.SpecError) as error:
        archspec.check_text(text)
    assert says in error.value.diagnostics[0].hint
