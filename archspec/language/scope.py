"""What a name in a spec's graph stands for, and how references are resolved.

While expanding, a name in a scope stands for a value: a primitive node's output (`Out`), a
node with nodes inside (an inline group, a block use, a repeat: `Compound`, its members and
the value reading it gives), a skipped node that passes its input on (`Alias`), or a reference
not yet resolved (`Ref`, from `from:`, `outputs` or a parameter naming a node). References may
point forward, so they are resolved (`resolve`, `lookup`) once every node exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..core.errors import Loc, SpecError, error
from .hints import some, suggest
from .values import POISON


@dataclass
class Out:
    node: str  # a primitive node's output


@dataclass
class Compound:
    """A node with nodes inside: an inline group, a block use, a repeat (its copies `0`, `1`, ...)."""

    out: Any  # the value reading it gives
    members: dict[str, Any] = field(default_factory=dict)


@dataclass
class Ref:
    text: str  # "encoder", "stages.1.norm"
    scope: "Scope"
    loc: Loc | None
    owner: str | None = None  # path of the node that holds the reference (None: `outputs`)


@dataclass
class Alias:
    target: Any  # a skipped node (if: false, repeat: 0) stands for its input
    name: str | None = None  # the skipped node's path, for an error found through it


@dataclass
class Absent:
    """A skipped node that reads nothing (a `param`, a `constant`): it has no input to stand for,
    so a node naming it is refused (it passed on the node before it: `add [h, bias]` was h + h,
    the YOLOS trial). The chain of nodes without `from` goes on past it."""

    name: str
    loc: Loc | None


class Scope:
    def __init__(self, parent: "Scope | None"):
        self.parent = parent
        self.names: dict[str, Any] = {}
        self.where: dict[str, Loc | None] = {}
        self.skipped: set[str] = set()  # ids of nodes whose `if` is false: an active node may take them
        self.shared: dict[str, int] = {}  # id -> how many nodes of this graph give it (alternatives: 2 or more)
        self.kept: dict[str, tuple] = {}  # id -> (path, location) of the node kept under it

    def visible(self) -> list[str]:
        scope, names = self, []
        while scope:
            names += list(scope.names)
            scope = scope.parent
        return names


def resolve(value, memo: dict | None = None) -> str | None:
    """The IR node a value stands for (None when it is poisoned).

    Followed iteratively: a chain of skipped nodes (`if: false`, `repeat: 0`) and `from`
    references through them may be as long as the spec is. `memo` (id of a value -> the value
    and its node; holding the value keeps its id from being reused) makes resolving every node
    of such a chain linear, not quadratic."""
    memo = {} if memo is None else memo
    walked: list = []  # the values followed, each standing for the node found at the end
    seen: set = set()  # references followed, to refuse a loop among them
    node = None
    while True:
        if value is POISON or value is None:
            break
        known = memo.get(id(value))
        if known is not None and known[0] is value:
            node = known[1]
            break
        if isinstance(value, Out):
            node = value.node
            break
        walked.append(value)
        if isinstance(value, Absent):
            raise absent_error(value, walked)
        if isinstance(value, Compound):
            value = value.out
        elif isinstance(value, Alias):
            value = value.target
        elif isinstance(value, Ref):
            key = (value.text, id(value.scope))
            if key in seen:
                raise error(f"'{value.text}' refers to itself through skipped nodes", value.loc, value.owner)
            seen.add(key)
            try:
                value = lookup(value)
            except SpecError as exc:
                raise through_skipped(exc, walked) from None
        else:
            raise RuntimeError(f"expand: unexpected value {value!r}")
    for followed in walked:
        memo[id(followed)] = (followed, node)
    return node


def through_skipped(exc: SpecError, walked: list) -> SpecError:
    """A reference's error, found by following switched-off nodes (`if: false`, `repeat: 0`, each
    passing on its first input), with the nodes it went through: the Hiera trial was told of
    the `from` of a node off in that block, reached from a later node without `from`."""
    skipped = [v.name for v in walked if isinstance(v, Alias) and v.name]
    if not skipped:
        return exc
    first = exc.diagnostics[0]
    nodes = "node " + skipped[0] if len(skipped) == 1 else "nodes " + ", ".join(skipped)
    hint = "a node after them without `from` reads what they pass on: give it a `from:`"
    said = replace(first, message=f"{first.message}, read through the switched-off {nodes} (each passes on its "
                                  "first input)", suggestion=None, hint=f"{first.hint}; {hint}" if first.hint else hint)
    return SpecError([said, *exc.diagnostics[1:]])


def absent_error(value: Absent, walked: list):
    """The error of a reference that reaches a skipped node reading nothing, at the reference; one
    that got there through other switched-off nodes is told at the reader that started the walk
    (AIMv2's trial: an `outputs:` entry naming a node off under the same condition was blamed on
    that node's `from`)."""
    skipped = [v.name for v in walked if isinstance(v, Alias) and v.name]
    reader = next((v for v in walked if isinstance(v, Ref)), None)
    if skipped and reader is not None:
        chain = f", and through the switched-off {', '.join(skipped[1:])} that leads to" if skipped[1:] else ""
        where = "this output" if reader.owner is None else "this node"
        return error(f"'{reader.text}' is switched off (its `if` is false) and passes on its first input{chain} "
                     f"'{value.name}', which is off too and reads nothing: {where} has nothing to read",
                     reader.loc, reader.owner,
                     hint="an output is always there: name a node that is, or leave the output out with a spec that "
                          "extends this one" if reader.owner is None else
                          f"switch this node off under the same condition as '{reader.text}'")
    ref = next((v for v in reversed(walked) if isinstance(v, Ref)), None)
    return error(f"'{value.name}' is switched off (its `if` is false) and reads nothing, so it has no input to pass "
                 "on for this node to read", ref.loc if ref else value.loc, ref.owner if ref else None,
                 hint=f"switch this node off under the same condition, or give '{value.name}' an alternative "
                      "kept when it is off (a node with the same id and the opposite `if`, e.g. a constant of "
                      "zeros)")


def lookup(ref: Ref):
    """The value a reference's text names: its first part in the nearest scope that has it,
    then members of groups for the dotted rest."""
    first, *rest = ref.text.split(".")
    scope = ref.scope
    while scope is not None and first not in scope.names:
        scope = scope.parent
    if scope is None:
        visible = ref.scope.visible()
        hint = suggest(first, visible) or f"known here: {some(visible)}"
        if first == "x":  # a block's input, read inside an inline group or a repeat
            hint = (f"{hint}; `x` is a block's input: an inline group or a repeated `graph:` has none (its "
                    "first node reads what comes in), so to read it again, e.g. for a residual, write the "
                    "group as a block (section 3.5) and use it by name")
        raise error(f"unknown node '{first}'", ref.loc, ref.owner, hint=hint)
    value, walked = scope.names[first], first
    for part in rest:
        while isinstance(value, Alias) and isinstance(value.target, Compound):
            value = value.target
        members = value.members if isinstance(value, Compound) else {}
        if part not in members:
            known = some(members) if members else "nothing"
            hint = suggest(part, members)
            if hint is None and members and all(k.isdigit() for k in members) and part.isdigit():
                hint = f"'{walked}' is repeated {len(members)} times: a copy's index is 0 to {len(members) - 1}"
            elif hint is None and members and all(k.isdigit() for k in members):
                hint = f"'{walked}' is repeated: name one repetition, e.g. {walked}.{list(members)[-1]}.{part}"
            raise error(f"'{walked}' has no member '{part}' (it has {known})", ref.loc, ref.owner, hint=hint)
        value, walked = members[part], f"{walked}.{part}"
    return value
