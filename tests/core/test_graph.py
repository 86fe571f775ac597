"""`archspec graph` and archspec/render/: the SVG is well-formed with the expected clusters,
boxes, edge labels and errors; DOT and Mermaid have their structure; report.html is one
self-contained page."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import archspec
from archspec.pipeline import attempt_file, attempt_text
from archspec.render.dot import to_dot
from archspec.render.html import report_html, stage_figures
from archspec.render.mermaid import to_markdown, to_mermaid
from archspec.render.picture import picture
from archspec.render.svg import to_svg

ROOT = Path(__file__).resolve().parents[2]
SWIN = str(ROOT / "specs" / "swin_t.yaml")
SVG = "{http://www.w3.org/2000/svg}"
SHIPPED = sorted((ROOT / "specs").glob("*.yaml")) + sorted((ROOT / "specs" / "examples").glob("*.yaml"))


def svg_of(path: str, overrides=None, expand=False) -> ET.Element:
    attempt = attempt_file(path, overrides)
    return ET.fromstring(to_svg(picture(attempt.graph, attempt.error, expand=expand)).encode())


def groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if cls in (g.get("class") or "").split()]


def texts(element: ET.Element) -> list[str]:
    return [t.text or "" for t in element.iter(f"{SVG}text")]


def cluster_heads(root: ET.Element) -> dict[str, str]:
    return {g.get("data-path"): texts(g)[0] for g in groups(root, "cluster-head")}


# -- the picture -------------------------------------------------------------------------------------
def test_swin_svg_groups_stages_and_collapses_repeats():
    root = svg_of(SWIN)
    heads = cluster_heads(root)
    assert heads["stages"] == "stages \u00b7 repeat, 4 copies"
    assert {f"stages.{s}" for s in range(4)} <= heads.keys()
    assert heads["stages.2.blocks"] == "stages.2.blocks \u00d76 \u00b7 swin_block"
    nodes = {g.get("data-path"): g for g in groups(root, "node")}
    assert "stages.2.blocks.0.attn" in nodes and "stages.2.blocks.5.attn" not in nodes
    assert nodes["stages.2.blocks.0.attn"].get("data-op") == "attention/window | shifted"
    assert "594K params \u00b7 246M FLOPs each" in texts(nodes["stages.2.blocks.0.attn"])
    figures = [texts(g)[1] for g in groups(root, "cluster-head") if g.get("data-path") == "stages.2.blocks"][0]
    assert figures == "10.7M params \u00b7 4.25G FLOPs"  # the six copies together


def test_a_run_of_alike_copies_is_drawn_once_among_copies_that_differ():
    """ConViT's twelve blocks differ (the class token comes in at block 10): blocks 0-9 are
    alike and drawn once, `blocks.0-9 ×10`, their figures summed; 10 and 11 on their own; no
    edge joins two copies of the run."""
    root = svg_of(ROOT / "specs" / "convit_tiny.yaml")
    heads = cluster_heads(root)
    assert heads["blocks"] == "blocks \u00b7 repeat, 12 copies"
    assert heads["blocks.0"] == "blocks.0-9 \u00d710 \u00b7 convit_block"
    assert heads["blocks.10"] == "blocks.10 \u00b7 convit_block" and heads["blocks.11"] == "blocks.11 \u00b7 convit_block"
    assert not any(key.startswith(tuple(f"blocks.{i}." for i in range(1, 10))) for key in heads)
    nodes = {g.get("data-path"): g for g in groups(root, "node")}
    assert "blocks.0.mlp" in nodes and "blocks.9.mlp" not in nodes and "blocks.10.cls" in nodes
    assert "296K params \u00b7 116M FLOPs each" in texts(nodes["blocks.0.mlp"])
    figures = [texts(g)[1] for g in groups(root, "cluster-head") if g.get("data-path") == "blocks.0"][0]
    assert figures == "4.44M params \u00b7 2.04G FLOPs"  # the ten copies together: 10 x 444,308
    edges = {(g.get("data-from"), g.get("data-to")) for g in groups(root, "edge")}
    assert ("blocks.0.mlp", "blocks.10.cls") in edges and ("blocks.0.mlp", "blocks.0.attn.norm") not in edges


def test_inputs_outputs_and_edge_labels():
    root = svg_of(SWIN)
    nodes = {g.get("data-path"): g for g in groups(root, "node")}
    assert "input" in nodes["image"].get("class") and "output" in nodes["output:output"].get("class")
    edges = {(g.get("data-from"), g.get("data-to")) for g in groups(root, "edge")}
    assert ("image", "patch_embed") in edges and ("head", "output:output") in edges
    assert ("stages.0.blocks.0.mlp", "stages.1.downsample") in edges
    assert not any(a == b for a, b in edges)
    labels = {t.text for t in root.iter(f"{SVG}text") if t.get("class") == "edge-label"}
    assert {"[B, 3, 224, 224]", "[B, 3136, 96] 56x56", "[B, 49, 768] 7x7", "[B, 1000]"} <= labels
    header = texts(groups(root, "header")[0])
    assert header[:2] == ["swin_t", "image [B, 3, 224, 224] -> output [B, 1000]"]
    assert header[2] == "28.3M params \u00b7 8.98G FLOPs in total \u00b7 checks"


def test_expand_draws_every_copy():
    root = svg_of(SWIN, expand=True)
    paths = {g.get("data-path") for g in groups(root, "node")}
    assert {f"stages.2.blocks.{b}.attn" for b in range(6)} <= paths
    assert cluster_heads(root)["stages.2.blocks.5"] == "stages.2.blocks.5 \u00b7 swin_block"
    ops = {g.get("data-path"): g.get("data-op") for g in groups(root, "node")}
    assert ops["stages.0.blocks.0.attn"] == "attention/window" and ops["stages.0.blocks.1.attn"] == "attention/shifted"


def test_a_failing_spec_is_drawn_with_its_error_on_the_node():
    root = svg_of(SWIN, {"img": 256})
    failed = groups(root, "error")
    assert [g.get("data-path") for g in failed if "node" in g.get("class")] == ["stages.0.blocks.0.attn"]
    lines = " ".join(texts(failed[0]))
    assert "window 7 does not divide the 64x64 token grid" in lines and "an input of 224 or 448" in lines
    skipped = {g.get("data-path") for g in groups(root, "skipped")}
    assert "head" in skipped and "patch_embed" not in skipped
    assert "1 error" in texts(groups(root, "header")[0])[2]


def test_a_spec_that_does_not_expand_is_drawn_as_its_errors():
    text = (ROOT / "specs" / "vit_b16.yaml").read_text().replace("mlp:", "mpl:", 1)
    attempt = attempt_text(text, name="vit_typo.yaml")
    assert attempt.graph is None and attempt.error is not None
    root = ET.fromstring(to_svg(picture(None, attempt.error, name="vit_typo")).encode())
    header = " ".join(texts(groups(root, "header")[0]))
    assert "mpl" in header and "error" in header


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_spec_draws_in_every_format(path):
    attempt = attempt_file(str(path))
    assert attempt.error is None
    pic = picture(attempt.graph)
    root = ET.fromstring(to_svg(pic).encode())
    drawn = {g.get("data-path") for g in groups(root, "node")}
    assert {n.name for n in attempt.graph.inputs()} <= drawn
    assert {f"output:{o.name}" for o in attempt.graph.outputs} <= drawn
    assert to_dot(pic).startswith("digraph") and to_mermaid(pic).startswith("flowchart TB")


# -- DOT and Mermaid ---------------------------------------------------------------------------------
def test_dot_structure():
    attempt = attempt_file(SWIN)
    dot = to_dot(picture(attempt.graph))
    assert dot.count("{") == dot.count("}")
    assert 'subgraph "cluster_stages.2.blocks" {' in dot
    assert 'label="stages.2.blocks \u00d76 \u00b7 swin_block\\n10.7M params \u00b7 4.25G FLOPs"' in dot
    assert '"image" -> "patch_embed" [label="[B, 3, 224, 224]"];' in dot
    assert re.search(r'"stages\.0\.blocks\.0\.mlp" -> "stages\.1\.downsample" \[label="\[B, 3136, 96\] 56x56"\]', dot)


def test_dot_marks_the_error():
    attempt = attempt_file(SWIN, {"img": 256})
    dot = to_dot(picture(attempt.graph, attempt.error))
    line = next(s for s in dot.splitlines() if s.strip().startswith('"stages.0.blocks.0.attn" ['))
    assert 'color="#cf222e"' in line and "window 7 does not divide" in line


def test_mermaid_structure():
    attempt = attempt_file(SWIN, {"img": 256})
    text = to_mermaid(picture(attempt.graph, attempt.error))
    lines = text.splitlines()
    assert lines[0] == "flowchart TB"
    assert sum(s.strip().startswith("subgraph ") for s in lines) == sum(s.strip() == "end" for s in lines) == 9
    assert any(re.fullmatch(r'\s+n\d+ -->\|"\[B, 3, 256, 256\]"\| n\d+', s) for s in lines)
    error_class = next(s for s in lines if s.strip().startswith("class ") and s.endswith(" error"))
    failed = next(s for s in lines if "window 7 does not divide" in s).strip().split("[")[0]
    assert failed in error_class.split()[1].split(",")
    assert all('"' not in s.split('"', 1)[1].rsplit('"', 1)[0] for s in lines if s.count('"') >= 2
               and "-->" not in s), "quotes inside labels are escaped"
    assert to_markdown(picture(attempt.graph, attempt.error)).count("```") == 2


# -- report.html -------------------------------------------------------------------------------------
def test_report_html_is_self_contained():
    report = archspec.check(SWIN)
    page = report_html(report)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not re.search(r"<script|<link|@import|url\((?!#)|https?://(?!www\.w3\.org/2000/svg)", page)
    assert page.count("<svg") == 2  # the graph and the per-stage chart
    assert "stages.2.blocks.5.mlp" in page  # the per-node table lists every node
    assert "28,288,354" in page
    stages = [name for name, _, _ in stage_figures(picture(report.graph))]
    assert stages == ["patch_embed", "stages.0", "stages.1", "stages.2", "stages.3", "norm", "head"]
    for name in stages:
        assert f'data-stage="{name}"' in page
    body = page.split("<body>", 1)[1].split("</body>", 1)[0]
    ET.fromstring(f"<body>{body}</body>".replace("&nbsp;", " "))  # well-formed: every tag closed


# -- the command -------------------------------------------------------------------------------------
def run_cli(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "archspec", *args], capture_output=True, text=True, cwd=cwd)


def test_graph_command_writes_each_format(tmp_path):
    for name in ("swin.svg", "swin.dot", "swin.gv", "swin.mmd", "swin.md", "swin.html"):
        out = tmp_path / name
        done = run_cli("graph", SWIN, "-o", str(out))
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"wrote {out}"
        assert out.stat().st_size > 1000
    ET.parse(tmp_path / "swin.svg")


def test_graph_command_on_a_failing_spec(tmp_path):
    out = tmp_path / "bad.svg"
    done = run_cli("graph", SWIN, "--set", "img=256", "-o", str(out))
    assert done.returncode == 1 and "window 7 does not divide" in done.stderr and "Traceback" not in done.stderr
    assert "with 1 error drawn" in done.stdout
    assert groups(ET.parse(out).getroot(), "error")


def test_graph_command_usage_errors(tmp_path):
    done = run_cli("graph", SWIN, "-o", str(tmp_path / "x.png"))
    assert done.returncode == 2 and ".svg" in done.stderr
    done = run_cli("graph", SWIN, "-o", str(tmp_path / "missing" / "x.svg"))
    assert done.returncode == 2 and "no such folder" in done.stderr


def test_graph_command_default_output(tmp_path):
    done = run_cli("graph", SWIN, cwd=tmp_path)
    assert done.returncode == 0 and (tmp_path / "swin_t.svg").exists()
