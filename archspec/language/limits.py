"""Every limit a spec meets, in one place, with the reason for its value.

A spec is untrusted text: these bounds keep `archspec check` fast (about a second at worst
on one core) and its memory small whatever the text says, and each is reported as such when a spec reaches it (a located
error that names the limit), never as a crash. README.md's Security section lists them;
tests/hostile/test_hostile.py shows each one reached. They sit far beyond what a real architecture
needs: the largest shipped spec uses a few hundred nodes, nesting of 4 and params chains of 3.
"""

from __future__ import annotations

# -- the text ----------------------------------------------------------------------------------
MAX_TEXT_BYTES = 256 << 10  # a spec file (or --set value): a page of text (the shipped ones: 1-4 KiB)
MAX_VALUES = 100_000  # values once YAML anchors and aliases are expanded ("billion laughs"); also
# of a spec and every spec it `extends`, together (extends.py), so that a chain costs what one file may
MAX_DEPTH = 64  # nesting of YAML lists and mappings
MAX_INT = 2**63  # integers, literal or computed: a size or count beyond this cannot be built

# -- expressions -------------------------------------------------------------------------------
MAX_EXPRESSION = 1_000  # characters of one ${...}
MAX_EXPRESSION_DEPTH = 100  # nesting of one expression's operations: (((a))), -(-(-x)), a+b+c+...
MAX_LIST = 10_000  # items of a computed list (nested lists count all), characters of a string
MAX_WORK = 2_000_000  # list items and characters all the expressions of one spec compute or consume

# -- the graph ---------------------------------------------------------------------------------
MAX_REPEAT = 10_000  # copies of one repeated node
MAX_NODES = 10_000  # primitive nodes once blocks and repeats are expanded (GPT-3's 96 layers: ~400)
MAX_NESTING = 32  # blocks and inline groups inside one another
MAX_EXTENDS = 16  # levels of `extends`

# Chains that resolve one into another are followed iteratively, so their length is bounded only
# by the limits above: params defined from one another (`a: ${b}`, `b: ${c}`, ...), skipped nodes
# (`if: false`, `repeat: 0`) that pass their input on, and `from` references through them.

LIMITS = {  # name -> (value, what it bounds): for README's Security section and error hints
    "MAX_TEXT_BYTES": (MAX_TEXT_BYTES, "bytes of a spec file"),
    "MAX_VALUES": (MAX_VALUES, "values after YAML aliases are expanded"),
    "MAX_DEPTH": (MAX_DEPTH, "nesting of YAML lists and mappings"),
    "MAX_INT": (MAX_INT, "magnitude of an integer"),
    "MAX_EXPRESSION": (MAX_EXPRESSION, "characters of one expression"),
    "MAX_EXPRESSION_DEPTH": (MAX_EXPRESSION_DEPTH, "nesting of one expression"),
    "MAX_LIST": (MAX_LIST, "items of a computed list or characters of a string"),
    "MAX_WORK": (MAX_WORK, "list items and characters all expressions of a spec compute"),
    "MAX_REPEAT": (MAX_REPEAT, "copies of one repeated node"),
    "MAX_NODES": (MAX_NODES, "nodes once blocks and repeats are expanded"),
    "MAX_NESTING": (MAX_NESTING, "blocks and groups inside one another"),
    "MAX_EXTENDS": (MAX_EXTENDS, "levels of extends"),
}
