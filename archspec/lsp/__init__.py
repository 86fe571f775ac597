"""`archspec lsp`: a language server for spec files (pygls, over stdio).

    analysis.py  what the server knows about one spec: diagnostics, hover, go to definition
    checks.py    checking off the event loop: one check at a time, the newest text next
    framing.py   reading the editor's messages from stdin, skipping broken framing
    server.py    the LSP wiring (pygls): documents opened and changed, hover, definition

It needs the `lsp` extra (`pip install 'archspec[lsp]'`). Part of the face: it runs the
pipeline (pipeline.attempt_document) on the editor's text; nothing below imports it.
"""
