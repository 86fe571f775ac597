"""Models by name and fine-tuning the timm way (issue 20, items 1 and 3).

The shipped specs go by name wherever a spec's path goes (archspec.check/build/create_model,
every command's SPEC), a file of that name winning; an unknown name names the closest ones;
`archspec models` lists them; a wheel carries them (archspec/specs/). A model built for another
number of classes than its checkpoint's loads every tensor but the classifier (which the head's
CLASSIFIER names, not a name pattern), says so, and any other mismatch stays an error; against
timm, create_model("vit_ti16", num_classes=10, weights=...) is timm's model but for the head.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import archspec
from archspec.cli import EXIT_OK, EXIT_USAGE, main

from tests.conftest import ROOT, perturb_constants, scratch

SMALL_VIT = {"img": 32, "depth": 1}
SHIPPED = ROOT / "specs"

# A classifier whose head node is not called `head`, beside an MLP node that is: which tensors
# are the classifier must come from the head op, never from names.
ODD_NAMES = """\
archspec: 1
name: odd_names
params: {classes: 5, ratio: 2.0}
inputs:
  image: [B, 3, 32, 32]
graph:
  - id: embed
    patchify: {patch: 16, dim: 32, pos: learned}
  - id: head
    mlp: {ratio: "${ratio}"}
  - id: out
    head: {kind: classify, pool: mean, classes: "${classes}"}
"""


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """Run from a folder that holds no spec (names must come from the shipped folder)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- names -----------------------------------------------------------------------------------------
def test_list_models_is_fnmatch_over_the_shipped_names_sorted():
    assert archspec.list_models("swin*") == ["swin_b", "swin_s", "swin_t", "swinv2_t"]
    every = archspec.list_models()
    assert every == sorted(p.stem for p in SHIPPED.glob("*.yaml"))
    assert "vit_ti16" in every and "timm_vit" not in every and "tiny_lm" not in every  # no mappings, no examples
    assert archspec.list_models("nothing*") == []


def test_the_api_takes_a_shipped_name_where_it_takes_a_path_and_a_file_of_that_name_wins(elsewhere):
    assert archspec.check("vit_ti16").params == 5_717_416
    model = archspec.build("vit_ti16", overrides=SMALL_VIT)
    assert model.facts.file == str(SHIPPED / "vit_ti16.yaml")
    (elsewhere / "vit_ti16").write_text(ODD_NAMES)
    assert archspec.check("vit_ti16").name == "odd_names"


def test_an_unknown_name_names_the_closest_shipped_ones(elsewhere, capsys):
    with pytest.raises(archspec.SpecError, match=r"no such file or shipped spec: swin_tt; did you mean swin_t"):
        archspec.check("swin_tt")
    code, out, err = run(capsys, "check", "swin_tt")
    assert code == EXIT_USAGE and out == ""
    assert "no such file or shipped spec: swin_tt; did you mean swin_t" in err and "`archspec models`" in err
    code, _, err = run(capsys, "check", "swin_t.yaml")  # a path: still no such file, with the way to name it
    assert code == EXIT_USAGE and "no such file: swin_t.yaml; the shipped spec of that name is given by its " \
                                  "name alone: swin_t" in err


@pytest.mark.parametrize("argv", [["check", "vit_ti16"], ["schema", "vit_ti16"],
                                  ["graph", "vit_ti16", "-o", "g.svg"]])
def test_every_command_takes_a_shipped_name_and_says_which_spec_it_used(elsewhere, capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == EXIT_OK, err
    assert err.splitlines()[0] == f"vit_ti16: the shipped spec {SHIPPED / 'vit_ti16.yaml'}"


def test_train_takes_a_shipped_name(elsewhere, capsys):
    import argparse

    from archspec.train import add_arguments, options_of

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = options_of(parser.parse_args(["vit_ti16", "--steps", "1"]))
    assert options.spec == str(SHIPPED / "vit_ti16.yaml")
    assert capsys.readouterr().err.startswith("vit_ti16: the shipped spec ")


def test_archspec_models_lists_name_params_inputs_and_paper(capsys):
    code, out, err = run(capsys, "models", "swin*")
    assert code == EXIT_OK, err
    rows = out.splitlines()
    assert rows[0].split()[:3] == ["name", "params", "inputs"]
    swin_t = next(r for r in rows if r.startswith("swin_t "))
    for cell in ("28,288,354", "image [B, 3, 224, 224]", "Liu et al., ICCV 2021", "timm swin_tiny_patch4_window7_224"):
        assert cell in swin_t
    code, out, _ = run(capsys, "models", "vit_ti16", "--json")
    (record,) = json.loads(out)
    assert (record["name"], record["params"], record["paper"]) == ("vit_ti16", 5_717_416, "Touvron et al., ICML 2021")
    code, out, _ = run(capsys, "models", "gptj", "--json")  # two authors: no "et al."
    assert json.loads(out)[0]["paper"] == "Wang and Komatsuzaki, 2021"
    code, _, err = run(capsys, "models", "swin_tt")
    assert code == EXIT_USAGE and "no shipped spec matches 'swin_tt'; did you mean swin_t" in err


# -- fine-tuning: every weight but the classifier ----------------------------------------------------
def test_build_with_other_classes_loads_all_but_the_classifier_and_says_so(caplog):
    state = archspec.build("vit_ti16", overrides=SMALL_VIT, seed=1).state_dict()
    fresh = archspec.build("vit_ti16", overrides={**SMALL_VIT, "classes": 10}).state_dict()
    with caplog.at_level(logging.WARNING, logger="archspec"):
        model = archspec.build("vit_ti16", overrides={**SMALL_VIT, "classes": 10}, weights=state)
    loaded = model.state_dict()
    for key, value in loaded.items():
        expected = fresh[key] if key.startswith("head.fc.") else state[key]  # the classifier keeps its init
        assert torch.equal(value, expected), key
    (line,) = [r.getMessage() for r in caplog.records]
    assert "left the classifier at its initialisation (head.fc.weight (1000, 192) -> (10, 192), head.fc.bias " \
           "(1000,) -> (10,))" in line


def test_create_model_num_classes_follows_timm(tmp_path):
    checkpoint = tmp_path / "vit.pt"
    torch.save(archspec.build("vit_ti16", overrides=SMALL_VIT, seed=1).state_dict(), checkpoint)
    model = archspec.create_model("vit_ti16", weights=checkpoint, num_classes=10, **SMALL_VIT)
    assert model.num_classes == 10 and model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    features = archspec.create_model("vit_ti16", weights=checkpoint, num_classes=0, **SMALL_VIT)
    assert features(torch.randn(2, 3, 32, 32)).shape == (2, 192)  # no classifier: pooled features
    with pytest.raises(archspec.UsageError, match="`num_classes` sets the spec's `classes` param"):
        archspec.create_model("gpt2", num_classes=10)
    with pytest.raises(TypeError, match="`num_classes` must be an int"):
        archspec.create_model("vit_ti16", num_classes="10")


def test_num_classes_sets_the_classes_of_a_head_written_from_other_words():
    """The EfficientViT trial: levit_128s (its heads a BatchNorm and a linear, no classify head)
    refused num_classes=10, though it declares timm's num_classes as its `classes` param."""
    model = archspec.create_model("levit_128s", num_classes=10, img_size=64).eval()
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 10)
    with pytest.raises(archspec.UsageError, match="`num_classes=0` removes a classifier head"):
        archspec.create_model("levit_128s", num_classes=0, img_size=64)


def test_a_headless_checkpoint_loads_with_num_classes_as_timms_and_not_without(tmp_path, caplog):
    """timm's num_classes=0 saves no classifier (DINOv2's checkpoints): create_model with
    num_classes=0 gives its features, with N a new classifier said on the log; without
    num_classes (or through build) a missing classifier stays an error, never a random one
    passed off as the checkpoint's."""
    headless = {k: v for k, v in archspec.build("vit_ti16", overrides=SMALL_VIT, seed=1).state_dict().items()
                if not k.startswith("head.fc.")}
    whole = archspec.build("vit_ti16", overrides=SMALL_VIT, seed=1).eval()
    x = torch.randn(2, 3, 32, 32)
    features = archspec.create_model("vit_ti16", weights=headless, num_classes=0, **SMALL_VIT).eval()
    assert torch.equal(features(x), whole.forward_head(whole.forward_features(x), pre_logits=True))
    with caplog.at_level(logging.WARNING, logger="archspec"):
        tuned = archspec.create_model("vit_ti16", weights=headless, num_classes=10, **SMALL_VIT).eval()
    assert tuned(x).shape == (2, 10)
    assert "head.fc.weight (not in the checkpoint)" in caplog.text and "the checkpoint has none" in caplog.text
    for load in (lambda: archspec.create_model("vit_ti16", weights=headless, **SMALL_VIT),
                 lambda: archspec.build("vit_ti16", overrides=SMALL_VIT, weights=headless)):
        with pytest.raises(archspec.SpecError, match=r"2 missing \(head.fc.weight, head.fc.bias\)"):
            load()


def test_positions_of_another_size_are_resampled_and_said_on_the_log_in_python(caplog):
    state = archspec.build("vit_ti16", overrides=SMALL_VIT).state_dict()
    with caplog.at_level(logging.INFO, logger="archspec"):
        archspec.build("vit_ti16", overrides={**SMALL_VIT, "img": 48}, weights=state)
    assert "resampled 1 to this model's size as timm's loading does (position tables bicubic with antialias, relative-position tables on BEiT's grid: patch_embed.pos_embed (1, 5, 192) -> (1, 10, 192))" in caplog.text


def test_the_classifier_is_what_the_head_op_says_not_a_name(tmp_path):
    spec = tmp_path / "odd.yaml"
    spec.write_text(ODD_NAMES)
    state = archspec.build(spec, seed=1).state_dict()
    model = archspec.build(spec, overrides={"classes": 7}, weights=state)  # out.fc is the classifier
    assert torch.equal(model.state_dict()["head.fc1.weight"], state["head.fc1.weight"])
    with pytest.raises(archspec.SpecError) as info:  # `head` is an MLP here: its shape is no classifier's
        archspec.build(spec, overrides={"classes": 7, "ratio": 4.0}, weights=state)
    assert "head.fc1.weight" in str(info.value) and "out.fc" not in str(info.value)


def test_the_command_line_fine_tunes_with_set_classes_and_weights(tmp_path, capsys, elsewhere):
    checkpoint = tmp_path / "vit.pt"
    torch.save(archspec.build("vit_ti16", overrides=SMALL_VIT).state_dict(), checkpoint)
    code, out, err = run(capsys, "build", "vit_ti16", "--set", "img=32", "--set", "depth=1", "--set", "classes=10",
                         "--weights", str(checkpoint), "--target", "eager", "-o", str(tmp_path / "out"))
    assert code == EXIT_OK, err
    assert "left the classifier at its initialisation (head.fc.weight (1000, 192) -> (10, 192)" in out + err


@pytest.fixture(scope="module")
def timm_vit_tiny_state(request, tmp_path_factory):
    """timm's vit_tiny_patch16_224 with every parameter perturbed (no two models agree by their
    initialisation), saved as a checkpoint file."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    reference = perturb_constants(timm.create_model("vit_tiny_patch16_224", pretrained=False).eval())
    with torch.no_grad():
        generator = torch.Generator().manual_seed(1)
        for p in reference.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=generator))
    path = scratch(request, tmp_path_factory, "timm") / "vit_tiny.pth"
    torch.save(reference.state_dict(), path)
    return path


def test_create_model_with_new_classes_matches_timm_on_all_but_the_head(timm_vit_tiny_state):
    timm = pytest.importorskip("timm")
    state = torch.load(timm_vit_tiny_state, weights_only=True)
    ours = archspec.create_model("vit_ti16", weights=timm_vit_tiny_state, num_classes=10).eval()
    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10).eval()
    missing, unexpected = reference.load_state_dict({k: v for k, v in state.items() if not k.startswith("head.")},
                                                    strict=False)
    assert sorted(missing) == ["head.bias", "head.weight"] and not unexpected
    with torch.no_grad():
        reference.head.weight.copy_(ours.head.fc.weight)  # the one part each initialised its own way
        reference.head.bias.copy_(ours.head.fc.bias)
        x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(2))
        theirs, mine = reference(x), ours(x)
    assert mine.shape == (2, 10)
    assert (mine - theirs).abs().max().item() < 1e-4
    assert not torch.equal(ours.head.fc.weight[:10], state["head.weight"][:10])  # the checkpoint's head left out


def test_forward_intermediates_are_timms_final_features_and_stages(timm_vit_tiny_state):
    """timm's first element is the final (normed) features, not the logits; NLC gives each
    stage's tokens without the class token; an unknown format is an error, not NHWC."""
    timm = pytest.importorskip("timm")
    ours = archspec.create_model("vit_ti16", weights=timm_vit_tiny_state).eval()
    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
    reference.load_state_dict(torch.load(timm_vit_tiny_state, weights_only=True))
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        for fmt in ("NCHW", "NLC"):
            (theirs, their_stages), (mine, my_stages) = (m.forward_intermediates(x, indices=2, output_fmt=fmt)
                                                         for m in (reference, ours))
            assert mine.shape == theirs.shape == (2, 197, 192) and (mine - theirs).abs().max() < 1e-4
            for a, b in zip(my_stages, their_stages):
                assert a.shape == b.shape and (a - b).abs().max() < 1e-4, fmt
        for options in ({"norm": True}, {"norm": True, "stop_early": True, "intermediates_only": True}):
            theirs, mine = (m.forward_intermediates(x, indices=[0, 11], **options) for m in (reference, ours))
            theirs, mine = (theirs[1], mine[1]) if isinstance(theirs, tuple) else (theirs, mine)
            for a, b in zip(mine, theirs):  # each block's tokens through the final norm, as timm's
                assert a.shape == b.shape and (a - b).abs().max() < 1e-4, options
    with pytest.raises(ValueError, match="output_fmt='garbage': one of NHWC, NCHW, NLC"):
        ours.forward_intermediates(x, output_fmt="garbage")


def test_forward_intermediates_norm_applies_to_the_last_swin_stage_as_timms():
    """timm's Swin applies its final norm to the last stage only (the only one of its width)."""
    timm = pytest.importorskip("timm")
    small = {"img": 64, "window": 4, "depths": [1, 1, 1, 1], "dims": [16, 32, 64, 128], "heads": [1, 2, 4, 8],
             "classes": 10}
    reference = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=64, window_size=4,
                                  depths=(1, 1, 1, 1), embed_dim=16, num_heads=(1, 2, 4, 8), num_classes=10).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    ours = archspec.build(str(ROOT / "specs" / "swin_t.yaml"), small, weights=reference.state_dict()).eval()
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        theirs, mine = (m.forward_intermediates(x, norm=True, intermediates_only=True) for m in (reference, ours))
        plain = ours.forward_intermediates(x, intermediates_only=True)
    for a, b in zip(mine, theirs):
        assert a.shape == b.shape and (a - b).abs().max() < 1e-4
    assert torch.equal(mine[0], plain[0]) and not torch.allclose(mine[3], plain[3])


# -- the wheel ---------------------------------------------------------------------------------------
def test_a_built_wheel_ships_the_specs_and_checks_one_by_name(tmp_path):
    """Build the wheel from a copy of the sources (pip builds in the tree it is given), unpack it
    and run `archspec check swin_t` from another folder with only the wheel's files importable."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("archspec", "compiler", "specs"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "wheel"), "-q"], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("archspec_compiler-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "installed")
    assert {f"archspec/specs/{p.name}" for p in SHIPPED.glob("*.yaml")} <= names
    assert {f"archspec/specs/mappings/{p.name}" for p in (SHIPPED / "mappings").glob("*.yaml")} <= names
    where = tmp_path / "elsewhere"
    where.mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "installed")}
    checked = subprocess.run([sys.executable, "-m", "archspec", "check", "vit_ti16"], cwd=where, env=env,
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
    shipped = Path(tmp_path / "installed" / "archspec" / "specs" / "vit_ti16.yaml")
    assert checked.stderr.splitlines()[0] == f"vit_ti16: the shipped spec {shipped}"  # extends vit_b16 there too
    assert "5,717,416 params" in checked.stdout


def test_positions_resampled_from_another_naming_are_warned(tmp_path, caplog):
    """The VitDet trial: Hugging Face's VitDet resizes its position table at every forward without
    antialias, and a load resizing it timm's way (0.1 off there) said so at INFO only."""
    state = {f"model.{k}": v for k, v in archspec.build("vit_ti16", overrides=SMALL_VIT).state_dict().items()}
    mapping = tmp_path / "other.yaml"
    mapping.write_text("archspec: 1\nname: other naming\nrules:\n  - rename: {'^model\\.': ''}\n")
    with caplog.at_level(logging.INFO, logger="archspec"):
        archspec.build("vit_ti16", overrides={**SMALL_VIT, "img": 48}, weights=state, mapping=str(mapping))
    (record,) = [r for r in caplog.records if "resampled 1" in r.getMessage() and r.levelno == logging.WARNING]
    assert "and the checkpoint's naming is 'other naming'" in record.getMessage()
    (said,) = [r for r in caplog.records if r.levelno == logging.INFO]  # what loaded, the resampling with it
    assert "20 tensors in other naming naming; warning: resampled 1" in said.getMessage()


def test_the_command_line_says_it_too(tmp_path):
    """The DINOv2 trial's `archspec build --weights` said only the INFO line (timm's resampling) and
    report.json nothing, where its Python load warned (Hugging Face's Dinov2Model resizes without
    antialias: 1.2e-2 to 4.5e-2 off): the warning is the load's, on every path."""
    state = {f"model.{k}": v for k, v in archspec.build("vit_ti16", overrides=SMALL_VIT).state_dict().items()}
    torch.save(state, tmp_path / "w.pt")
    mapping = tmp_path / "other.yaml"
    mapping.write_text("archspec: 1\nname: other naming\nrules:\n  - rename: {'^model\\.': ''}\n")
    out = tmp_path / "built"
    sets = [a for k, v in {**SMALL_VIT, "img": 48}.items() for a in ("--set", f"{k}={v}")]
    assert main(["build", "vit_ti16", *sets, "--weights", str(tmp_path / "w.pt"), "--map", str(mapping),
                 "-o", str(out)]) == 0
    (warning,) = json.loads((out / "report.json").read_text())["build"]["weights_loaded"]["warnings"]
    assert warning.startswith("resampled 1") and "its own model may resize another way" in warning
