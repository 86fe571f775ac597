"""Issue 20, item 7: editing a spec in an editor. The language server completes (top-level keys,
ops, kinds, an op's parameters, node names in `from:`, params in `${...}`) on a half-typed line
of a document that does not parse; offers a quick fix for every did-you-mean, whose edit makes
the diagnostic go away; hovers on a param with its value and its uses; and a handler that fails
answers nothing while the server goes on. When `nvim` is on PATH, the headless Neovim session of
tests/editor/ runs too (docs/editors.md's setup, on Debian's Neovim 0.7).

The server runs in this process on pipes (test_hostile_round3_lsp.InProcess); every wait has a
timeout, so a hang fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("pygls")

from archspec.lsp import server as server_module  # noqa: E402
from archspec.lsp.actions import apply, fixes  # noqa: E402
from archspec.lsp.analysis import analyse, diagnostics  # noqa: E402
from archspec.lsp.completion import complete  # noqa: E402
from archspec.lsp.params import param_hover  # noqa: E402

from tests.hostile.test_lsp_requests import answer, client, diagnostics_of  # noqa: E402, F401  (client: the fixture)
from tests.lsp.test_lsp import ROOT  # noqa: E402

SPEC = """\
archspec: 1
name: edit
params:
  width: 16
  ratio: ${width // 8}
inputs:
  x: {shape: [B, 64, 16], grid: [8, 8]}
blocks:
  ff:
    params: {r: 2}
    graph:
      - norm: {}
      - mlp: {ratio: "${r}"}
graph:
  - id: stem
    norm: {}
  - id: attn
    attention: {kind: window, heads: 2, window: 4}
  - id: body
    from: attn
    mlp: {ratio: "${ratio}"}
  - ff: {r: 3}
  - id: group
    graph:
      - id: inner
        norm: {}
  - from: group.inner
    norm: {}
"""


@pytest.fixture(scope="module")
def checked():
    a = analyse(SPEC, str(ROOT / "specs" / "edit.yaml"))
    assert diagnostics(a) == []
    return a


def labels(text: str, line: int, character: int, known) -> list[str]:
    found = complete(text, line, character, known)
    return [item.label for item in found.items] if found else []


def typed(line_text: str, after: str = "  - id: body\n") -> tuple[str, int, int]:
    """SPEC with a line being typed inserted after `after`: (text, line, character at its end)."""
    text = SPEC.replace(after, after + line_text + "\n", 1)
    return text, text[:text.index(after) + len(after)].count("\n"), len(line_text)


# -- completion --------------------------------------------------------------------------------------
def test_completion_of_keys_ops_kinds_and_parameters_on_a_line_that_does_not_parse(checked):
    assert {"graph", "params", "inputs", "blocks", "extends"} <= set(labels("", 0, 0, checked))
    assert labels("gra", 0, 3, checked) == ["graph"]
    text, line, end = typed("  - att", "    mlp: {ratio: \"${ratio}\"}\n")
    assert labels(text, line, end, checked) == ["attention"]
    text, line, end = typed("  - ", "    mlp: {ratio: \"${ratio}\"}\n")
    ops = labels(text, line, end, checked)
    assert {"attention", "mlp", "norm", "graph", "ff", "from", "id", "repeat"} <= set(ops)  # `ff`: its block
    text, line, end = typed("  - attention: {kind: wi", "    mlp: {ratio: \"${ratio}\"}\n")
    assert analyse(text, "x.yaml").own is None  # not YAML
    assert labels(text, line, end, checked) == ["window"]
    text, line, end = typed("  - attention:\n      kind: ", "    mlp: {ratio: \"${ratio}\"}\n")
    assert {"window", "global", "shifted"} <= set(labels(text, line + 1, len("      kind: "), checked))


def test_completion_of_an_ops_parameters_follows_its_kind(checked):
    text, line, end = typed("  - attention: {kind: window, wi", "    mlp: {ratio: \"${ratio}\"}\n")
    assert labels(text, line, end, checked) == ["window"]
    text, line, end = typed("  - attention: {kind: global, ", "    mlp: {ratio: \"${ratio}\"}\n")
    global_keys = labels(text, line, end, checked)
    assert "heads" in global_keys and "window" not in global_keys
    text = SPEC.replace("    attention: {kind: window, heads: 2, window: 4}",
                        "    attention:\n      kind: window\n      hea")
    line = text.splitlines().index("      hea")
    assert labels(text, line, 9, checked) == ["heads"]
    text, line, end = typed("  - ff: {", "    mlp: {ratio: \"${ratio}\"}\n")
    assert labels(text, line, end, checked) == ["r"]  # a block's parameters


def test_completion_in_from_names_the_nodes_that_can_be_read_there(checked):
    text, line, end = typed("    from: [st")
    assert labels(text, line, end, checked) == ["stem"]
    text, line, end = typed("    from: ")
    names = labels(text, line, end, checked)
    assert {"stem", "attn", "ff", "x"} <= set(names) and "body" not in names  # not itself
    inside = SPEC.replace("      - mlp: {ratio: \"${r}\"}", "      - mlp: {ratio: \"${r}\"}\n        from: ")
    line = inside.splitlines().index("        from: ")
    assert set(labels(inside, line, 14, checked)) == {"norm", "x"}  # in a block: its nodes and its input


def test_completion_of_params_inside_an_expression(checked):
    text, line, end = typed("    mlp: {ratio: ${wi")
    assert labels(text, line, end, checked) == ["width"]
    found = complete(text, line, end, checked)
    assert found.start == end - 2 and found.items[0].detail == "= 16"
    text = SPEC.replace("params:\n  width: 16\n", "params:\n  width: 16\n  depth: 3\n")  # typed, not checked yet
    text = text.replace("    from: attn\n", "    from: attn\n    repeat: ${de\n")
    line = text.splitlines().index("    repeat: ${de")
    assert labels(text, line, len("    repeat: ${de"), checked) == ["depth"]
    block = SPEC.replace("      - mlp: {ratio: \"${r}\"}", "      - mlp: {ratio: \"${")
    line = block.splitlines().index("      - mlp: {ratio: \"${")
    assert {"r", "width", "ratio"} <= set(labels(block, line, len("      - mlp: {ratio: \"${"), checked))


def test_completion_never_raises_on_any_text(checked):
    text = SPEC + "  - {[}: ${ '\"\n\t- - - :\n#\n  ]]]}}}: {\n"
    for line, row in enumerate(text.split("\n")):
        for character in range(len(row) + 1):
            complete(text, line, character, checked)
            complete(text, line, character, None)


# -- code actions ----------------------------------------------------------------------------------
TYPOS = [  # (what was right, the typo): each did-you-mean the checker gives
    ("    norm: {}\n  - id: attn", "    nrom: {}\n  - id: attn"),  # an op
    ("kind: window", "kind: windw"),  # a kind
    ("heads: 2", "heds: 2"),  # a parameter
    ("    from: attn", "    from: atn"),  # a node named in `from:`
    ("    from: attn", "    fromm: attn"),  # a node key
    ("from: group.inner", "from: group.iner"),  # a member of a group
    ("from: group.inner", "from: grop.inner"),  # the group itself
    ("${ratio}", "${ratoi}"),  # a param in an expression
    ("  - ff: {r: 3}", "  - ff: {rr: 3}"),  # a block's parameter
    ("  - ff: {r: 3}", "  - ff: {r: \"${mx(3, 2)}\"}"),  # a function
]


@pytest.mark.parametrize("right, typo", TYPOS, ids=[t for _, t in TYPOS])
def test_every_did_you_mean_has_a_fix_whose_edit_clears_it(right, typo):
    path = str(ROOT / "specs" / "edit.yaml")
    text = SPEC.replace(right, typo)
    (found,) = diagnostics(analyse(text, path))
    assert "did you mean" in found.message
    (fix,) = fixes(analyse(text, path), text, found.line, found.line)
    assert fix.line == found.line and fix.title.startswith("Change '")
    fixed = apply(text, fix)
    assert diagnostics(analyse(fixed, path)) == []


def test_a_fix_is_not_offered_on_a_line_that_changed_since_the_check():
    path = str(ROOT / "specs" / "edit.yaml")
    text = SPEC.replace("kind: window", "kind: windw")
    a = analyse(text, path)
    line = text.splitlines().index("    attention: {kind: windw, heads: 2, window: 4}")
    assert fixes(a, text, line, line)
    assert fixes(a, text.replace("kind: windw", "kind: global"), line, line) == []


# -- hover on params -------------------------------------------------------------------------------
def test_hover_on_a_param_shows_its_value_and_its_uses(checked):
    lines = SPEC.splitlines()
    at_key = param_hover(checked, lines.index("  width: 16"), 3)
    assert at_key.startswith("**width** \u00b7 param = `16`")
    assert "- line 5: param `ratio`" in at_key
    used = lines.index("    mlp: {ratio: \"${ratio}\"}")
    over_use = param_hover(checked, used, lines[used].index("${ratio}") + 3)
    assert over_use.startswith("**ratio** \u00b7 param = `2`") and "`${width // 8}` (in this file)" in over_use
    assert f"- line {used + 1}: `body` \u00b7 ratio" in over_use
    inner = lines.index("      - mlp: {ratio: \"${r}\"}")
    assert param_hover(checked, inner, lines[inner].index("${r}") + 2) is None  # a block's own parameter


def test_hover_on_a_param_of_a_spec_that_extends_another_shows_the_value_after_overrides():
    text = (ROOT / "specs" / "swin_s.yaml").read_text()
    a = analyse(text, str(ROOT / "specs" / "swin_s.yaml"))
    line = next(i for i, s in enumerate(text.splitlines()) if s.strip().startswith("depths:"))
    shown = param_hover(a, line, text.splitlines()[line].index("depths") + 1)
    assert shown.startswith("**depths** \u00b7 param = `[2, 2, 18, 2]`")


# -- over the wire ---------------------------------------------------------------------------------


def test_a_session_completes_fixes_and_hovers(tmp_path, client):
    uri = (tmp_path / "edit.yaml").as_uri()
    text = SPEC.replace("kind: window", "kind: windw")
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1,
                                                            "text": text}})
    (found,) = diagnostics_of(client, uri, 1)
    assert "did you mean 'window'?" in found["message"]
    actions = answer(client, "textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": found["range"], "context": {"diagnostics": [found]}})
    (action,) = actions
    assert action["title"] == "Change 'windw' to 'window'" and action["kind"] == "quickfix"
    (edit,) = action["edit"]["changes"][uri]
    row = text.splitlines()[edit["range"]["start"]["line"]]
    fixed_row = row[:edit["range"]["start"]["character"]] + edit["newText"] + row[edit["range"]["end"]["character"]:]
    assert fixed_row == "    attention: {kind: window, heads: 2, window: 4}"
    half = SPEC + "  - attention: {kind: glo"  # the line being typed: not YAML
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": half}]})
    assert diagnostics_of(client, uri, 2)[0]["message"].startswith("YAML syntax")
    line = half.count("\n")
    listed = answer(client, "textDocument/completion", {"textDocument": {"uri": uri},
                                                        "position": {"line": line, "character": 25}})
    (item,) = listed["items"]
    assert item["label"] == "global" and item["textEdit"]["range"]["start"] == {"line": line, "character": 22}
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 3},
                                             "contentChanges": [{"text": SPEC}]})
    assert diagnostics_of(client, uri, 3) == []
    hovered = answer(client, "textDocument/hover", {"textDocument": {"uri": uri},
                                                    "position": {"line": 3, "character": 3}})
    assert hovered["contents"]["value"].startswith("**width** \u00b7 param = `16`")
    client.stop()


def test_a_handler_that_fails_answers_nothing_and_the_server_goes_on(tmp_path, client, monkeypatch, capfd):
    def broken(*args):
        raise RuntimeError("a defect")

    monkeypatch.setattr(server_module, "complete", broken)
    monkeypatch.setattr(server_module, "param_hover", broken)
    uri = (tmp_path / "edit.yaml").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1,
                                                            "text": SPEC}})
    assert diagnostics_of(client, uri, 1) == []
    position = {"textDocument": {"uri": uri}, "position": {"line": 3, "character": 3}}
    assert answer(client, "textDocument/completion", position) is None
    assert answer(client, "textDocument/hover", position) is None
    assert "RuntimeError: a defect" in capfd.readouterr().err
    monkeypatch.undo()
    listed = answer(client, "textDocument/completion", {"textDocument": {"uri": uri},
                                                        "position": {"line": 0, "character": 0}})
    assert "graph" in [item["label"] for item in listed["items"]]
    client.stop()


# -- Neovim ----------------------------------------------------------------------------------------
BIN = os.path.dirname(sys.executable)  # where `archspec` is installed beside this python
PATH = BIN + os.pathsep + os.environ.get("PATH", "")


@pytest.mark.skipif(shutil.which("nvim") is None or shutil.which("archspec", path=PATH) is None,
                    reason="needs nvim and archspec on PATH")
def test_the_readme_setup_in_headless_neovim(tmp_path):
    log = tmp_path / "session.log"
    spec = tmp_path / "typo.yaml"
    spec.write_text((ROOT / "tests" / "editor" / "typo.yaml").read_text())
    done = subprocess.run(["nvim", "--headless", "-u", str(ROOT / "tests" / "editor" / "init.lua"),
                           "-c", f"luafile {ROOT / 'tests' / 'editor' / 'session.lua'}", str(spec)],
                          env={**os.environ, "PATH": PATH, "SESSION_LOG": str(log)}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    shown = log.read_text() if log.exists() else ""
    assert done.returncode == 0, (done.stdout, done.stderr, shown)
    assert "did you mean 'mlp'?" in shown and "chosen in vim.lsp.buf.code_action(): Change 'mpl' to 'mlp'" in shown
    assert "fixed line:   - mlp: {ratio: 4}" in shown and "diagnostics after: 0" in shown
    assert "completion: attention" in shown and "-> completion: window" in shown and "completion: width" in shown
