"""Issue 20, item 4 and the small ones of item 8: used the way timm and Hugging Face users work.

- A spec's `mappings:` matter only with --weights (archspec/language/mapping_sources.py): a
  shipped spec copied into another folder checks, its `mappings/NAME.yaml` taken from archspec's
  shipped mappings (the load summary says so); a missing or refused mapping file is a located
  warning at check, the spec's own errors still reported, and an error only when a checkpoint
  fits no naming without it.
- The build's progress says what a user reads (spec nodes and torch modules, not fx nodes).
- FLOPs of a sequence model say at which length they are counted (`per sample at L=1024`).
- Artifacts record the spec as the user named it, or relative to the build folder: never an
  absolute path of the user's machine.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

import archspec
from archspec.cli.main import main
from archspec.compiler.weights.checkpoint import read_state_dict

from tests.conftest import ROOT

SHIPPED = ROOT / "specs"
SMALL_VIT = {"depth": 1, "dim": 32, "heads": 2, "img": 32}
SMALL_VIT_ARGS = [arg for key, value in SMALL_VIT.items() for arg in ("--set", f"{key}={value}")]
TINY = """archspec: 1
name: tiny
inputs:
  x: [B, 8, 16]
graph:
  - id: attn
    attention: {kind: global, heads: 2}
  - id: mlp
    mlp: {hidden: 32}
"""
SEQUENCE = """archspec: 1
name: seq
dims:
  L: [1, 128]
inputs:
  x: [B, L, 16]
graph:
  - id: mlp
    mlp: {hidden: 32}
"""


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def copied(tmp_path, name: str, new_mapping: str | None = None):
    """The shipped spec `name` copied into tmp_path (its `mappings:` entry renamed if asked)."""
    path = tmp_path / f"{name}.yaml"
    shutil.copy(SHIPPED / f"{name}.yaml", path)
    if new_mapping is not None:
        text = path.read_text()
        path.write_text(re.sub(r"mappings: \[[^\]]*\]", f"mappings: [{new_mapping}]", text))
    return path


def timm_named(state: dict) -> dict:
    """Our ViT state dict under timm's names (what specs/mappings/timm_vit.yaml maps back)."""
    def name(key: str) -> str:
        key = key.replace("patch_embed.cls_token", "cls_token").replace("patch_embed.pos_embed", "pos_embed")
        key = re.sub(r"^blocks\.(\d+)\.attn\.norm\.", r"blocks.\1.norm1.", key)
        key = re.sub(r"^blocks\.(\d+)\.mlp\.norm\.", r"blocks.\1.norm2.", key)
        return key.replace("head.fc.", "head.")
    return {name(key): value for key, value in state.items()}


# -- item 4: mappings only when needed ------------------------------------------------------------------


def test_a_shipped_spec_copied_elsewhere_checks_with_its_shipped_mapping(tmp_path, capsys):
    spec = copied(tmp_path, "swin_t")
    report = archspec.check(spec)
    assert [str(p) for p in report.graph.mappings] == [str((SHIPPED / "mappings" / "timm_swin.yaml").resolve())]
    assert report.warnings == []
    code, out, err = run(capsys, "check", spec)
    assert code == 0 and "error" not in err and "total: 28,288,354 params" in out


def test_a_missing_mapping_file_is_a_located_warning_at_check(tmp_path, capsys):
    spec = copied(tmp_path, "swin_t", "mappings/nowhere.yaml")
    code, _, err = run(capsys, "check", spec)
    assert code == 0, err
    assert f"{spec}:72:12: warning: no such mapping file: mappings/nowhere.yaml" in err
    assert "needed only to load a checkpoint" in err and "1 warning" in err


def test_a_missing_mapping_file_does_not_hide_the_specs_real_error(tmp_path):
    spec = copied(tmp_path, "swin_t", "mappings/nowhere.yaml")
    with pytest.raises(archspec.SpecError) as caught:
        archspec.check(spec, {"window": 5})
    assert "window 5 does not divide the 56x56 token grid" in caught.value.message
    assert all("mapping" not in d.message for d in caught.value.diagnostics)


def test_weights_need_a_missing_mapping_only_when_no_naming_fits(tmp_path, capsys):
    spec = copied(tmp_path, "vit_b16", "mappings/nowhere.yaml")
    source = archspec.build(spec, SMALL_VIT, seed=1)
    model = archspec.build(spec, SMALL_VIT, weights=source.state_dict())  # archspec's naming: no mapping needed
    assert torch.equal(model.state_dict()["head.fc.weight"], source.state_dict()["head.fc.weight"])
    torch.save(timm_named(source.state_dict()), tmp_path / "timm.pt")
    code, _, err = run(capsys, "build", spec, *SMALL_VIT_ARGS, "--target", "eager", "--weights", tmp_path / "timm.pt",
                       "-o", tmp_path / "out")
    assert code == 1 and "Traceback" not in err
    assert f"{spec}:57:12: error: no such mapping file: mappings/nowhere.yaml" in err
    assert "fits none of the namings tried without it" in err and "weights do not fit this model" in err


def test_the_load_summary_says_a_shipped_mapping_file_was_taken(tmp_path, capsys):
    spec = copied(tmp_path, "vit_b16")
    source = archspec.build(spec, SMALL_VIT, seed=1)
    torch.save(timm_named(source.state_dict()), tmp_path / "timm.pt")
    code, _, err = run(capsys, "build", spec, *SMALL_VIT_ARGS, "--target", "eager", "--weights", tmp_path / "timm.pt",
                       "-o", tmp_path / "out")
    assert code == 0, err
    assert "in timm vit naming; mapping mappings/timm_vit.yaml is archspec's shipped file (there is none beside " \
           "vit_b16.yaml)" in err
    loaded = read_state_dict(str(tmp_path / "out" / "model.safetensors"))
    assert torch.equal(loaded["blocks.0.attn.norm.weight"], source.state_dict()["blocks.0.attn.norm.weight"])


# -- item 8: the small ones -------------------------------------------------------------------------------


def test_the_build_progress_says_spec_nodes_and_torch_modules_not_fx_nodes(tmp_path, capsys):
    (tmp_path / "tiny.yaml").write_text(TINY)
    code, _, err = run(capsys, "build", tmp_path / "tiny.yaml", "--target", "eager", "-o", tmp_path / "out")
    assert code == 0, err
    assert "fx" not in err
    assert re.search(r"make the torch module \.\.\. [\d.]+ s  2 spec nodes in \d+ torch modules, initial weights "
                     r"from seed 0", err), err


def test_flops_of_a_sequence_model_say_at_which_length(tmp_path, capsys):
    (tmp_path / "seq.yaml").write_text(SEQUENCE)
    report = archspec.check(tmp_path / "seq.yaml")
    assert report.flops_basis == "per sample at L=128"
    assert report.to_json()["flops_at"] == {"L": 128}
    assert report.to_json()["flops_convention"].startswith("per sample at L=128 (batch 1)")
    code, out, _ = run(capsys, "check", tmp_path / "seq.yaml")
    assert code == 0 and "FLOPs per sample at L=128 (multiply-add = 2" in out
    (tmp_path / "tiny.yaml").write_text(TINY)  # no symbolic length: per sample, nothing more
    assert archspec.check(tmp_path / "tiny.yaml").flops_basis == "per sample"
    # a dim declared and used by no input (inherited by a fixed-length spec): "at L=128" was false (MobileBERT trial)
    fixed = archspec.check_text(SEQUENCE.replace("x: [B, L, 16]", "x: [B, 9, 16]"))
    assert fixed.flops_basis == "per sample" and fixed.to_json()["flops_at"] == {}


def test_the_html_report_says_at_which_length(tmp_path):
    from archspec.render.html import report_html

    (tmp_path / "seq.yaml").write_text(SEQUENCE)
    page = report_html(archspec.check(tmp_path / "seq.yaml"))
    assert "FLOPs per sample at L=128 (multiply-add" in page


def test_artifacts_record_the_spec_relative_never_absolute(tmp_path, capsys, monkeypatch):
    (tmp_path / "specs").mkdir()
    spec = tmp_path / "specs" / "tiny.yaml"
    spec.write_text(TINY)
    code, _, err = run(capsys, "build", spec, "--target", "eager", "-o", tmp_path / "out")  # named absolutely
    assert code == 0, err
    info = json.loads((tmp_path / "out" / "report.json").read_text())["build"]
    assert info["spec"] == info["spec_file"] == "../specs/tiny.yaml"  # relative to the build folder
    for name in ("report.json", "manifest.json", "model.py"):
        assert str(tmp_path) not in (tmp_path / "out" / name).read_text(), name
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "build", "specs/tiny.yaml", "--target", "eager", "-o", "builds/tiny")
    assert code == 0, err
    info = json.loads((tmp_path / "builds" / "tiny" / "manifest.json").read_text())["build"]
    assert info["spec"] == "specs/tiny.yaml" and info["spec_file"] == "../../specs/tiny.yaml"  # as the user named it
    assert "# spec: specs/tiny.yaml (sha256" in (tmp_path / "builds" / "tiny" / "model.py").read_text()
