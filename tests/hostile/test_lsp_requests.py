"""Issue 19 (hostile input, round three), finding 8: the language server under load and broken input.

- Twenty quick edits of a large spec cost two or three checks, not twenty: edits replace one
  another while a check runs, a stale result is dropped, and a hover is answered from the last
  finished check instead of waiting for (or starting) a fresh one.
- A check that runs too long is told on the document, and the server keeps answering.
- Broken framing on stdin (no Content-Length, a negative one, random bytes, a truncated message,
  a body that is not JSON-RPC) is skipped with a line on stderr, and the next request is answered.
- A hover naming a file the editor never opened (here a FIFO) reads nothing from disk.

The server runs in this process (on pipes, so that a test can count its checks) or, for the
framing, as `archspec lsp` in a subprocess; every wait has a timeout, so a hang fails the test.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("pygls")

from archspec.lsp import checks as checks_module  # noqa: E402
from archspec.lsp import server as server_module  # noqa: E402
from archspec.lsp.framing import MessageReader  # noqa: E402
from archspec.lsp.server import line_in, serve  # noqa: E402

from tests.lsp.test_lsp import ROOT, Client  # noqa: E402

HEAD = "name: chain\ninputs:\n  x: [B, 8, 16]\n"
WAIT = 20  # seconds any one answer may take (a hang guard: answers come in well under a second)


def large_spec(edit: int, nodes: int = 3000) -> str:
    """A spec whose check takes about 0.2 s; `edit` changes its fourth line only."""
    return HEAD + f"# edit {edit}\ngraph:\n" + "  - norm: {}\n" * nodes


class InProcess(Client):
    """The server on pipes in a thread of this process (Client's framing and waiting)."""

    def __init__(self):
        to_server, from_client = os.pipe()
        to_client, from_server = os.pipe()
        self.server = threading.Thread(target=serve, args=(open(to_server, "rb"), open(from_server, "wb")),
                                       daemon=True)
        self.server.start()
        self.process = SimpleNamespace(stdin=open(from_client, "wb"), stdout=open(to_client, "rb"))
        self.messages = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self.read, daemon=True).start()

    def start(self, tmp_path) -> None:
        self.request("initialize", {"processId": os.getpid(), "rootUri": tmp_path.as_uri(), "capabilities": {}})
        self.notify("initialized", {})

    def stop(self) -> None:
        """Shut down and exit, as an editor does: the server's thread ends."""
        self.request("shutdown", None)
        self.notify("exit", None)
        self.close()
        assert not self.server.is_alive()

    def close(self) -> None:
        """End its input (so that a server left running by a failed test ends too)."""
        if not self.process.stdin.closed:
            self.process.stdin.close()
        self.server.join(WAIT)


@pytest.fixture
def client(tmp_path):
    started = InProcess()
    try:
        started.start(tmp_path)
        yield started
    finally:
        started.close()


def first(client: Client, wanted, what: str) -> dict:
    """The first message from the server that is `wanted`, those read past kept for later ones
    (failing after WAIT seconds instead of hanging)."""
    backlog = client.__dict__.setdefault("backlog", [])
    for message in backlog:
        if wanted(message):
            backlog.remove(message)
            return message
    deadline = time.perf_counter() + WAIT
    while True:
        try:
            message = client.messages.get(timeout=max(deadline - time.perf_counter(), 0.01))
        except queue.Empty:
            pytest.fail(f"no {what} within {WAIT} s")
        if wanted(message):
            return message
        backlog.append(message)


def answer(client: Client, method: str, params) -> dict | None:
    """A request's result."""
    client.next_id += 1
    wanted = client.next_id
    client.send({"id": wanted, "method": method, "params": params})
    message = first(client, lambda m: m.get("id") == wanted and "method" not in m, f"answer to {method}")
    assert "error" not in message, message
    return message["result"]


def diagnostics_of(client: Client, uri: str, version: int, notices: bool = False) -> list[dict]:
    """The next diagnostics the server publishes for this version of the document, past the notice
    a check slower than 5 s publishes while it runs (a busy machine: CI's two cores shared)."""
    while True:
        message = first(client, lambda m: m.get("method") == "textDocument/publishDiagnostics"
                        and m["params"]["uri"] == uri and m["params"].get("version") == version,
                        f"diagnostics for version {version}")
        found = message["params"]["diagnostics"]
        if notices or not (found and all(d["message"].startswith("this check has run for over") for d in found)):
            return found


def counted_checks(monkeypatch, gate: threading.Event | None = None) -> list[str]:
    """Count the checks the server runs (the text of each); with a gate, each check waits until
    the test opens it."""
    texts = []
    real = server_module.analyse

    def analyse(text, path):
        texts.append(text)
        if gate is not None:
            gate.wait(WAIT)
        return real(text, path)

    monkeypatch.setattr(server_module, "analyse", analyse)
    return texts


# -- edits faster than checks --------------------------------------------------------------------------
def test_twenty_quick_edits_cost_few_checks_and_a_hover_does_not_wait_for_them(tmp_path, monkeypatch, client):
    """Edits that come while a check runs replace one another. The check of the first edit is held
    (a gate) until the twenty edits and a hover have been answered, so the count does not depend
    on how fast this machine checks: the open, the first edit (its result stale, dropped) and the
    newest, three in all (the old server checked each edit in its handler: it waited on the gate)."""
    gate = threading.Event()
    gate.set()
    checked = counted_checks(monkeypatch, gate)
    uri = (tmp_path / "big.yaml").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1,
                                                            "text": large_spec(1)}})
    assert diagnostics_of(client, uri, 1) == []
    gate.clear()  # the next check waits until the edits and the hover are answered
    first_edit = time.perf_counter()
    for version in range(2, 22):
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                 "contentChanges": [{"text": large_spec(version)}]})
    hovered = answer(client, "textDocument/hover", {"textDocument": {"uri": uri},
                                                    "position": {"line": 7, "character": 4}})
    assert time.perf_counter() - first_edit < 15  # a hang guard (about 0.5 s)
    assert hovered is not None and "`norm_2`" in hovered["contents"]["value"]  # the open's check, the same node
    gate.set()
    assert diagnostics_of(client, uri, 21) == []  # the newest text is checked, and told
    client.stop()
    assert len(checked) == 3, f"{len(checked)} checks for one open and twenty edits"
    assert checked[-1] == large_spec(21)
    assert checked[0] == large_spec(1) and checked[-1] == large_spec(21)


def test_a_check_that_runs_too_long_is_told_and_the_server_keeps_answering(tmp_path, monkeypatch, client):
    monkeypatch.setattr(checks_module, "SLOW_AFTER", 0.2)
    gate = threading.Event()
    checked = counted_checks(monkeypatch, gate)
    uri = (tmp_path / "slow.yaml").as_uri()
    text = HEAD + "graph:\n  - norm: {}\n"
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1,
                                                            "text": text}})
    (told,) = diagnostics_of(client, uri, 1, notices=True)
    assert told["severity"] == 2 and "this check has run for over 0.2 s" in told["message"]
    hovered = answer(client, "textDocument/hover", {"textDocument": {"uri": uri},
                                                    "position": {"line": 4, "character": 4}})
    assert hovered is None  # nothing finished yet, and the hover did not wait for it
    gate.set()
    assert diagnostics_of(client, uri, 1) == []  # the check's own diagnostics when it ends
    hovered = answer(client, "textDocument/hover", {"textDocument": {"uri": uri},
                                                    "position": {"line": 4, "character": 4}})
    assert "`norm`" in hovered["contents"]["value"]
    client.stop()
    assert len(checked) == 1


def test_while_a_check_runs_definition_and_hover_answer_at_the_lines_that_moved(tmp_path, monkeypatch, client):
    uri = (tmp_path / "moved.yaml").as_uri()
    text = HEAD + "graph:\n  - id: a\n    norm: {}\n  - mlp: {ratio: 2}\n    from: a\n"
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1,
                                                            "text": text}})
    assert diagnostics_of(client, uri, 1) == []
    gate = threading.Event()  # the next check runs until the end of the test
    checked = counted_checks(monkeypatch, gate)
    moved = text.replace("graph:\n", "# two lines\n# added\ngraph:\n")
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": moved}]})
    found = answer(client, "textDocument/definition", {"textDocument": {"uri": uri},
                                                       "position": {"line": 9, "character": 11}})  # `from: a`
    assert found["range"]["start"] == {"line": 6, "character": 4}  # `id: a`, where it is now
    hovered = answer(client, "textDocument/hover", {"textDocument": {"uri": uri},
                                                    "position": {"line": 8, "character": 4}})
    assert hovered["contents"]["value"].startswith("**mlp**")  # both from the check of version 1
    gate.set()
    assert diagnostics_of(client, uri, 2) == [] and checked == [moved]


def test_a_check_that_crashes_is_told_on_the_document_and_the_next_edit_is_checked(tmp_path, monkeypatch, client):
    real = server_module.analyse

    def crash_once(text, path):
        monkeypatch.setattr(server_module, "analyse", real)
        raise RuntimeError("a defect")

    monkeypatch.setattr(server_module, "analyse", crash_once)
    uri = (tmp_path / "crash.yaml").as_uri()
    text = HEAD + "graph:\n  - norm: {}\n"
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1,
                                                            "text": text}})
    (told,) = diagnostics_of(client, uri, 1)
    assert told["severity"] == 1 and told["message"].startswith("archspec crashed checking this spec")
    assert told["message"].endswith("RuntimeError: a defect")
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": text + "  - norm: {}\n"}]})
    assert diagnostics_of(client, uri, 2) == []
    client.stop()


def test_a_hover_on_a_file_the_editor_never_opened_reads_nothing(tmp_path, client):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # opening it to read would wait for a writer forever
    try:
        for method in ("textDocument/hover", "textDocument/definition"):
            result = answer(client, method, {"textDocument": {"uri": fifo.as_uri()},
                                             "position": {"line": 0, "character": 0}})
            assert result is None
        client.notify("textDocument/didSave", {"textDocument": {"uri": fifo.as_uri()}})
        assert answer(client, "textDocument/hover", {"textDocument": {"uri": fifo.as_uri()},
                                                     "position": {"line": 0, "character": 0}}) is None
        client.stop()
    finally:
        try:  # if the server did open it (as it once did), let it go
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def test_a_request_with_invalid_params_is_answered_with_an_error_and_the_server_goes_on(tmp_path, client,
                                                                                        capfd):
    """An editor waits for the answer to every request: one whose params do not fit the method
    (a hover without a position) gets JSON-RPC's Invalid Params error, not silence, and no
    traceback; a notification with invalid params is dropped with one line on stderr."""
    spec = tmp_path / "chain.yaml"
    text = HEAD + "graph:\n  - norm: {}\n"
    client.notify("textDocument/didOpen", {"textDocument": {"uri": spec.as_uri(), "languageId": "yaml",
                                                            "version": 1, "text": text}})
    diagnostics_of(client, spec.as_uri(), 1)
    for method, params in [("textDocument/hover", {"textDocument": {"uri": spec.as_uri()}}),
                           ("textDocument/definition", {"position": {"line": 0, "character": 0}}),
                           ("textDocument/completion", None)]:
        client.next_id += 1
        wanted = client.next_id
        client.send({"id": wanted, "method": method, "params": params})
        message = first(client, lambda m: m.get("id") == wanted and "method" not in m, f"answer to {method}")
        assert message["error"]["code"] == -32602 and "Invalid Params" in message["error"]["message"], message
    client.notify("textDocument/didChange", {"textDocument": {"uri": spec.as_uri()}})  # no version, no changes
    hover = answer(client, "textDocument/hover", {"textDocument": {"uri": spec.as_uri()},
                                                  "position": {"line": 4, "character": 5}})
    assert hover is not None and "norm" in hover["contents"]["value"]
    client.stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
    assert "archspec lsp: textDocument/didChange: invalid params, dropped" in err


@pytest.mark.parametrize("old, new, line, expected", [
    ("a\nb\nc\n", "a\nb\nc\n", 2, 2),
    ("a\nb\nc\n", "a\nB\nc\n", 0, 0),  # above the change
    ("a\nb\nc\n", "a\nB\nc\n", 1, 1),  # one line changed into one: its old text
    ("a\nb\nc\n", "a\nB\nc\n", 2, 2),  # below it
    ("a\nb\nc\n", "a\nx\ny\nb\nc\n", 4, 2),  # below two added lines
    ("a\nx\ny\nb\nc\n", "a\nb\nc\n", 2, 4),  # below two removed lines
    ("a\nb\nc\n", "a\nx\ny\nb\nc\n", 2, None),  # inside a change of more than one line
], ids=["same", "above", "the-line", "below", "added", "removed", "inside"])
def test_where_a_line_of_the_newest_text_was(old, new, line, expected):
    assert line_in(old, new, line) == expected


# -- broken framing --------------------------------------------------------------------------------------
def frame(message: dict | bytes, length: int | str | None = "auto") -> bytes:
    body = message if isinstance(message, bytes) else json.dumps({"jsonrpc": "2.0", **message}).encode()
    header = b"" if length is None else f"Content-Length: {len(body) if length == 'auto' else length}\r\n".encode()
    return header + b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + body


HOVER = {"method": "textDocument/hover", "params": {"textDocument": {"uri": "file:///nowhere.yaml"},
                                                    "position": {"line": 0, "character": 0}}}
BROKEN = {  # what the editor's side of the pipe might send, then a good request
    "no Content-Length": frame({"id": 900, **HOVER}, length=None),
    "a negative Content-Length": frame({"id": 901, **HOVER}, length=-5),
    "a Content-Length that is not a number": frame({"id": 902, **HOVER}, length="12abc"),
    "a Content-Length of a petabyte": frame({"id": 903, **HOVER}, length=10**15),
    "random bytes": bytes(range(256)) * 3 + b"\x00\xff\r\n\r\n",
    "printable noise without a line break": b"hello there {",
    "a truncated message (Content-Length says more)": frame({"id": 904, **HOVER})[:-60],
    "a message that ends just short of its Content-Length": frame({"id": 906, **HOVER})[:-15],
    "a message that is not JSON": frame(b'{"jsonrpc": "2.0", "id": 905, "method": "textDocument/hov'),
    "JSON that is not JSON-RPC": frame(b"[1, 2, 3]"),
    "a header line that is not `Name: value`": b"Content-Length 40\r\n\r\n" + b"x" * 40,
}


def test_the_server_answers_again_after_broken_framing():
    client = Client()
    try:
        assert answer(client, "initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": {}})
        client.notify("initialized", {})
        for what, garbage in BROKEN.items():
            client.process.stdin.write(garbage)
            client.process.stdin.flush()
            try:
                assert answer(client, **HOVER) is None
            except BaseException as failure:
                raise AssertionError(f"after {what}: {failure}") from None
        assert answer(client, "shutdown", None) is None
        client.notify("exit", None)
        assert client.process.wait(timeout=WAIT) == 0
        told = client.process.stderr.read().decode()
        assert told.count("archspec lsp: skipped") >= len(BROKEN) and "Traceback" not in told, told
        assert "without a Content-Length" in told and "'-5' is not a byte count" in told
        assert "a message cut short" in told and "is not JSON" in told
    finally:
        if client.process.poll() is None:
            client.process.kill()
        client.process.wait(timeout=WAIT)


def test_the_console_command_ends_quietly_with_code_0_when_the_editor_says_exit():
    """`archspec lsp` as editors start it (the console entry point, run()): pygls closes stdout on
    exit, and the final flush must not turn that into a traceback and exit code 1."""
    messages = [{"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}},
                {"method": "initialized", "params": {}}, {"id": 2, "method": "shutdown", "params": None},
                {"method": "exit", "params": None}]
    given = b"".join(frame({"jsonrpc": "2.0", **message}) for message in messages)
    entry = "import sys; sys.argv = ['archspec', 'lsp']; from archspec.cli.main import run; run()"
    process = subprocess.run([sys.executable, "-c", entry], input=given, capture_output=True, cwd=ROOT, timeout=WAIT)
    assert process.returncode == 0 and process.stderr.decode() == "", process.stderr.decode()
    assert b'"id": 2' in process.stdout


@pytest.mark.parametrize("given, last_line", [
    (b"Content-Length: 100\r\n\r\n{", "archspec lsp: the input ended inside a message"),
    (b"\x00\x01 garbage", "archspec lsp: skipped a byte b'\\x00' where a message header was expected; "
                         "reading on from the next message"),  # and there is none
], ids=["inside-a-message", "while-skipping"])
def test_input_that_ends_midway_ends_the_server_with_a_line_on_stderr(given, last_line):
    process = subprocess.run([sys.executable, "-m", "archspec", "lsp"], input=given, capture_output=True, cwd=ROOT,
                             timeout=WAIT)
    assert process.returncode == 0 and process.stderr.decode().strip().split("\n")[-1] == last_line


def reader_of(data: bytes) -> tuple[MessageReader, list[str]]:
    told = []
    stream = SimpleNamespace(chunks=[data[i:i + 7] for i in range(0, len(data), 7)])  # reads of 7 bytes
    stream.read = lambda size: stream.chunks.pop(0) if stream.chunks else b""
    return MessageReader(stream, told.append), told


def test_a_header_line_split_across_reads_and_one_inside_a_json_string_are_told_apart():
    inner = {"id": 1, "method": "x", "params": {"text": "Content-Length: 5\r\n\r\n{}"}}  # escaped in JSON
    data = frame(inner) + b"junk" + frame({"id": 2, "method": "y"})
    reader, told = reader_of(data)
    assert json.loads(reader.next())["params"]["text"] == inner["params"]["text"]
    assert json.loads(reader.next())["id"] == 2
    assert reader.next() is None
    assert len(told) == 1 and told[0].startswith("skipped a message without a Content-Length header")


def test_a_header_with_a_short_made_up_body_does_not_cost_the_message_after_it():
    good = frame({"id": 3, "method": "z"})
    reader, told = reader_of(b"Content-Length: 3\r\n\r\n" + good)  # the 'body' is `Con` of the next header
    assert json.loads(reader.next())["id"] == 3
    assert told == ["skipped a message that is not JSON (3 bytes); reading on from the next message"]
