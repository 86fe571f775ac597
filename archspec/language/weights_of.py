"""`weights_of: PATH` on a node: it uses the weights of the node PATH names (DeBERTa's
share_att_key: one linear applied to two inputs; a tower tied to another). The two nodes hold the
same primitive nodes (a primitive, or a block or group with the same nodes inside), each of the
same op with the same parameters; the pairs go into expand's shares, so costing, lowering,
weight loading, export and model.py treat them as the copies of a `share: true` repeat.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import Loc, error
from .scope import Alias, Compound, Out, Ref, lookup

HINT = "nodes that share weights compute the same op with the same parameters (one set of weights serves both)"


@dataclass(frozen=True)
class Tie:
    """A kept node with `weights_of`: its path, the reference, and its primitive nodes (pending)."""

    path: str
    ref: Ref
    mine: dict  # path inside the node ("" for a primitive) -> its Pending


def inside(name: str, path: str) -> str:
    """`name`'s path inside the node at `path` ("" for the node itself)."""
    return "" if name == path else name[len(path) + 1:]


def weight_nodes(value, text: str, tie: Tie, prefix: str = "") -> dict[str, str]:
    """Path inside the named node -> name of each primitive node it holds (skipped ones hold none)."""
    if isinstance(value, Out):
        return {prefix: value.node}
    if isinstance(value, Compound):
        found: dict[str, str] = {}
        for key, member in value.members.items():
            if not isinstance(member, (Alias, Ref)):
                found.update(weight_nodes(member, text, tie, f"{prefix}.{key}" if prefix else key))
        if found or prefix:
            return found
    what = "is skipped (its `if` is false) or is an input" if isinstance(value, Alias) else "holds no nodes"
    raise error(f"`weights_of: {text}`: '{text}' {what}, so it has no weights to share", tie.ref.loc, tie.path,
                hint="name a kept node that has weights")


def where(loc: Loc | None, here: Loc | None) -> str:
    if loc is None:
        return ""
    return f" (line {loc.line})" if here is not None and loc.file == here.file else f" ({loc.file}:{loc.line})"


def tied_pairs(tie: Tie, pending: dict) -> list[tuple[str, str]]:
    """(node, node whose weights it uses) for each primitive node of `tie`, or a located error when the
    two nodes differ in their nodes, ops or parameters."""
    text, loc = tie.ref.text, tie.ref.loc
    theirs = weight_nodes(lookup(tie.ref), text, tie)
    if any(name == tie.path or name.startswith(tie.path + ".") for name in theirs.values()):
        raise error(f"`weights_of: {text}` names this node itself", loc, tie.path,
                    hint="name another node, whose weights this one uses")
    missing = [name for name in theirs.values() if name not in pending]
    if missing:
        raise error(f"`weights_of: {text}`: '{missing[0]}' is an input, not a node with weights", loc, tie.path)
    extra, lacking = sorted(set(tie.mine) - set(theirs)), sorted(set(theirs) - set(tie.mine))
    if extra or lacking:
        what = (f"'{extra[0]}', which '{text}' lacks" if extra else f"no '{lacking[0]}', which '{text}' has")
        raise error(f"`weights_of: {text}`: the two nodes differ: this one has {what}", loc, tie.path, hint=HINT)
    pairs = []
    for rel, mine in tie.mine.items():
        other = pending[theirs[rel]]
        label = f"'{other.name}'{where(other.loc, loc)}"
        if mine.op is not other.op:
            raise error(f"`weights_of: {text}`: {mine.name} is {mine.op.label} and {label} is {other.op.label}",
                        loc, tie.path, hint=HINT)
        key = differing_parameter(mine, other)
        if key is not None:
            a, b = getattr(mine.params, key), getattr(other.params, key)
            raise error(f"`weights_of: {text}`: {mine.name} has {key} {a!r} and {label} has {key} {b!r}",
                        mine.param_locs.get(key, loc), tie.path, hint=HINT)
        pairs.append((mine.name, other.name))
    return pairs


def differing_parameter(mine, other) -> str | None:
    """The first parameter (other than those naming nodes) whose values differ."""
    a, b = mine.params.model_dump(), other.params.model_dump()
    return next((k for k in a if k not in mine.op.refs and a[k] != b.get(k)), None)
