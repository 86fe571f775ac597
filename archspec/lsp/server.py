"""The language server: archspec's own located diagnostics published as the user types,
hover with a node's output shape, grid, params and FLOPs, and go to definition from `from:`
references, `outputs` paths, `tie`, block names and `extends`.

Every open spec is checked again on each change (a check takes well under a second; a failed
one's hints are solved within about 0.25 s); hover and definition read the latest check.
"""

from __future__ import annotations

from .. import __version__
from .analysis import Analysis, analyse, definition, diagnostics, hover, looks_like_spec

SEVERITY = {"error": 1, "warning": 2}  # LSP DiagnosticSeverity: Error, Warning


def make_server():
    from lsprotocol import types
    from pygls.lsp.server import LanguageServer
    from pygls.uris import from_fs_path, to_fs_path

    server = LanguageServer("archspec", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)
    analyses: dict[str, Analysis] = {}

    def refresh(uri: str) -> None:
        document = server.workspace.get_text_document(uri)
        path = to_fs_path(uri) or uri
        if not looks_like_spec(document.source):
            analyses.pop(uri, None)
            server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
            return
        analyses[uri] = analysis = analyse(document.source, path)
        found = [types.Diagnostic(
            range=types.Range(types.Position(f.line, f.start), types.Position(f.line, f.end)),
            message=f.message, severity=types.DiagnosticSeverity(SEVERITY[f.severity]), source="archspec")
            for f in diagnostics(analysis)]
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=found, version=document.version))

    def current(uri: str) -> Analysis | None:
        document = server.workspace.get_text_document(uri)
        if uri not in analyses or analyses[uri].text != document.source:
            refresh(uri)
        return analyses.get(uri)

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
        analyses.pop(params.text_document.uri, None)
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def on_hover(ls, params: types.HoverParams):
        analysis = current(params.text_document.uri)
        text = hover(analysis, params.position.line, params.position.character) if analysis else None
        if text is None:
            return None
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    def on_definition(ls, params: types.DefinitionParams):
        analysis = current(params.text_document.uri)
        place = definition(analysis, params.position.line, params.position.character) if analysis else None
        if place is None:
            return None
        position = types.Position(place.line, place.character)
        return types.Location(uri=from_fs_path(place.path) or place.path, range=types.Range(position, position))

    return server


def serve_stdio() -> None:
    make_server().start_io()
