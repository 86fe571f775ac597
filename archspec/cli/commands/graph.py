"""`archspec graph SPEC -o FILE`: a picture of the architecture.

The format follows the file's extension: .svg (self-contained; no external program), .dot
or .gv (Graphviz), .mmd (Mermaid), .md (Mermaid in a fenced block), .html (the SVG in a page
with the per-stage chart and, when the spec checks, the per-node table). Repeats whose copies
are alike are drawn once (`blocks ×6`); `--expand` draws every copy. A spec that does not
check is drawn as far as it goes, its failing nodes red with their errors; the errors are
printed as by `check`, and the exit code is 1.
"""

from __future__ import annotations

import os

from ...core.errors import UsageError
from .common import add_spec_arguments, overrides_of, spec_path

NAME = "graph"
HELP = "draw the architecture: SVG, DOT, Mermaid or HTML, by the output file's extension"


def add_arguments(parser) -> None:
    add_spec_arguments(parser)
    parser.add_argument("-o", "--output", metavar="FILE", default=None,
                        help="where to write: .svg, .dot/.gv, .mmd/.md or .html (default: SPEC's name with .svg)")
    parser.add_argument("--expand", action="store_true", help="draw every copy of a repeat instead of `blocks ×N`")


def run(args) -> int:
    from ...pipeline import attempt_file
    from ...render.files import format_of, render
    from ...render.picture import picture
    from ...core.output import print_errors

    path = spec_path(args)
    out = args.output or os.path.splitext(os.path.basename(path))[0] + ".svg"
    fmt = format_of(out)
    folder = os.path.dirname(out)
    if folder and not os.path.isdir(folder):
        raise UsageError(f"no such folder: {folder} (for {out})")
    attempt = attempt_file(path, overrides_of(args))
    if fmt == "html" and attempt.report is not None:
        from ...render.html import report_html

        text = report_html(attempt.report, expand=args.expand)
    else:
        name = attempt.graph.name if attempt.graph is not None else os.path.basename(path)
        text = render(picture(attempt.graph, attempt.error, expand=args.expand, name=name), fmt)
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror}") from None
    if attempt.error is not None:
        print_errors(attempt.error, False)
        count = len(attempt.error.diagnostics)
        print(f"wrote {out}: the graph as far as it checks, with {count} error{'s' if count != 1 else ''} drawn")
        return 1
    print(f"wrote {out}")
    return 0
