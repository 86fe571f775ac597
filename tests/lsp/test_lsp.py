"""`archspec lsp`: a real JSON-RPC exchange with the language server in a subprocess, over
stdio (initialize, didOpen with a bad spec -> publishDiagnostics, hover, definition, didChange
-> no diagnostics, shutdown and exit); and the analysis behind it on the shipped specs."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("pygls")

from archspec.lsp.analysis import analyse, definition, diagnostics, hover, looks_like_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SWIN = "\n".join(line for line in (ROOT / "specs" / "swin_t.yaml").read_text().splitlines()
                 if not line.startswith("mappings:")) + "\n"  # its mapping file is not beside the copy
TIMEOUT = 60


class Client:
    """Frames JSON-RPC messages (Content-Length headers) to and from the server's stdio."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-m", "archspec", "lsp"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        self.messages: queue.Queue = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self.read, daemon=True).start()

    def read(self) -> None:
        stream = self.process.stdout
        while True:
            headers = {}
            while True:
                line = stream.readline()
                if not line:
                    return
                line = line.decode("ascii").strip()
                if not line:
                    break
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            body = stream.read(int(headers["content-length"]))
            self.messages.put(json.loads(body))

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        self.process.stdin.flush()

    def request(self, method: str, params) -> dict:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        reply = self.wait(lambda m: m.get("id") == self.next_id and "method" not in m)
        assert "error" not in reply, reply
        return reply["result"]

    def notify(self, method: str, params) -> None:
        self.send({"method": method, "params": params})

    def wait(self, test) -> dict:
        while True:
            message = self.messages.get(timeout=TIMEOUT)
            if test(message):
                return message

    def diagnostics(self, uri: str) -> list[dict]:
        message = self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                            and m["params"]["uri"] == uri)
        return message["params"]["diagnostics"]


def position_of(text: str, needle: str, offset: int = 0, occurrence: int = 0) -> dict:
    lines = text.splitlines()
    hits = [(i, line.index(needle)) for i, line in enumerate(lines) if needle in line]
    line, col = hits[occurrence]
    return {"line": line, "character": col + offset}


def test_a_session_over_stdio(tmp_path):
    spec = tmp_path / "my_swin.yaml"
    spec.write_text(SWIN)
    uri = spec.as_uri()
    bad = SWIN.replace("window: ${window}", "window: 9")
    client = Client()
    try:
        result = client.request("initialize", {"processId": os.getpid(), "rootUri": tmp_path.as_uri(),
                                               "capabilities": {}})
        capabilities = result["capabilities"]
        assert capabilities["hoverProvider"] and capabilities["definitionProvider"]
        assert result["serverInfo"]["name"] == "archspec"
        client.notify("initialized", {})

        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1,
                                                                "text": bad}})
        (found,) = client.diagnostics(uri)
        window = position_of(bad, "window: 9", offset=len("window: "))
        assert found["range"]["start"] == window
        assert found["range"]["end"] == {"line": window["line"], "character": window["character"] + 1}
        assert found["severity"] == 1 and found["source"] == "archspec"
        assert found["message"].startswith("stages.0.blocks.0.attn: window 9 does not divide the 56x56 token grid")
        assert "hint: use a window that divides 56" in found["message"]

        hovered = client.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                        "position": position_of(bad, "patchify:", 2)})
        value = hovered["contents"]["value"]
        assert "patch_embed" in value and "`[B, 3136, 96]`" in value and "grid 56x56" in value
        assert "params 4,896" in value

        target = client.request("textDocument/definition", {"textDocument": {"uri": uri},
                                                            "position": position_of(bad, "swin_block:", 3, 1)})
        assert target["uri"] == uri
        assert target["range"]["start"] == position_of(bad, "swin_block:")  # the block's definition

        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                                 "contentChanges": [{"text": SWIN}]})
        assert client.diagnostics(uri) == []
        hovered = client.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                        "position": position_of(SWIN, "ratio: ${mlp_ratio}")})
        value = hovered["contents"]["value"]
        assert value.startswith("**mlp** \u00b7 `mlp` \u00b7 12 nodes")  # every use of the block
        assert "| `stages.0.blocks.0.mlp` | `[B, 3136, 96] 56x56` | 74,400 | 462.42 M |" in value

        assert client.request("shutdown", None) is None
        client.notify("exit", None)
        assert client.process.wait(timeout=TIMEOUT) == 0
    finally:
        if client.process.poll() is None:
            client.process.kill()
        client.process.wait(timeout=TIMEOUT)


# -- the analysis on its own --------------------------------------------------------------------------
def analysis_of(name: str, text: str | None = None):
    path = str(ROOT / "specs" / name)
    return analyse(text if text is not None else Path(path).read_text(), path)


def test_definitions_in_the_transformer():
    text = (ROOT / "specs" / "transformer_base.yaml").read_text()
    a = analysis_of("transformer_base.yaml", text)
    assert diagnostics(a) == []
    found = definition(a, **position_of(text, "encoder]", 1, 0))
    assert (found.line, found.character) == tuple(position_of(text, "id: encoder").values())
    found = definition(a, **position_of(text, "memory]", 1, 1))  # a block's input
    assert (found.line, found.character) == tuple(position_of(text, "memory]").values())
    found = definition(a, **position_of(text, "tie: src_embed", 6))
    assert found.line == position_of(text, "id: src_embed")["line"]
    found = definition(a, **position_of(text, "from: src", 7))
    assert found.line == position_of(text, "  src: {shape")["line"]


def test_extends_goes_to_the_base_and_diagnostics_from_a_base_show_at_the_top():
    text = (ROOT / "specs" / "swin_s.yaml").read_text()
    a = analysis_of("swin_s.yaml", text)
    found = definition(a, **position_of(text, "extends:", 10))
    assert found.path == str(ROOT / "specs" / "swin_t.yaml")
    broken = analysis_of("swin_s.yaml", text.replace("depths: [2, 2, 18, 2]", "depths: [2, 2, 18, 2]\n  window: 9"))
    (found,) = diagnostics(broken)  # the base reads the window this file wrote: shown at that line
    assert found.line == broken.text.splitlines().index("  window: 9") and "at swin_t.yaml:34" in found.message
    based = analysis_of("swin_s.yaml", text.replace("depths: [2, 2, 18, 2]", "depths: [2, 2, 18, 2]\n  img: 230"))
    found = diagnostics(based)[0]  # at the base's `patch: ${patch}`, a value the base wrote: at the top
    assert found.line == 0 and "swin_t.yaml:" in found.message and "patch" in found.message


def test_yaml_and_schema_errors_are_located():
    a = analysis_of("vit_b16.yaml", (ROOT / "specs" / "vit_b16.yaml").read_text().replace("mlp:", "mpl:", 1))
    (found,) = diagnostics(a)
    assert "mpl" in found.message and found.end - found.start == 3
    a = analysis_of("vit_b16.yaml", "name: [unclosed\n")
    assert diagnostics(a)[0].message.startswith("YAML syntax")


@pytest.mark.parametrize("name", ["swin_t.yaml", "pvt_v2_b2.yaml", "clip_vit_b32.yaml", "transformer_base.yaml"])
def test_every_node_item_of_a_shipped_spec_hovers(name):
    text = (ROOT / "specs" / name).read_text()
    a = analysis_of(name, text)
    hovered = [line for line, s in enumerate(text.splitlines()) if s.lstrip().startswith("- id:")
               and hover(a, line, s.index("-") + 2)]
    assert len(hovered) == sum(s.lstrip().startswith("- id:") for s in text.splitlines())


def test_a_node_named_after_its_op_counts_past_an_input_of_that_name():
    text = "name: t\ninputs:\n  norm: [B, 8, 16]\ngraph:\n  - norm: {}\n  - mlp: {ratio: 2}\n"
    a = analysis_of("collision.yaml", text)
    assert diagnostics(a) == []
    found = hover(a, **position_of(text, "norm: {}", 0))
    assert found is not None and found.startswith("**norm_1**") and "`norm_1`" in found


def test_only_specs_are_checked():
    assert looks_like_spec(SWIN) and looks_like_spec("extends: swin_t.yaml\nparams: {img: 448}\n")
    assert not looks_like_spec("on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n")
