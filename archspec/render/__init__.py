"""Pictures of a spec: `archspec graph` and the build's report.html.

    picture.py   what is drawn: boxes, clusters (blocks, groups, repeats collapsed), edges, errors
    layout.py    where it goes in the SVG: a layered layout, no external program
    svg.py       the picture as self-contained SVG
    dot.py       as Graphviz DOT (.dot, .gv)
    mermaid.py   as a Mermaid flowchart (.mmd; .md wraps it in a fenced block)
    html.py      report.html: the SVG, params and FLOPs per stage as a chart, the per-node table
    files.py     the format that a file name asks for

This package is part of the face (it reads the IR and the report; nothing below imports it).
"""
