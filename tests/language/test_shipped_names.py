"""`extends:` and `mappings:` name a shipped spec (or a shipped mapping file) from any folder
(issue 35): `extends: llama` or `extends: llama.yaml`; `mappings: [hf_llama]`, `[timm_vit.yaml]`
or `[vit_b16]` (that spec's own mappings). A file of that name beside the spec wins."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.shipped import shipped_mapping_named, shipped_spec_named
from tests.conftest import ROOT, perturb_constants

SPECS = ROOT / "specs"
LLAMA_SMALL = {"vocab": 100, "dim": 32, "hidden": 64, "layers": 1, "heads": 2, "kv_heads": 1, "context": 16}
VIT_SMALL = {"depth": 2, "dim": 64, "heads": 2, "img": 64}


def write(folder, name, text):
    path = folder / name
    path.write_text(text)
    return path


def test_shipped_names():
    assert shipped_spec_named("llama") == str(SPECS / "llama.yaml")
    assert shipped_spec_named("llama.yaml") == str(SPECS / "llama.yaml")
    assert shipped_spec_named("llama.yml") == str(SPECS / "llama.yaml")
    for not_one in ("specs/llama.yaml", "llamaa", "", "..", "mappings", "README.md", "/llama.yaml"):
        assert shipped_spec_named(not_one) is None, not_one
    assert shipped_mapping_named("hf_llama") == str(SPECS / "mappings" / "hf_llama.yaml")
    assert shipped_mapping_named("hf_llama.yaml") == str(SPECS / "mappings" / "hf_llama.yaml")
    for not_one in ("README", "../llama", "hf_lama", "mappings/hf_llama.yaml"):
        assert shipped_mapping_named(not_one) is None, not_one


@pytest.mark.parametrize("target", ["llama", "llama.yaml"])
def test_extends_a_shipped_spec_from_another_folder(tmp_path, target):
    spec = write(tmp_path, "mine.yaml", f"archspec: 1\nextends: {target}\nname: my_llama\nparams: {{layers: 2}}\n")
    mine = archspec.check(str(spec), {k: v for k, v in LLAMA_SMALL.items() if k != "layers"})
    base = archspec.check("llama", {**LLAMA_SMALL, "layers": 2})
    assert mine.name == "my_llama" and mine.params == base.params
    assert any(row.path.startswith("layers.1") for row in mine.nodes)


def test_a_file_beside_the_spec_wins_over_the_shipped_one(tmp_path):
    write(tmp_path, "llama.yaml", "archspec: 1\nname: local\ninputs: {x: [B, 8, 16]}\n"
                                  "graph:\n  - {id: fc, linear: {dim: 4}}\n")
    spec = write(tmp_path, "mine.yaml", "archspec: 1\nextends: llama.yaml\nname: mine\n")
    assert archspec.check(str(spec)).params == 16 * 4 + 4


def test_extends_a_shipped_name_that_is_not_one(tmp_path):
    spec = write(tmp_path, "mine.yaml", "archspec: 1\nextends: lama\nname: mine\n")
    with pytest.raises(archspec.SpecError) as info:
        archspec.check(str(spec))
    d = info.value.diagnostics[0]
    assert d.message == "extends: no such shipped spec lama"
    assert (d.loc.line, d.loc.col) == (2, 10) and "llama" in d.hint


def test_a_missing_file_with_a_folder_is_still_a_missing_file(tmp_path):
    spec = write(tmp_path, "mine.yaml", "archspec: 1\nextends: sub/llama.yaml\nname: mine\n")
    with pytest.raises(archspec.SpecError) as info:
        archspec.check(str(spec))
    assert info.value.diagnostics[0].message == "extends: no such file sub/llama.yaml"


def test_a_shipped_spec_that_extends_another_extends_from_any_folder(tmp_path):
    shipped_child = next(p for p in sorted(SPECS.glob("*.yaml")) if "\nextends:" in p.read_text())
    spec = write(tmp_path, "mine.yaml", f"archspec: 1\nextends: {shipped_child.stem}\nname: mine\n")
    assert archspec.check(str(spec)).params == archspec.check(str(shipped_child)).params


def sources(spec, overrides=None):
    report = archspec.check(str(spec), overrides)
    return report.graph.mapping_sources, report.warnings


@pytest.mark.parametrize("entry", ["hf_llama", "hf_llama.yaml", "llama", "llama.yaml", "mappings/hf_llama.yaml"])
def test_mappings_name_a_shipped_file_or_spec(tmp_path, entry):
    text = (SPECS / "llama.yaml").read_text().replace("mappings: [mappings/hf_llama.yaml]", f"mappings: [{entry}]")
    spec = write(tmp_path, "mine.yaml", text)
    found, warned = sources(spec, LLAMA_SMALL)
    assert not warned
    assert [s.path for s in found] == [str(SPECS / "mappings" / "hf_llama.yaml")] and found[0].shipped


def test_a_mapping_file_beside_the_spec_wins(tmp_path):
    mapping = write(tmp_path, "hf_llama.yaml", (SPECS / "mappings" / "hf_llama.yaml").read_text())
    text = (SPECS / "llama.yaml").read_text().replace("mappings: [mappings/hf_llama.yaml]", "mappings: [hf_llama.yaml]")
    found, _ = sources(write(tmp_path, "mine.yaml", text), LLAMA_SMALL)
    assert [s.path for s in found] == [str(mapping)] and not found[0].shipped


def test_a_mapping_name_that_is_nothing_is_a_warning(tmp_path):
    text = (SPECS / "llama.yaml").read_text().replace("mappings: [mappings/hf_llama.yaml]", "mappings: [hf_lama]")
    found, warned = sources(write(tmp_path, "mine.yaml", text), LLAMA_SMALL)
    assert found[0].path is None and warned[0].message == "no such mapping file: hf_lama"
    assert "shipped spec's name" in warned[0].hint


def test_extending_a_shipped_spec_keeps_its_mappings(tmp_path):
    spec = write(tmp_path, "mine.yaml", "archspec: 1\nextends: llama\nname: mine\n")
    found, warned = sources(spec, LLAMA_SMALL)
    assert not warned and [s.path for s in found] == [str(SPECS / "mappings" / "hf_llama.yaml")]


def test_a_timm_checkpoint_loads_through_a_shipped_spec_name(tmp_path):
    """`mappings: [vit_b16]` in a spec elsewhere: timm's checkpoint loads and the outputs match."""
    timm = pytest.importorskip("timm")
    reference = perturb_constants(timm.create_model("vit_base_patch16_224", pretrained=False, depth=2, embed_dim=64,
                                                    num_heads=2, img_size=64).eval())
    text = (SPECS / "vit_b16.yaml").read_text().replace("mappings/timm_vit.yaml", "vit_b16")
    assert "mappings: [vit_b16]" in text
    spec = write(tmp_path, "mine.yaml", text)
    model = archspec.build(str(spec), VIT_SMALL, weights=reference.state_dict()).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(model(x), reference(x), atol=1e-5)
