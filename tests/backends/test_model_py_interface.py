"""The timm-style interface, the same on the built module and in the standalone model.py:
forward_features gives a hierarchical grid model's features as timm's Swin does, [B, H, W, C]
(the tokens still at output_fmt="NLC"), equal to timm's own with the same weights; and
model.py, run where archspec cannot be imported, answers every interface method as the
built module does (issue 20, item 6).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import archspec
from archspec.compiler.backends.source import standalone_source

from tests.conftest import NO_ARCHSPEC, ROOT

SWIN = str(ROOT / "specs" / "swin_t.yaml")
PVT = str(ROOT / "specs" / "pvt_v2_b0.yaml")
VIT = str(ROOT / "specs" / "vit_ti16.yaml")
VIT_GAP = str(ROOT / "specs" / "vit_m16_gap.yaml")
SWIN_SMALL = {"img": 64, "window": 4, "depths": [2, 2, 2, 2], "dims": [16, 32, 64, 128], "heads": [1, 2, 4, 8],
              "classes": 10}
PVT_SMALL = {"img": 64, "depths": [1, 1, 1, 1], "classes": 10}
ATOL = 1e-5


def noisy_state(model: torch.nn.Module) -> dict:
    """The reference's weights with noise, so that constant inits (norms at 1/0) show a wrong mapping."""
    generator = torch.Generator().manual_seed(0)
    return {k: v + 0.02 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v
            for k, v in model.state_dict().items()}


def timm_with_noisy_weights(name: str, **kwargs):
    import timm

    ref = timm.create_model(name, pretrained=False, **kwargs).eval()
    state = noisy_state(ref)
    ref.load_state_dict(state)
    return ref, state


def images(batch: int, size: int) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1))


# -- forward_features in timm's layout ----------------------------------------------------------------


def test_swin_t_features_have_timms_shape():
    import timm

    with torch.device("meta"):  # timm's shapes, computing nothing
        want = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False).forward_features(
            torch.empty(1, 3, 224, 224))
    model = archspec.build(SWIN).eval()
    x = images(1, 224)
    with torch.no_grad():
        got = model.forward_features(x)
        assert got.shape == want.shape == (1, 7, 7, 768)
        tokens = model.forward_features(x, output_fmt="NLC")  # the tokens the head reads, still there
        assert tokens.shape == (1, 49, 768) and torch.equal(tokens, got.flatten(1, 2))
        assert torch.equal(model.forward_head(got), model(x))


def test_small_swin_features_and_head_equal_timms_with_the_same_weights():
    ref, state = timm_with_noisy_weights("swin_tiny_patch4_window7_224", img_size=64, window_size=4,
                                         embed_dim=16, depths=(2, 2, 2, 2), num_heads=(1, 2, 4, 8), num_classes=10)
    model = archspec.build(SWIN, SWIN_SMALL, weights=state).eval()
    x = images(2, 64)
    with torch.no_grad():
        want, got = ref.forward_features(x), model.forward_features(x)
        assert got.shape == want.shape == (2, 2, 2, 128) and (got - want).abs().max() < ATOL
        assert (model.forward_head(got) - ref.forward_head(want)).abs().max() < ATOL
        assert (model.forward_head(got, pre_logits=True) - ref.forward_head(want, pre_logits=True)).abs().max() < ATOL


def test_pvt_v2_features_on_its_grid_and_as_timms_nchw():
    ref, state = timm_with_noisy_weights("pvt_v2_b0", depths=(1, 1, 1, 1), num_classes=10)
    model = archspec.build(PVT, PVT_SMALL, weights=state).eval()
    x = images(1, 64)
    with torch.no_grad():
        want = ref.forward_features(x)  # timm's PVT v2 gives [B, C, H, W], and so does the spec's default
        nchw, nhwc = model.forward_features(x), model.forward_features(x, output_fmt="NHWC")
        assert nhwc.shape == (1, 2, 2, 256) and nchw.shape == want.shape == (1, 256, 2, 2)
        assert (nchw - want).abs().max() < ATOL and torch.equal(nchw, nhwc.permute(0, 3, 1, 2))
        for features in (nchw, nhwc, model.forward_features(x, output_fmt="NLC")):
            assert (model.forward_head(features) - ref.forward_head(want)).abs().max() < ATOL


@pytest.mark.parametrize("spec, overrides, tokens", [(VIT, {"img": 32, "depth": 2}, (2, 5, 192)),
                                                     (VIT_GAP, {"img": 32, "depth": 2}, (2, 4, 512))],
                         ids=["vit_ti16", "vit_m16_gap"])
def test_a_plain_vit_keeps_tokens_as_timms_vit(spec, overrides, tokens):
    model = archspec.build(spec, overrides).eval()
    x = images(2, 32)
    with torch.no_grad():
        features = model.forward_features(x)
        assert features.shape == tokens and torch.equal(features, model.forward_features(x, output_fmt="NLC"))
        assert torch.equal(model.forward_head(features), model(x))


def test_formats_a_model_cannot_give_are_refused_in_words():
    model = archspec.build(VIT, {"img": 32, "depth": 2}).eval()
    x = images(1, 32)
    with pytest.raises(ValueError, match=r"^output_fmt='NHWC': this model's features carry 1 prefix \(class\) "
                                         r"tokens; output_fmt='NLC' gives its tokens"):
        model.forward_features(x, output_fmt="NHWC")
    with pytest.raises(ValueError, match=r"^output_fmt='NWHC': one of NHWC, NCHW, NLC$"):
        model.forward_features(x, output_fmt="NWHC")
    swin = archspec.build(SWIN, SWIN_SMALL).eval()
    with pytest.raises(ValueError, match=r"^forward_head: features of shape \[1, 3, 3, 128\] are neither "
                                         r"\[B, 2, 2, 128\] nor \[B, 128, 2, 2\]"):
        swin.forward_head(torch.zeros(1, 3, 3, 128))


# -- model.py: the same interface, without archspec ------------------------------------------------------

INTERFACE_CALLS = textwrap.dedent("""
    def interface_answers(model, x):
        \"\"\"What every interface method gives (the same script runs on both models).\"\"\"
        model.eval()
        names = [n for n, _ in model.named_parameters()]
        out = {}
        with torch.no_grad():
            out["forward"] = model(x)
            for fmt in (None, "NLC", "NCHW", "NHWC"):
                features = model.forward_features(x, output_fmt=fmt)
                out[f"features {fmt}"] = features
                out[f"head {fmt}"] = model.forward_head(features)
                out[f"pre_logits {fmt}"] = model.forward_head(features, pre_logits=True)
            final, stages = model.forward_intermediates(x)
            out["intermediates"] = [final, *stages]
            out["intermediates nhwc last 2"] = model.forward_intermediates(x, indices=2, output_fmt="NHWC",
                                                                           intermediates_only=True)
        out["num_classes"] = model.num_classes
        out["no_weight_decay"] = sorted(model.no_weight_decay())
        out["group_matcher"] = {n: model.group_matcher()(n) for n in sorted(names)}
        out["group_matcher coarse"] = {n: model.group_matcher(coarse=True)(n) for n in sorted(names)}
        model.train()
        for enable in (True, False):
            model.set_grad_checkpointing(enable)
            model.zero_grad()
            model(x).square().mean().backward()
            out[f"grads checkpointing={enable}"] = {n: p.grad.clone() for n, p in sorted(model.named_parameters())}
        model.eval()
        model.reset_classifier(7)
        out["reset 7"] = (model.num_classes, model(x).shape)
        model.reset_classifier(0)
        out["reset 0"] = (model.num_classes, model(x).shape)
        return out
""")


def test_model_py_answers_every_interface_method_as_the_built_module(tmp_path):
    model = archspec.build(SWIN, SWIN_SMALL, seed=3).eval()
    (tmp_path / "model.py").write_text(standalone_source(model, "swin_t", SWIN))
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    x = images(2, 64)
    torch.save(x, tmp_path / "x.pt")
    threads = f"torch.set_num_threads({torch.get_num_threads()})\n"  # the same summation order as here
    script = NO_ARCHSPEC + "import torch, model\n" + threads + INTERFACE_CALLS + textwrap.dedent(f"""
        standalone = model.{type(model).__name__}()
        standalone.load_state_dict(torch.load("weights.pt", weights_only=True))
        torch.save(interface_answers(standalone, torch.load("x.pt")), "answers.pt")
        assert not [name for name in sys.modules if name.split(".")[0] in ("archspec", "compiler")]
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    namespace = {"torch": torch}
    exec(INTERFACE_CALLS, namespace)  # noqa: S102 - the script above, here on the built module
    expected = namespace["interface_answers"](model, x)
    answers = torch.load(tmp_path / "answers.pt", weights_only=False)
    assert answers.keys() == expected.keys()
    for key in expected:
        assert_same(answers[key], expected[key], key)
    assert answers["features None"].shape == (2, 2, 2, 128) and answers["num_classes"] == 10
    assert answers["reset 7"] == (7, (2, 7)) and answers["reset 0"] == (0, (2, 128))
    assert len(answers["intermediates"]) == 5 and answers["group_matcher"]["patch_embed.proj.weight"] == (0,)


def assert_same(got, want, key: str) -> None:
    if isinstance(want, torch.Tensor):
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-6), key
    elif isinstance(want, dict):
        assert got.keys() == want.keys(), key
        for name in want:
            assert_same(got[name], want[name], f"{key} {name}")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), key
        for a, b in zip(got, want):
            assert_same(a, b, key)
    else:
        assert got == want, key


def test_model_py_features_of_a_model_whose_head_reads_inside_a_stage(tmp_path):
    """PVT v2's head reads stages.3.norm, a node inside the last stage: model.py still has
    forward_features, and it equals the built module's."""
    model = archspec.build(PVT, PVT_SMALL).eval()
    namespace: dict = {}
    exec(compile(standalone_source(model, "pvt", PVT), "model.py", "exec"), namespace)  # noqa: S102 - our output
    standalone = namespace[type(model).__name__]().eval()
    standalone.load_state_dict(model.state_dict())
    x = images(1, 64)
    with torch.no_grad():
        assert torch.equal(standalone.forward_features(x), model.forward_features(x))
        assert standalone.forward_features(x).shape == (1, 256, 2, 2)  # features_format: NCHW, as timm's
