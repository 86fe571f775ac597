"""`archspec lsp`: a language server for spec files (pygls, over stdio).

    analysis.py    what the server knows about one spec: diagnostics, hover, go to definition
    params.py      hover on a param: its value and where it is used
    context.py     where the cursor is, read from the text alone (the line may be half typed)
    completion.py  what may be typed at the cursor: keys, ops, kinds, parameters, node names, params
    actions.py     quick fixes: each did-you-mean, the word meant put in place
    lines.py       where a line of the checked text is in the newest text
    checks.py      checking off the event loop: one check at a time, the newest text next
    framing.py     reading the editor's messages from stdin, skipping broken framing
    server.py      the LSP wiring (pygls): documents opened and changed, and each request

It needs the `lsp` extra (`pip install 'archspec-compiler[lsp]'`). Part of the face: it runs the
pipeline (pipeline.attempt_document) on the editor's text; nothing below imports it.
"""
