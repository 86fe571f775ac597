r"""Issue 19 (hostile input, round three), findings 1 and 4, each closed.

1. Mapping-file patterns that make a backtracking matcher take exponential or high-polynomial
   time (`^(a|a)*$`, `^(.|.)*X`, fourteen `.*`) are matched in linear time (RE2); what RE2
   cannot match in linear time (lookaround, backreferences) is a located error.
2. Control characters (CR, ESC, C0, C1) in names, keys and messages reach no output raw: the
   terminal shows them as escapes, Markdown keeps its code fence, SVG stays valid XML, DOT and
   Mermaid keep each string on its line, HTML holds none.
"""

from __future__ import annotations

import re
import textwrap
import xml.etree.ElementTree as ET

import pytest
import torch

from archspec.cli import main
from archspec.compiler.weights.mapping_file import read_mapping_file
from archspec.compiler.weights.patterns import MAX_PROGRAM_SIZE, compile_pattern
from archspec.core.errors import SpecError
from archspec.core.visible import visible
from archspec.pipeline import attempt_text
from archspec.render.dot import to_dot
from archspec.render.html import picture_html
from archspec.render.mermaid import to_markdown, to_mermaid
from archspec.render.picture import picture
from archspec.render.svg import to_svg

from tests.hostile.test_hostile import within

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # control characters but tab and line feed
HOSTILE = "y\r```\r<img src=x onerror=alert(1)>\r```\x1b[2J\x1b]0;pwned\x07\rall checks passed\x01\x85"
KEYS = ["blocks.0.attn.qkv.weight", "blocks.11.mlp.fc2.bias", "a" * 40 + "!", "aaaa", "norm.X"]


# -- finding 1: patterns matched in linear time ----------------------------------------------------------
def mapping(tmp_path, text: str):
    path = tmp_path / "map.yaml"
    path.write_text(textwrap.dedent(text).lstrip())
    return read_mapping_file(path)


@pytest.mark.parametrize("pattern, renamed", [
    (r"^(a|a)*$", {"aaaa"}),  # exponential for a backtracking matcher on 'aaa...a!'
    (r"^(.|.)*X", {"norm.X"}),  # exponential on any key without an X
    (".*" * 14 + "X", {"norm.X"}),  # O(n^14) on any key without an X
    (r"^(a+)+$", {"aaaa"}),  # nested repeats: once refused, now harmless
], ids=["alternation", "any-alternation", "fourteen-dot-stars", "nested"])
def test_a_backtracking_pattern_is_matched_in_linear_time(tmp_path, pattern, renamed):
    naming = mapping(tmp_path, f"""
        name: hostile
        identify: ['{pattern}']
        rules:
          - rename: {{'{pattern}': renamed}}
          - drop: ['{pattern}']
          - create: {{match: '{pattern}', fill: zeros}}
        keep: ['{pattern}']
        """)
    state = {key: torch.ones(1) for key in KEYS}
    with within(5):  # each took from 16 s to hours (fourteen .*) before
        assert naming.applies_to(state)
        converted = naming.convert(state, ours={key: torch.ones(1) for key in KEYS}).state
        kept = {key for key in KEYS if naming.keeps(key)}
    assert kept == renamed
    assert set(converted) == set(KEYS) | {"renamed"}  # renamed; drop matches none left; create remakes it
    assert [float(converted[key]) for key in renamed] == [0.0]


@pytest.mark.parametrize("pattern, says", [
    (r"^a(?=b)", "invalid perl operator: (?="),
    (r"(?<!x)a", "invalid perl operator: (?<!"),
    (r"^(a)\1$", "invalid escape sequence: \\1"),
    (r"^a\Z", "invalid escape sequence: \\Z"),
    (r"^a++", "bad repetition operator: ++"),
])
def test_what_a_linear_matcher_cannot_do_is_a_located_error(tmp_path, pattern, says):
    with pytest.raises(SpecError) as caught:
        mapping(tmp_path, f"""
            name: x
            rules:
              - drop: [w, '{pattern}']
            """)
    [d] = caught.value.diagnostics
    assert (d.loc.line, d.loc.col) == (3, 15)
    assert d.message == f"pattern '{pattern}' cannot be matched in linear time: {says}"
    assert "lookahead and lookbehind, backreferences" in d.hint


def test_a_pattern_too_large_for_the_matcher_is_a_located_error(tmp_path):
    with pytest.raises(SpecError) as caught:
        mapping(tmp_path, r"""
            name: x
            keep: ['^\w{1000}$']
            """)
    [d] = caught.value.diagnostics
    assert (d.loc.line, d.loc.col) == (2, 8)
    assert f"is too large for the matcher (3002 steps; at most {MAX_PROGRAM_SIZE})" in d.message


@pytest.mark.parametrize("pattern, template, key", [
    (r"^blocks\.(\d+)\.norm1\.", r"blocks.\1.attn.norm.", "blocks.11.norm1.weight"),
    (r"^(?P<stage>\d+)\.(?P<block>\d+)", r"s\g<stage>.b\g<2>.\g<block>", "3.4.w"),
    (r"^(a)?(b)", r"[\1|\2]", "b.c"),  # a group that took no part is ''
    (r"(x)(x)(x)(x)(x)(x)(x)(x)(x)(x)", r"\10-\1\0-\101-\n\t\\-\.-\g<10>0", "xxxxxxxxxxz"),
    (r"^é(\w+)", r"ü\1ß", "ébloc.w"),  # offsets count characters, not UTF-8 bytes
])
def test_templates_expand_as_pythons_re_expands_them(pattern, template, key):
    ours = compile_pattern(pattern, None)
    assert ours.subn(template, key) == re.compile(pattern).subn(template, key, count=1)
    assert ours.search(key).expand(template) == re.compile(pattern).search(key).expand(template)


# -- finding 4: control characters in outputs --------------------------------------------------------------
def hostile_spec(where: str) -> str:
    """A spec with HOSTILE as an input's name ('key': an error no drawn node holds) or in an
    einsum's equation ('node': an error drawn on the node, the graph drawn around it)."""
    text = repr(HOSTILE)[1:-1].replace('"', '\\"')  # as a YAML double-quoted string
    key, eq = (f'"{text}"', "bnc->bcn") if where == "key" else ("y", f'"bnc->bcn{text}"')
    return textwrap.dedent(f"""\
        archspec: 1
        name: hostile
        inputs:
          x: [B, 6, 8]
          {key}: [B, 6, 8]
        graph:
          - id: m
            from: x
            mlp: {{hidden: 16}}
          - id: e
            from: m
            einsum: {{eq: {eq}}}
        """)


def hostile_picture(where: str):
    attempt = attempt_text(hostile_spec(where), name="hostile.yaml")
    assert attempt.error is not None
    return picture(attempt.graph, attempt.error, name="hostile")


@pytest.mark.parametrize("where", ["key", "node"])
def test_markdown_keeps_its_code_fence(where):
    text = to_markdown(hostile_picture(where))
    assert not RAW.search(text)
    fences = [line for line in text.splitlines() if line.lstrip().startswith("```")]  # splitlines breaks at CR too
    assert fences == ["```mermaid", "```"]
    assert "onerror=alert(1)" in text  # shown, not dropped


def test_a_markdown_heading_holds_no_live_html():
    attempt = attempt_text(hostile_spec("key"), name="x.yaml")
    text = to_markdown(picture(None, attempt.error, name="<img src=x onerror=alert(1)>\r.yaml"))
    assert text.startswith("# &lt;img src=x onerror=alert(1)&gt;\\r.yaml\n")


@pytest.mark.parametrize("where", ["key", "node"])
def test_svg_of_a_failing_spec_is_valid_xml(where):
    svg = to_svg(hostile_picture(where))
    root = ET.fromstring(svg.encode())  # raised "not well-formed (invalid token)" before
    assert not RAW.search(svg)
    assert any("onerror=alert(1)" in "".join(g.itertext()) for g in root.iter("{http://www.w3.org/2000/svg}g"))


def test_svg_is_valid_xml_for_every_control_character():
    every = "".join(chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x202E, 0xD800, 0xFFFE])
    attempt = attempt_text(hostile_spec("key"), name="x.yaml")
    svg = to_svg(picture(None, attempt.error, name=every))
    ET.fromstring(svg.encode())  # also: a lone surrogate would not even encode to UTF-8


@pytest.mark.parametrize("where", ["key", "node"])
@pytest.mark.parametrize("render", [to_dot, to_mermaid, picture_html], ids=["dot", "mermaid", "html"])
def test_dot_mermaid_and_html_hold_no_raw_control_characters(render, where):
    text = render(hostile_picture(where))
    assert not RAW.search(text)
    assert "onerror=alert(1)" in text  # shown, not dropped


def test_dot_strings_show_the_escape_itself():
    from archspec.render.dot import quote

    assert quote("a\rb\x1bc\nd\\e") == '"a\\\\rb\\\\x1bc\\nd\\\\e"'  # the text `a\rb\x1bc`, a line break, `d\e`


@pytest.mark.parametrize("command", ["check", "graph"])
def test_the_terminal_sees_escapes_never_control_characters(tmp_path, capsys, command):
    spec = tmp_path / "hostile.yaml"
    spec.write_text(hostile_spec("key"))
    argv = [command, str(spec)] + (["-o", str(tmp_path / "x.md")] if command == "graph" else [])
    assert main(argv) == 1
    out = capsys.readouterr()
    assert not RAW.search(out.out) and not RAW.search(out.err)
    assert "'y\\r```\\r<img src=x onerror=alert(1)>\\r```\\x1b[2J\\x1b]0;pwned\\x07\\rall checks passed\\x01\\x85'" \
        in out.err


def test_visible_escapes_controls_and_keeps_text():
    assert visible("a\rb\x1b[0m\x07\x85\u202e\ud800\ufffe\u2028") == \
        "a\\rb\\x1b[0m\\x07\\x85\\u202e\\ud800\\ufffe\\u2028"
    assert visible("line\n\tnext", keep="\n\t") == "line\n\tnext"
    assert visible("line\n\tnext") == "line\\n\\tnext"
    assert visible("swin ×6 · 594K · ü · 注意") == "swin ×6 · 594K · ü · 注意"


def test_an_error_raised_in_python_shows_escapes(tmp_path):
    """The MaxViT trial's mapping wrote `"\\1"` inside `${...}`, a string escape, chr(1), and the
    load error printed through the Python API showed the raw control character: the exception's
    text shows escapes (its diagnostics keep the text as it is, for programs)."""
    from archspec.core.errors import error

    exc = error(f"1 unexpected (stages.0.{chr(1)}.rel_table.value)\x1b[2J")
    assert not RAW.search(str(exc)) and "stages.0.\\x01.rel_table.value" in str(exc)
    assert chr(1) in exc.diagnostics[0].message
