"""The model folder (compiler/pretrained.py): save_pretrained / archspec.from_pretrained, every
build's output folder, safetensors as the weights' format (tied names once), a strict load that
refuses weights that do not fit with a located message, and .pt checkpoints still read."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open

import archspec
from archspec.cli.main import main
from archspec.compiler.pretrained import CARD, CONFIG, WEIGHTS

from tests.conftest import ROOT

TINY_LM = ROOT / "specs" / "examples" / "tiny_lm.yaml"
SMALL = {"vocab": 64, "dim": 32, "depth": 2, "heads": 2}  # tiny_lm made small (tied head)
IDS = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])


def small_lm(seed: int = 0, **more):
    return archspec.build(TINY_LM, {**SMALL, **more}, seed=seed).eval()


def test_save_pretrained_and_from_pretrained_give_the_same_model(tmp_path):
    model = small_lm(seed=3)
    model.save_pretrained(tmp_path / "folder")
    folder = tmp_path / "folder"
    assert {p.name for p in folder.iterdir()} == {CONFIG, WEIGHTS, CARD, "tiny_lm.yaml"}
    config = json.loads((folder / CONFIG).read_text())
    assert config["params"] == {**config["params"], **SMALL} and config["spec"] == "tiny_lm.yaml"
    with safe_open(str(folder / WEIGHTS), "pt") as f:  # the tied output layer is stored once, named as an alias
        assert "head.table.weight" not in f.keys() and f.metadata()["alias:head.table.weight"] == "embed.tokens.weight"
    loaded = archspec.from_pretrained(folder).eval()
    assert loaded.head.table.weight is loaded.embed.tokens.weight  # still tied
    with torch.no_grad():
        assert torch.equal(loaded(IDS), model(IDS))
    assert not torch.equal(small_lm(seed=4)(IDS), model(IDS))  # the weights are what makes them equal


def test_the_model_card_says_params_flops_reference_and_params(tmp_path):
    model = small_lm()
    model.save_pretrained(tmp_path)
    card = (tmp_path / CARD).read_text()
    report = archspec.check(TINY_LM, SMALL)
    assert f"| params | {report.params:,} |" in card
    assert f"| FLOPs | {report.flops:,} per sample at L=512" in card
    assert "GPT-2 layout" in card  # the spec's header, which names what it is
    assert "| `dim` | `32` |" in card and "from_pretrained" in card


def test_a_folder_whose_weights_do_not_fit_is_refused_at_the_tensor_and_its_node(tmp_path):
    small_lm().save_pretrained(tmp_path / "a")
    small_lm(dim=64).save_pretrained(tmp_path / "b")
    shutil.copyfile(tmp_path / "b" / WEIGHTS, tmp_path / "a" / WEIGHTS)  # weights of a wider model
    with pytest.raises(archspec.SpecError) as caught:
        archspec.from_pretrained(tmp_path / "a")
    first = caught.value.diagnostics[0]
    assert first.loc.file.endswith("tiny_lm.yaml") and first.loc.line == 26 and first.path == "embed"
    assert "embed.tokens.weight is [64, 64] there; the spec makes it [64, 32]" in first.message


def test_a_missing_or_extra_tensor_is_refused(tmp_path):
    from archspec.compiler.safetensors_file import write_safetensors

    model = small_lm()
    model.save_pretrained(tmp_path)
    state = dict(model.state_dict())
    state.pop("blocks.1.mlp.fc2.bias")
    state["extra.weight"] = torch.zeros(2)
    write_safetensors(state, str(tmp_path / WEIGHTS))
    with pytest.raises(archspec.SpecError) as caught:
        archspec.from_pretrained(tmp_path)
    messages = [d.message for d in caught.value.diagnostics]
    assert any("holds no tensor blocks.1.mlp.fc2.bias" in m for m in messages)
    assert any("holds extra.weight, which the spec has no place for" in m for m in messages)
    assert caught.value.diagnostics[0].path == "blocks.1.mlp"


def test_config_json_may_name_no_file_outside_the_folder_and_a_changed_spec_is_caught(tmp_path):
    small_lm().save_pretrained(tmp_path)
    config = json.loads((tmp_path / CONFIG).read_text())
    (tmp_path / CONFIG).write_text(json.dumps({**config, "spec": "../elsewhere.yaml"}))
    with pytest.raises(archspec.SpecError, match="lies outside the model folder"):
        archspec.from_pretrained(tmp_path)
    (tmp_path / CONFIG).write_text(json.dumps({**config, "params": {**config["params"], "dim": 48}}))
    with pytest.raises(archspec.SpecError, match="embed.tokens.weight is \\[64, 32\\] there; the spec makes it"):
        archspec.from_pretrained(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(archspec.SpecError, match="holds no config.json"):
        archspec.from_pretrained(tmp_path / "empty")


def test_a_build_folder_is_a_model_folder(tmp_path, capsys):
    out = tmp_path / "out"
    sets = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    assert main(["build", str(TINY_LM), *sets, "--target", "eager", "--seed", "5", "-o", str(out)]) == 0
    assert "model.safetensors" in capsys.readouterr().out and not (out / "weights.pt").exists()
    card = (out / CARD).read_text()
    assert "| built for | eager |" in card
    loaded = archspec.from_pretrained(out).eval()
    with torch.no_grad():
        assert torch.equal(loaded(IDS), small_lm(seed=5)(IDS))


def test_weights_from_a_safetensors_file_with_aliases_and_from_a_pt_file_still_load(tmp_path):
    model = small_lm(seed=7)
    model.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    with torch.no_grad():
        for path in (tmp_path / WEIGHTS, tmp_path / "weights.pt"):
            assert torch.equal(archspec.build(TINY_LM, SMALL, weights=path).eval()(IDS), model(IDS))


def test_a_bf16_model_comes_back_in_bf16(tmp_path):
    model = small_lm(seed=2).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / CONFIG).read_text())["dtype"] == "bfloat16"
    loaded = archspec.from_pretrained(tmp_path).eval()
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_the_folder_holds_the_mapping_files_the_spec_names_from_its_folder(tmp_path):
    """The DPT and GLM-4 trials: a build folder's copy of the spec warned "no such mapping file"
    (its mapping stayed behind); the folder's spec loads the reference checkpoint as the original."""
    home = tmp_path / "home"
    (home / "maps").mkdir(parents=True)
    shutil.copy(ROOT / "specs" / "mappings" / "hf_gpt2.yaml", home / "maps" / "mine.yaml")
    spec = home / "lm.yaml"
    spec.write_text(TINY_LM.read_text() + "\nmappings: [maps/mine.yaml, timm_vit]\n")
    model = archspec.build(spec, SMALL, seed=1)
    model.save_pretrained(tmp_path / "folder")
    assert (tmp_path / "folder" / "maps" / "mine.yaml").read_text() == (home / "maps" / "mine.yaml").read_text()
    assert not (tmp_path / "folder" / "timm_vit.yaml").exists()  # a shipped mapping is found by name anywhere
    assert archspec.check(tmp_path / "folder" / "lm.yaml", SMALL).warnings == []


def test_a_loaded_folder_is_in_eval_mode_as_hugging_faces(tmp_path):
    """The SegFormer trial: from_pretrained gave a model in training mode (dropout and drop_path
    on), two calls on one input 2.1 apart, where Hugging Face's from_pretrained gives eval mode."""
    small_lm(seed=3).train().save_pretrained(tmp_path / "folder")
    loaded = archspec.from_pretrained(tmp_path / "folder")
    assert not loaded.training and not any(m.training for m in loaded.modules())


def test_a_rebuild_replaces_the_mapping_copies_and_keeps_an_edited_one(tmp_path, capsys):
    """The ERNIE 4.5 trial: the build's mappings/ folder was not in manifest.json, so every
    rebuild into the folder kept the last one's as mappings.kept, mappings.kept.kept, ..."""
    home = tmp_path / "home"
    (home / "maps").mkdir(parents=True)
    shutil.copy(ROOT / "specs" / "mappings" / "hf_gpt2.yaml", home / "maps" / "mine.yaml")
    spec = home / "lm.yaml"
    spec.write_text(TINY_LM.read_text() + "\nmappings: [maps/mine.yaml]\n")
    out = tmp_path / "out"
    sets = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    build = ["build", str(spec), *sets, "--target", "eager", "-o", str(out)]
    for _ in range(2):
        assert main(build) == 0
        said = capsys.readouterr()
        assert "kept your" not in said.out + said.err
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("maps")) == ["maps"]
    manifest = json.loads((out / "manifest.json").read_text())["files"]
    assert "maps/mine.yaml" in manifest and manifest["maps/mine.yaml"]["bytes"] == (out / "maps" / "mine.yaml").stat().st_size
    (out / "maps" / "mine.yaml").write_text("# my own edit\n" + (home / "maps" / "mine.yaml").read_text())
    assert main(build) == 0
    said = capsys.readouterr()
    assert "kept your maps as maps.kept" in said.out + said.err
    assert (out / "maps.kept" / "mine.yaml").read_text().startswith("# my own edit")
    assert (out / "maps" / "mine.yaml").read_text() == (home / "maps" / "mine.yaml").read_text()
