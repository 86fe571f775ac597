"""create_model the way timm's users call it (issue 39): timm's keywords set the spec's params
where the spec declares them (its `timm_args:` key), others are Python errors that say why,
pretrained=True is refused in words, and timm's model names are the shipped specs' too."""

from __future__ import annotations

import pytest

import archspec
from archspec.models import reference_names, timm_args

from tests.conftest import ROOT

SMALL = {"depth": 1}


def test_timm_keywords_set_the_declared_params():
    model = archspec.create_model("vit_ti16", img_size=32, in_chans=3, drop_path_rate=0.1, drop_rate=0.0,
                                  global_pool="token", pretrained=False, num_classes=10, **SMALL)
    assert model.meta["archspec_inputs"][0].declared == "B, 3, 32, 32"
    assert model.num_classes == 10
    square = archspec.create_model("vit_ti16", img_size=(32, 32), **SMALL)
    assert square.meta["archspec_inputs"][0].declared == "B, 3, 32, 32"


@pytest.mark.parametrize("spec, keywords, error, words", [
    ("vit_ti16", {"in_chans": 1}, ValueError, "built for in_chans=3 only"),
    ("vit_ti16", {"global_pool": "avg"}, ValueError, "global_pool='token' only"),
    ("vit_ti16", {"img_size": (32, 48)}, ValueError, "square images only"),
    ("vit_ti16", {"pretrained": True}, ValueError, "no model hub"),
    ("vit_ti16", {"pretrained": "yes"}, TypeError, "must be False"),
    ("vit_ti16", {"colour": 1}, TypeError, "unexpected keyword argument 'colour'"),
    ("gpt2", {"img_size": 32}, TypeError, "`img_size` does not apply to gpt2"),
    ("swin_t", {"drop_rate": 0.1}, ValueError, "drop_rate=0.0 only"),
])
def test_a_keyword_the_spec_does_not_take_is_a_python_error(spec, keywords, error, words):
    with pytest.raises(error, match=words) as caught:
        archspec.create_model(spec, **keywords)
    assert not isinstance(caught.value, archspec.SpecError) and "--set" not in str(caught.value)


def test_timm_names_are_aliases_as_archspec_models_lists_them():
    names = reference_names()
    assert names["vit_tiny_patch16_224"] == "vit_ti16" and names["swin_tiny_patch4_window7_224"] == "swin_t"
    assert all(n.islower() for n in names)  # model names, not class names (sam_vit_ti's VisionTransformerSAM)
    model = archspec.create_model("vit_tiny_patch16_224", img_size=32, **SMALL)
    assert type(model).__name__ == "VitTi16"
    assert archspec.check("vit_tiny_patch16_224").params == archspec.check("vit_ti16").params


def test_every_declared_timm_arg_names_a_param_or_a_fixed_value():
    for path in sorted((ROOT / "specs").glob("*.yaml")):
        table = timm_args(str(path))
        if not table:
            continue
        params = archspec.models.spec_param_names(str(path))
        for key, target in table.items():
            assert key in archspec.models.TIMM_KEYWORDS, (path.name, key)
            assert target in params if isinstance(target, str) else set(target) == {"fixed"}, (path.name, key)
