"""The language server: archspec's own located diagnostics published as the user types,
hover with a node's output shape, grid, params and FLOPs, and go to definition from `from:`
references, `outputs` paths, `tie`, block names and `extends`.

Every open spec is checked again when it changes, off the event loop and one check at a time
(checks.py): edits that come faster than checks replace one another, so only the newest text is
checked, a stale result is dropped, and diagnostics come for the newest text. A check takes
about a second at most (at archspec's 10,000-node limit); one that runs past 5 s is told on
the document as a warning rather than waited for. Hover and definition never start a check:
they wait at most `ANSWER_WAIT` for the check of the text they point into, then answer from the
last finished check, at the line that was where they point (the same line above the lines an
edit changed, shifted below them; inside a change of more than one line, no answer rather than
another node's).

Only documents the editor opened are read: a hover or a save naming any other file (a FIFO, a
device) reads nothing from disk. stdin is read through framing.py, which skips broken framing
(a missing or negative Content-Length, random bytes, a truncated message) with a line on stderr
and goes on with the next message.
"""

from __future__ import annotations

import os
import sys
from typing import BinaryIO
from urllib.parse import unquote

from .. import __version__
from .analysis import Analysis, Place, analyse, definition, diagnostics, hover, looks_like_spec
from .checks import Checks, Snapshot
from .framing import Frames, MessageReader

SEVERITY = {"error": 1, "warning": 2}  # LSP DiagnosticSeverity: Error, Warning
ANSWER_WAIT = 0.25  # seconds a hover or definition waits for the check of the newest text


def make_server():
    from lsprotocol import types
    from pygls.lsp.server import LanguageServer
    from pygls.uris import from_fs_path, to_fs_path

    server = LanguageServer("archspec", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)

    def publish(snapshot: Snapshot, found: list) -> None:
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=snapshot.uri, diagnostics=found, version=snapshot.version))

    def at_top(snapshot: Snapshot, message: str, severity: int) -> list:
        first = snapshot.text.split("\n", 1)[0]
        return [types.Diagnostic(range=types.Range(types.Position(0, 0), types.Position(0, len(first))),
                                 message=message, severity=types.DiagnosticSeverity(severity), source="archspec")]

    def checked(snapshot: Snapshot, analysis: Analysis) -> None:
        publish(snapshot, [types.Diagnostic(
            range=types.Range(types.Position(f.line, f.start), types.Position(f.line, f.end)),
            message=f.message, severity=types.DiagnosticSeverity(SEVERITY[f.severity]), source="archspec")
            for f in diagnostics(analysis)])

    def failed(snapshot: Snapshot, error: Exception) -> None:
        publish(snapshot, at_top(snapshot, "archspec crashed checking this spec (a defect in archspec; the "
                                 f"server's log has the details): {type(error).__name__}: {error}", 1))

    def slow(snapshot: Snapshot, seconds: float) -> None:
        publish(snapshot, at_top(snapshot, f"this check has run for over {seconds:g} s (a very large spec, or a busy "
                                 "machine); its diagnostics come when it ends, and hover and go to definition "
                                 "answer from the last finished check meanwhile", 2))

    checks = Checks(lambda snapshot: analyse(snapshot.text, snapshot.path), checked, failed, slow)

    def opened(uri: str):
        """The editor's text of a document it opened; None for any other (never read from disk)."""
        return server.workspace.text_documents.get(unquote(uri))

    def refresh(uri: str) -> None:
        document = opened(uri)
        if document is None:
            return
        if not looks_like_spec(document.source):
            checks.forget(uri)
            server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
            return
        checks.submit(Snapshot(uri, to_fs_path(uri) or uri, document.source, document.version))

    async def answering(uri: str, line: int) -> tuple[Analysis, int, str] | None:
        """The check to answer a request at `line` from, where that line is in its text, and the
        newest text: the newest text's check, or an older one where the line is still there."""
        analysis = await checks.settled(uri, ANSWER_WAIT)
        newest = checks.newest.get(uri)
        if analysis is None or newest is None:
            return None
        old_line = line_in(analysis.text, newest.text, line)
        return (analysis, old_line, newest.text) if old_line is not None else None

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls, params: types.DidOpenTextDocumentParams):
        refresh(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls, params: types.DidChangeTextDocumentParams):
        refresh(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls, params: types.DidSaveTextDocumentParams):
        refresh(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls, params: types.DidCloseTextDocumentParams):
        checks.forget(params.text_document.uri)
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def on_hover(ls, params: types.HoverParams):
        found = await answering(params.text_document.uri, params.position.line)
        text = hover(found[0], found[1], params.position.character) if found else None
        if text is None:
            return None
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    async def on_definition(ls, params: types.DefinitionParams):
        found = await answering(params.text_document.uri, params.position.line)
        place = definition(found[0], found[1], params.position.character) if found else None
        line = now_at(place, found[0], found[2]) if place else None
        if line is None:
            return None
        position = types.Position(line, place.character)
        return types.Location(uri=from_fs_path(place.path) or place.path, range=types.Range(position, position))

    return server


def now_at(place: Place, analysis: Analysis, newest: str) -> int | None:
    """The line a definition found by a check is at in the document's newest text (a line of
    another file: as it is; None: that line has changed since)."""
    if place.path != os.path.abspath(analysis.path):
        return place.line
    return line_in(newest, analysis.text, place.line)


def line_in(old: str, new: str, line: int) -> int | None:
    """Where the 0-based `line` of the new text is in the old one: the same line above the lines
    that differ, shifted by the lines added or removed below them; inside them, only when one
    line changed into one line (its old text); else None."""
    a, b = old.split("\n"), new.split("\n")
    shortest = min(len(a), len(b))
    start = next((i for i in range(shortest) if a[i] != b[i]), shortest)
    tail = next((i for i in range(shortest - start) if a[-1 - i] != b[-1 - i]), shortest - start)
    if line < start:
        return line
    if line >= len(b) - tail:  # below the lines that differ
        return line - len(b) + len(a)
    one_line_each = len(a) - tail - start == 1 and len(b) - tail - start == 1
    return line if one_line_each else None


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Run the server on these streams until the editor says exit or stdin ends."""
    make_server().start_io(Frames(MessageReader(stdin)), stdout)


def serve_stdio() -> None:
    serve(sys.stdin.buffer, sys.stdout.buffer)
