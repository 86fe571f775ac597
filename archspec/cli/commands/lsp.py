"""`archspec lsp`: the language server, over stdio (for VS Code, Neovim, Helix, ...)."""

from __future__ import annotations

from ...core.errors import UsageError

NAME = "lsp"
HELP = "run the language server over stdio (diagnostics, hover, go to definition); needs the lsp extra"


def add_arguments(parser) -> None:
    parser.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default and only way)")


def run(args) -> int:
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError:
        raise UsageError("the language server needs pygls: pip install 'archspec-compiler[lsp]'") from None
    from ...lsp.server import serve_stdio

    serve_stdio()
    return 0
