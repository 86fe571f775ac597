"""timm's `pretrained_cfg` on a built image model (issue 39): timm.data.resolve_model_data_config
reads the input size the model was built for and its reference model's mean, std,
interpolation and crop, as the spec declares them (`pretrained_cfg:`)."""

from __future__ import annotations

import pytest

import archspec
from archspec.core.shipped import shipped_spec
from archspec.models import data_cfg, reference_names

timm = pytest.importorskip("timm")
from timm.data import resolve_model_data_config  # noqa: E402


def test_a_model_built_for_32_px_says_so_to_timm():
    model = archspec.create_model("vit_ti16", img_size=32, depth=1, num_classes=7)
    config = resolve_model_data_config(model)
    assert config["input_size"] == (3, 32, 32)
    assert config["mean"] == config["std"] == (0.5, 0.5, 0.5)  # timm's vit_tiny_patch16_224, not ImageNet's
    assert config["interpolation"] == "bicubic" and config["crop_pct"] == 0.9
    assert model.pretrained_cfg["num_classes"] == 7 and model.default_cfg["input_size"] == (3, 32, 32)
    model.pretrained_cfg = {**model.pretrained_cfg, "crop_pct": 1.0}  # timm's code sets it too
    assert resolve_model_data_config(model)["crop_pct"] == 1.0


def test_a_spec_without_a_declared_config_gets_timms_defaults_and_text_models_none():
    text_built = archspec.build_text(open(shipped_spec("vit_ti16")).read().replace("extends: vit_b16.yaml",
                                                                             f"extends: {shipped_spec('vit_b16')}"),
                               {"img": 32, "depth": 1})
    assert resolve_model_data_config(text_built)["mean"] == (0.485, 0.456, 0.406)
    assert text_built.pretrained_cfg["input_size"] == (3, 32, 32)
    assert not hasattr(archspec.create_model("gpt2", depth=1), "pretrained_cfg")


def test_every_declared_config_is_its_timm_reference():
    for alias, spec in reference_names().items():
        declared, reference = data_cfg(shipped_spec(spec)), timm.models.get_pretrained_cfg(alias)
        if reference is None:
            continue
        assert declared, spec
        for key in ("mean", "std", "interpolation", "crop_pct"):
            assert declared[key] == pytest.approx(getattr(reference, key)), (spec, key)


SMALL = """name: tiny
params: {{img: 32}}
{extra}inputs: {{image: [B, 3, img, img]}}
graph:
  - patchify: {{patch: 16, dim: 32}}
  - head: {{kind: classify, classes: 5}}
"""


def spec_file(tmp_path, extra: str, name: str = "tiny.yaml"):
    path = tmp_path / name
    path.write_text(SMALL.format(extra=extra))
    return str(path)


def test_the_key_is_what_timm_reads_and_extends_merges_it_key_by_key(tmp_path):
    base = spec_file(tmp_path, "pretrained_cfg: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25], crop_pct: 1.0}\n",
                     "base.yaml")
    child = tmp_path / "child.yaml"
    child.write_text("extends: base.yaml\nname: child\npretrained_cfg: {crop_pct: 0.875, interpolation: bilinear}\n")
    config = resolve_model_data_config(archspec.create_model(str(child)))
    assert config["mean"] == (0.5, 0.5, 0.5) and config["std"] == (0.25, 0.25, 0.25)  # the base's
    assert config["crop_pct"] == 0.875 and config["interpolation"] == "bilinear"  # the child's over them
    assert resolve_model_data_config(archspec.create_model(base))["crop_pct"] == 1.0


@pytest.mark.parametrize("extra, words", [
    ("pretrained_cfg: {mean: [0.5, 0.5, 0.5], sdt: [0.5, 0.5, 0.5]}\n", ["sdt", "did you mean 'std'"]),
    ("pretrained_cfg: {interpolation: cubic}\n", ["cubic", "bicubic"]),
    ("pretrained_cfg: {std: [0.5, 0.0, 0.5]}\n", ["greater than 0"]),
    ("pretrained_cfg: {mean: [0.5, 0.5, 0.5], std: [0.5]}\n", ["mean has 3 values and std 1"]),
])
def test_a_wrong_config_is_a_located_error_not_a_dropped_key(tmp_path, extra, words):
    with pytest.raises(archspec.SpecError) as caught:
        archspec.check(spec_file(tmp_path, extra))
    text = str(caught.value)
    assert "tiny.yaml:3:" in text, text  # the line of the key
    for word in words:
        assert word in text, (word, text)


def test_the_old_comment_form_is_refused_where_it_stands(tmp_path):
    path = spec_file(tmp_path, "# pretrained_cfg: {mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5]}\n")
    with pytest.raises(archspec.SpecError) as caught:
        archspec.check(path)
    assert "tiny.yaml:3:1" in str(caught.value) and "top-level key" in str(caught.value)
