"""The language server: archspec's own located diagnostics published as the user types,
hover with a node's output shape, grid, params and FLOPs (and on a param, its value and its
uses: params.py), go to definition from `from:` references, `outputs` paths, `tie`, block names
and `extends`, completion (completion.py) and a quick fix for every did-you-mean (actions.py).

Every open spec is checked again when it changes, off the event loop and one check at a time
(checks.py): edits that come faster than checks replace one another, so only the newest text is
checked, a stale result is dropped, and diagnostics come for the newest text. A check takes
about a second at most (at archspec's 10,000-node limit); one that runs past 5 s is told on
the document as a warning rather than waited for. Hover, definition and code actions never start a
check: they wait at most `ANSWER_WAIT` for the check of the text they point into, then answer
from the last finished check, at the line that was where they point (the same line above the
lines an edit changed, shifted below them; inside a change of more than one line, no answer
rather than another node's). Completion does not wait: it reads the newest text around the
cursor, and what the spec defines from the last check that loaded it (the line being typed
rarely parses).

A request whose handler fails (a defect in archspec) is answered with nothing and a traceback
on stderr (the editor's log of the server); the server goes on. A request whose params do not
fit its method (a hover without a position) is answered with JSON-RPC's Invalid Params error,
so that the editor does not wait for it forever (pygls itself answers nothing and logs a
traceback); a notification with such params is dropped with one line on stderr.

Only documents the editor opened are read: a hover or a save naming any other file (a FIFO, a
device) reads nothing from disk. stdin is read through framing.py, which skips broken framing
(a missing or negative Content-Length, random bytes, a truncated message) with a line on stderr
and goes on with the next message.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import traceback
from typing import BinaryIO
from urllib.parse import unquote

from .. import __version__
from .actions import fixes
from .analysis import Analysis, Found, Place, analyse, definition, diagnostics, hover, looks_like_spec
from .checks import Checks, Snapshot
from .completion import complete
from .framing import Frames, MessageReader
from .lines import line_in
from .params import param_hover

SEVERITY = {"error": 1, "warning": 2}  # LSP DiagnosticSeverity: Error, Warning
ITEM_KIND = {"key": 10, "op": 3, "block": 9, "kind": 20, "parameter": 10, "node": 18, "param": 6}  # LSP kinds
TRIGGERS = [":", " ", "{", "[", ",", "-"]  # characters after which an editor asks for completion
ANSWER_WAIT = 0.25  # seconds a hover or definition waits for the check of the newest text


def make_server():
    from lsprotocol import types
    from pygls.lsp.server import LanguageServer
    from pygls.uris import from_fs_path, to_fs_path

    server = LanguageServer("archspec", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full,
                            protocol_cls=answering_protocol())

    def publish(snapshot: Snapshot, found: list) -> None:
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=snapshot.uri, diagnostics=found, version=snapshot.version))

    def at_top(snapshot: Snapshot, message: str, severity: int) -> list:
        first = snapshot.text.split("\n", 1)[0]
        return [types.Diagnostic(range=types.Range(types.Position(0, 0), types.Position(0, len(first))),
                                 message=message, severity=types.DiagnosticSeverity(severity), source="archspec")]

    def lsp_diagnostic(f: Found, line: int) -> types.Diagnostic:
        return types.Diagnostic(range=types.Range(types.Position(line, f.start), types.Position(line, f.end)),
                                message=f.message, severity=types.DiagnosticSeverity(SEVERITY[f.severity]),
                                source="archspec")

    loaded: dict[str, Analysis] = {}  # each document's last check that loaded it (for completion)

    def checked(snapshot: Snapshot, analysis: Analysis) -> None:
        if analysis.own is not None:
            loaded[snapshot.uri] = analysis
        publish(snapshot, [lsp_diagnostic(f, f.line) for f in diagnostics(analysis)])

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
        loaded.pop(params.text_document.uri, None)
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @safely
    async def on_hover(ls, params: types.HoverParams):
        found = await answering(params.text_document.uri, params.position.line)
        at = (found[0], found[1], params.position.character) if found else None
        text = (param_hover(*at) or hover(*at)) if at else None
        if text is None:
            return None
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    @safely
    async def on_definition(ls, params: types.DefinitionParams):
        found = await answering(params.text_document.uri, params.position.line)
        place = definition(found[0], found[1], params.position.character) if found else None
        line = now_at(place, found[0], found[2]) if place else None
        if line is None:
            return None
        position = types.Position(line, place.character)
        return types.Location(uri=from_fs_path(place.path) or place.path, range=types.Range(position, position))

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=TRIGGERS))
    @safely
    def on_completion(ls, params: types.CompletionParams):
        uri, position = params.text_document.uri, params.position
        document = opened(uri)
        if document is None or not looks_like_spec(document.source):
            return None
        found = complete(document.source, position.line, position.character, loaded.get(uri))
        if found is None:
            return None
        replaced = types.Range(types.Position(position.line, found.start), position)
        return types.CompletionList(is_incomplete=found.cut, items=[types.CompletionItem(
            label=item.label, kind=types.CompletionItemKind(ITEM_KIND[item.kind]), detail=item.detail or None,
            text_edit=types.TextEdit(range=replaced, new_text=item.label)) for item in found.items])

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]))
    @safely
    async def on_code_action(ls, params: types.CodeActionParams):
        uri, wanted = params.text_document.uri, params.range
        found = await answering(uri, wanted.start.line)
        newest = checks.newest.get(uri)
        if found is None or newest is None:
            return None
        return [types.CodeAction(
            title=fix.title, kind=types.CodeActionKind.QuickFix, is_preferred=True,
            diagnostics=[lsp_diagnostic(fix.found, fix.found_line)],
            edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(
                range=types.Range(types.Position(fix.line, fix.start), types.Position(fix.line, fix.end)),
                new_text=fix.meant)]}))
            for fix in fixes(found[0], newest.text, wanted.start.line, wanted.end.line)] or None

    return server


def answering_protocol():
    """pygls's protocol, except that a message whose params do not fit its method is answered
    (a request: Invalid Params) or dropped (a notification) instead of raised into its reader,
    which logs a traceback and leaves a request unanswered."""
    import logging

    from pygls.exceptions import JsonRpcException
    from pygls.protocol import LanguageServerProtocol

    logging.getLogger("pygls.protocol.json_rpc").addFilter(not_deserialize_failures)

    class AnsweringProtocol(LanguageServerProtocol):
        def structure_message(self, data):
            try:
                return super().structure_message(data)
            except JsonRpcException as error:  # `data` is a JSON object: json.loads's object_hook
                method = data.get("method", "a message")
                if "id" in data and "method" in data:
                    self._send_response(data["id"], error=error.to_response_error())
                    print(f"archspec lsp: {method}: {error.message.lower()}, answered with an error",
                          file=sys.stderr, flush=True)
                else:
                    print(f"archspec lsp: {method}: {error.message.lower()}, dropped", file=sys.stderr, flush=True)
                return NOT_HANDLED

        def handle_message(self, message):
            if message is not NOT_HANDLED:
                super().handle_message(message)

    return AnsweringProtocol


NOT_HANDLED = object()  # a message answered or dropped while it was read


def not_deserialize_failures(record) -> bool:
    """A logging filter: pygls's own report (with a traceback) of a message it could not read,
    which AnsweringProtocol answers or drops with a line of its own, is left out."""
    return not str(record.msg).startswith("Unable to deserialize message")


def safely(handler):
    """A request handler that answers nothing, with a traceback on stderr, when it fails (a
    defect in archspec), rather than an error the editor may show on every keystroke."""
    if inspect.iscoroutinefunction(handler):
        @functools.wraps(handler)
        async def guarded(*args, **kwargs):
            try:
                return await handler(*args, **kwargs)
            except Exception:
                traceback.print_exc()
                return None
    else:
        @functools.wraps(handler)
        def guarded(*args, **kwargs):
            try:
                return handler(*args, **kwargs)
            except Exception:
                traceback.print_exc()
                return None
    return guarded


def now_at(place: Place, analysis: Analysis, newest: str) -> int | None:
    """The line a definition found by a check is at in the document's newest text (a line of
    another file: as it is; None: that line has changed since)."""
    if place.path != os.path.abspath(analysis.path):
        return place.line
    return line_in(newest, analysis.text, place.line)


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Run the server on these streams until the editor says exit or stdin ends."""
    make_server().start_io(Frames(MessageReader(stdin)), stdout)


def serve_stdio() -> None:
    serve(sys.stdin.buffer, sys.stdout.buffer)
