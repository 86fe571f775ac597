"""Edits of an extended spec's graph: `remove`, `replace` and `insert` on its base's graph.

A path names a node of the base's graph by names, as expansion gives them (names.node_names):
`head` is the top-level node named head, `stages.downsample` the node named downsample in the
inline group `stages`. A node without `id` is named after its op (`norm`, `norm_1`, ...). Paths
go into inline groups only: not into blocks (redefine those under `blocks:`), nor into the
copies of a repeated node (it is one node in the spec). Alternatives (`if`) may share a name;
a path names all of them.

The three edits apply in the order remove, replace, insert; each sees the graph the one
before it left, and reads all its paths in that graph before it changes anything. Nodes that
stay keep their positions; the nodes an edit brings carry the child's.

Costs stay in proportion to the graph and the edits, not their product: the names of each list
of nodes are worked out once per edit (not once per path it reads), only the graph's positions
are visited, and a long list of unknown paths gets a "did you mean" for its first few only.
"""

from __future__ import annotations

import copy
import functools
import os
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import Loc, SpecError, error
from ..core.words import DidYouMean, one_of
from .loader import Document
from .names import node_names, taken_names
from .schema import GROUP, META_KEYS, SpecDoc, StrictSpecModel

EDITS = ("remove", "replace", "insert")  # edits of the base's graph, applied in this order
LISTED = 20  # names an unknown path's hint lists at most
HINTED = 20  # unknown paths of one spec's edits given a "did you mean" (each search reads every name)


def refuse_edits_without_base(doc: Document) -> None:
    """An error at each edit key of a spec that extends nothing."""
    if not isinstance(doc.data, dict):
        return
    problems = [error(f"`{key}` edits the graph of an extended spec, and this spec has no `extends`",
                      doc.loc((key,), key=True), hint="add `extends: <base>.yaml`, or write the nodes into `graph:`")
                for key in EDITS if key in doc.data]
    _raise_all(problems)


def edit_graph(out: Document, child: Document, base_file: str, edited: list | None = None) -> list | None:
    """Apply the child's `remove`, `replace` and `insert` to the base's graph in `out`, then
    drop them from `out` (expansion never sees them). `edited`: the graph as the edits of a spec
    further down the chain left it, not yet written into `out` (None: `out`'s own graph). Returns
    the graph as these edits leave it, for `write_graph` (a chain of specs that each edit the
    graph lays it out once, at the end, not once per spec), or `edited` when there are none."""
    keys = [key for key in EDITS if key in child.data]
    if not keys:
        return edited
    where = child.loc((keys[0],), key=True)
    named = _in_words([f"`{key}`" for key in keys])
    if GROUP in child.data:
        raise error(f"{named} edit{'s' if len(keys) == 1 else ''} the base's graph, but this spec gives its own "
                    f"`graph`", where,
                    hint=f"drop `graph` to edit the base's graph, or drop {named} to replace it whole")
    _check_edit_form(child, keys)
    if GROUP not in out.data:
        raise error(f"{named}: {os.path.basename(base_file)} has no graph to edit", where,
                    hint="give this spec its own `graph:`")
    for key in keys:
        out.drop_positions_of((key,), out.data.pop(key))
    if edited is None and not isinstance(out.data[GROUP], list):
        return None  # the schema check reports the base's graph
    editor = _GraphEditor(out, child, edited)
    edit = {"remove": editor.remove, "replace": editor.replace, "insert": editor.insert}
    for key in keys:
        edit[key](child.data[key])
    editor.report_problems()
    return editor.graph


def write_graph(out: Document, edited: list) -> None:
    """The graph `edit_graph` returned into the document, with its positions."""
    out.data[GROUP] = _write(out, (GROUP,), edited)


@functools.cache
def _edits_model():
    """The schema of the three edit keys, as SpecDoc gives them."""
    from ..core.declared import create_model

    fields = {key: (SpecDoc.model_fields[key].annotation, SpecDoc.model_fields[key]) for key in EDITS}
    return create_model("SpecEdits", __base__=StrictSpecModel, **fields)


def _check_edit_form(child: Document, keys: list[str]) -> None:
    from ..core.declared import ValidationError
    from .validation import diagnostics_from

    edits = {key: child.data[key] for key in keys}
    try:
        _edits_model().model_validate(edits)
    except ValidationError as exc:
        raise SpecError(diagnostics_from(exc, edits, child, (), _edits_model(), "the spec")) from None


def _in_words(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


def _raise_all(problems: list[SpecError]) -> None:
    if problems:
        raise SpecError([d for p in problems for d in p.diagnostics])


@dataclass
class _Tables:
    """Source positions below one value, keyed by paths relative to it."""

    locs: dict[tuple, Loc] = field(default_factory=dict)
    key_locs: dict[tuple, Loc] = field(default_factory=dict)
    quoted: set[tuple] = field(default_factory=set)


def _paste(doc: Document, prefix: tuple, tables: _Tables) -> None:
    doc.locs.update({prefix + p: loc for p, loc in tables.locs.items()})
    doc.key_locs.update({prefix + p: loc for p, loc in tables.key_locs.items()})
    doc.quoted |= {prefix + p for p in tables.quoted}


@dataclass(eq=False)  # nodes are told apart by identity: two `- norm: {}` are two nodes
class _Node:
    value: Any  # the node's mapping as written (an inline group's nodes are in `nodes`)
    tables: _Tables  # its positions, relative to the node
    nodes: "list[_Node] | None" = None  # an inline group's nodes


def _build(value: Any, path: tuple, index: dict[tuple, _Node]) -> _Node:
    """The node written at `path` (an inline group with its nodes), each listed in `index` by its
    path; `_place` gives them their positions."""
    node = index[path] = _Node(value, _Tables())
    if isinstance(value, dict) and isinstance(value.get(GROUP), list):
        node.nodes = [_build(v, path + (GROUP, k), index) for k, v in enumerate(value[GROUP])]
    return node


def _place(doc: Document, index: dict[tuple, _Node]) -> None:
    """Give each node of `index` (path -> node) the positions written inside it and not inside
    one of its nodes, relative to it. One pass over the document's tables (the child's: the
    edits it brings)."""
    for path, loc in doc.locs.items():
        if (found := _owner(path, index)) is not None:
            found[1].tables.locs[found[0]] = loc
    for path, loc in doc.key_locs.items():
        if (found := _owner(path, index)) is not None and found[0]:  # not the key it is written under
            found[1].tables.key_locs[found[0]] = loc
    for path in doc.quoted:
        if (found := _owner(path, index)) is not None:
            found[1].tables.quoted.add(found[0])


def _move_graph_positions(doc: Document, index: dict[tuple, _Node]) -> None:
    """Give each node of `index` (the graph's nodes, by path) the positions written inside it and
    not inside one of its nodes, relative to it, taking them out of `doc`. Only the graph's paths
    are visited (found by walking its values), not the rest of a document that may be large."""
    stack = [((GROUP, k), item, index[(GROUP, k)], ()) for k, item in enumerate(doc.data[GROUP])]
    while stack:
        path, value, node, relative = stack.pop()
        loc, key_loc = doc.locs.pop(path, None), doc.key_locs.pop(path, None)
        if loc is not None:
            node.tables.locs[relative] = loc
        if key_loc is not None and relative:  # not the key it is written under
            node.tables.key_locs[relative] = key_loc
        if path in doc.quoted:
            doc.quoted.discard(path)
            node.tables.quoted.add(relative)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            inner = path + (key,)
            owner = index.get(inner)
            stack.append((inner, item, owner, ()) if owner is not None else (inner, item, node, relative + (key,)))


def _owner(path: tuple, index: dict[tuple, _Node]) -> tuple[tuple, _Node] | None:
    """(path relative to the node, node): the innermost node of `index` that `path` lies in."""
    for n in range(len(path), 0, -1):
        node = index.get(path[:n])
        if node is not None:
            return path[n:], node
    return None


def _brought(child: Document) -> dict[tuple, _Node]:
    """The nodes the child's `replace` and `insert` bring, by the path they are written at."""
    index: dict[tuple, _Node] = {}
    written = {("replace", path): value for path, value in child.data.get("replace", {}).items()}
    written |= {("insert", i, "nodes", j): value for i, edit in enumerate(child.data.get("insert", []))
                for j, value in enumerate(edit["nodes"])}
    brought = {path: _build(value, path, index) for path, value in written.items()}
    _place(child, index)
    return brought


def _write(doc: Document, path: tuple, nodes: list[_Node]) -> list:
    """The nodes' values for the list at `path`, their positions pasted there."""
    values = []
    for k, node in enumerate(nodes):
        _paste(doc, path + (k,), node.tables)
        value = node.value
        if node.nodes is not None:
            value = {**value, GROUP: _write(doc, path + (k, GROUP), node.nodes)}
        values.append(value)
    return values


def _named(raw: Any, name: str) -> Any:
    """A replacing node: without an `id` of its own it takes the name of the node it replaces,
    so that the nodes reading that one read it (and its path stays)."""
    if isinstance(raw, dict) and raw.get("id") is None:
        return {"id": name, **{k: v for k, v in raw.items() if k != "id"}}
    return raw


@dataclass
class _Match:
    nodes: list[_Node]  # the list that holds the node
    node: _Node
    owner: str  # path of the group that holds the list; "" for the top-level graph


def _by_list(matches: list[_Match]) -> list[tuple[list[_Node], list[_Node]]]:
    """(list, the matched nodes in it, in order) for each list the matches lie in."""
    lists: dict[int, tuple[list[_Node], list[_Node]]] = {}
    for m in matches:
        lists.setdefault(id(m.nodes), (m.nodes, []))[1].append(m.node)
    return list(lists.values())


class _GraphEditor:
    """The base's graph as a tree of nodes, which remove, replace and insert edit in turn."""

    def __init__(self, out: Document, child: Document, edited: list[_Node] | None = None):
        self.out, self.child = out, child
        if edited is None:
            index: dict[tuple, _Node] = {}
            edited = [_build(v, (GROUP, k), index) for k, v in enumerate(out.data[GROUP])]
            _move_graph_positions(out, index)
        self.graph = edited
        self.brought = _brought(child)
        self.taken = taken_names(out.data, (GROUP,))  # the top-level nodes' names count past these
        self.gone: dict[str, str] = {}  # paths an earlier edit took away -> that edit
        self.problems: list[SpecError] = []  # reported together once all edits are done
        self.reading: dict | None = None  # while an edit reads its paths: each list's names, worked out once
        self.hinted = 0  # unknown paths given a "did you mean" so far

    def report_problems(self) -> None:
        """Every problem the edits had, in the child's order (nothing when they had none)."""
        _raise_all(sorted(self.problems, key=lambda problem: (problem.loc.line, problem.loc.col) if problem.loc
                          else (0, 0)))

    # -- the edits ----------------------------------------------------------------------------------
    def remove(self, paths: list[str]) -> None:
        wheres = [self.child.loc(("remove", i)) for i in range(len(paths))]
        found = self.find_all(paths, wheres)
        before = self.paths()
        emptied: dict[int, tuple[str, Loc | None]] = {}  # a list -> (its group, the path that emptied it)
        removed: set[int] = set()  # the nodes removed (a path named twice removes its node once)
        left = {id(m.nodes): len(m.nodes) for matches in found for m in matches}  # nodes left in each list
        for loc, matches in zip(wheres, found):
            for m in matches:
                if id(m.node) not in removed:
                    removed.add(id(m.node))
                    left[id(m.nodes)] -= 1
                if not left[id(m.nodes)]:
                    emptied[id(m.nodes)] = (m.owner, loc)
        for nodes in {id(m.nodes): m.nodes for matches in found for m in matches}.values():
            nodes[:] = [node for node in nodes if id(node) not in removed]
        self.problems += [self.emptied(*emptied[id(nodes)]) for nodes in self.lists()
                          if not nodes and id(nodes) in emptied]
        self.forget(before, "remove")

    def replace(self, nodes: dict[str, Any]) -> None:
        paths = list(nodes)
        wheres = [self.child.loc(("replace", path), key=True) for path in paths]
        found = self.find_all(paths, wheres)
        replaced = [path for path, matches in zip(paths, found) if matches]
        self.problems += [self.inside_replaced(path, loc, replaced) for path, loc in zip(paths, wheres)
                          if self.replaced_around(path, replaced)]
        before = self.paths()
        for path, matches in zip(paths, found):
            for holder, targets in _by_list(matches):
                node = copy.deepcopy(self.brought[("replace", path)])
                node.value = _named(node.value, path.rsplit(".", 1)[-1])
                holder[holder.index(targets[0])] = node
                for target in targets[1:]:  # alternatives sharing the name: the replacement takes all their places
                    holder.remove(target)
        self.forget(before, "replace")

    def insert(self, edits: list[dict]) -> None:
        sides = [self.side(i, edit) for i, edit in enumerate(edits)]
        wheres = [self.child.loc(("insert", i, side)) for i, side in enumerate(sides)]
        found = self.find_all([edit[side] if side else None for edit, side in zip(edits, sides)], wheres)
        last_after: dict[_Node, _Node] = {}  # a node -> the last node inserted after it (they go in order)
        for i, (side, matches) in enumerate(zip(sides, found)):
            for holder, targets in _by_list(matches):
                new = [copy.deepcopy(self.brought[("insert", i, "nodes", j)]) for j in range(len(edits[i]["nodes"]))]
                if side == "before":
                    at = holder.index(targets[0])
                else:
                    at = holder.index(last_after.get(targets[-1], targets[-1])) + 1
                    last_after[targets[-1]] = new[-1]
                holder[at:at] = new

    def side(self, i: int, edit: dict) -> str | None:
        """`before` or `after`: the side insert `i` goes to (None, with a problem noted, if unclear)."""
        given = [side for side in ("before", "after") if edit.get(side) is not None]
        if len(given) == 2:
            self.problems.append(error("an insert goes `before` a node or `after` one, not both",
                                       self.child.loc(("insert", i, "after"), key=True),
                                       hint="split it into two inserts"))
        elif not given:
            self.problems.append(error("an insert needs `before` or `after`: the node it goes next to",
                                       self.child.loc(("insert", i)), hint="e.g. `- {after: head, nodes: [...]}`"))
        return given[0] if len(given) == 1 else None

    # -- finding nodes by path --------------------------------------------------------------------
    def find_all(self, paths: list[str | None], wheres: list[Loc | None]) -> list[list[_Match]]:
        """The nodes each path names; none, with a problem noted, for a path not found (or None).
        The graph does not change while they are read: each list's names are worked out once."""
        found = []
        self.reading = {}
        try:
            for path, loc in zip(paths, wheres):
                try:
                    found.append(self.find(path, loc) if path is not None else [])
                except SpecError as exc:
                    self.problems.append(exc)
                    found.append([])
        finally:
            self.reading = None
        return found

    def find(self, path: str, loc: Loc | None) -> list[_Match]:
        """The nodes `path` names (several where alternatives share the name), or a located error."""
        parts = path.split(".")
        places = [("", None, self.graph)]  # (path, group node, its nodes) the next part is looked up in
        for depth, part in enumerate(parts[:-1]):
            matches = self.matches(path, parts, depth, places, loc)
            walked = ".".join(parts[:depth + 1])
            places = [(walked, m.node, m.node.nodes) for m in matches if m.node.nodes is not None]
            if not places:
                raise self.not_a_group(walked, matches[0].node.value, loc)
        return self.matches(path, parts, len(parts) - 1, places, loc)

    def matches(self, path: str, parts: list[str], depth: int, places: list, loc: Loc | None) -> list[_Match]:
        found = [_Match(nodes, node, owner) for owner, _, nodes in places
                 for node in self.named(nodes).get(parts[depth], ())]
        if not found:
            raise self.unknown(path, parts, depth, places, loc)
        return found

    def names(self, nodes: list[_Node]) -> list[str | None]:
        if self.reading is not None and ("names", id(nodes)) in self.reading:
            return self.reading[("names", id(nodes))]
        names = node_names([node.value for node in nodes], self.taken if nodes is self.graph else ())
        if self.reading is not None:
            self.reading[("names", id(nodes))] = names
        return names

    def named(self, nodes: list[_Node]) -> dict[str, list[_Node]]:
        """The nodes of a list by name, in order (alternatives may share one)."""
        if self.reading is not None and ("named", id(nodes)) in self.reading:
            return self.reading[("named", id(nodes))]
        index: dict[str, list[_Node]] = {}
        for node, name in zip(nodes, self.names(nodes)):
            index.setdefault(name, []).append(node)
        if self.reading is not None:
            self.reading[("named", id(nodes))] = index
        return index

    def paths(self, nodes: list[_Node] | None = None, prefix: str = "") -> list[str]:
        """Every node's path, in order."""
        if nodes is None and self.reading is not None:
            if "paths" not in self.reading:
                self.reading["paths"] = self._paths(self.graph, "")
            return self.reading["paths"]
        return self._paths(self.graph if nodes is None else nodes, prefix)

    def _paths(self, nodes: list[_Node], prefix: str) -> list[str]:
        found = []
        for node, name in zip(nodes, self.names(nodes)):
            if name is not None:
                found.append(prefix + name)
                found += self._paths(node.nodes, f"{prefix}{name}.") if node.nodes is not None else []
        return found

    def lists(self, nodes: list[_Node] | None = None) -> list[list[_Node]]:
        """The top-level graph and every inline group's nodes."""
        nodes = self.graph if nodes is None else nodes
        return [nodes] + [inner for node in nodes if node.nodes is not None for inner in self.lists(node.nodes)]

    def forget(self, before: list[str], edit: str) -> None:
        after = set(self.paths())
        self.gone.update({path: edit for path in before if path not in after})

    # -- errors -------------------------------------------------------------------------------------
    def unknown(self, path: str, parts: list[str], depth: int, places: list, loc: Loc | None) -> SpecError:
        owners = [group for _, group, _ in places if group is not None]
        here = [name for _, _, nodes in places for name in self.names(nodes) if name is not None]
        if path in self.gone:
            hint = f"there is no '{path}' after `{self.gone[path]}`: edits apply in the order remove, replace, insert"
        elif parts[depth].isdigit() and any(isinstance(g.value, dict) and "repeat" in g.value for g in owners):
            rest = ".".join(parts[:depth] + parts[depth + 1:])
            hint = f"a repeated node is one node in the spec: '{rest}' names it in every copy"
        else:
            held = one_of(here[:LISTED]) + (f" and {len(here) - LISTED:,} more" if len(here) > LISTED else "")
            listing = f"'{places[0][0]}' holds {held or 'no named nodes'}" if depth else \
                f"the base graph has {held or 'no named nodes'}"
            self.hinted += 1
            closest = self.closest(parts, depth, here) if self.hinted <= HINTED else None
            hint = DidYouMean(path, closest) if closest else listing
        return error(f"unknown node '{path}' in the base graph", loc, hint=hint)

    def closest(self, parts: list[str], depth: int, here: list[str]) -> str | None:
        """The path probably meant: the part that was not found spelt like a name found there, or
        a path in a group that ends like the one given (the group left out)."""
        import difflib  # only for a hint, as in did_you_mean

        close = difflib.get_close_matches(parts[depth], here, n=1, cutoff=0.6)
        if close:
            return ".".join(parts[:depth] + close + parts[depth + 1:])
        return next((known for known in self.paths() if known.endswith("." + ".".join(parts))), None)

    def not_a_group(self, walked: str, raw: Any, loc: Loc | None) -> SpecError:
        op = next((k for k in raw if k not in META_KEYS), None) if isinstance(raw, dict) else None
        blocks = self.out.data.get("blocks")
        if isinstance(blocks, dict) and op in blocks:
            return error(f"'{walked}' uses block '{op}': paths do not go into blocks", loc,
                         hint=f"to change its nodes, redefine '{op}' under `blocks:`")
        return error(f"'{walked}' is not an inline group (`graph:`): it has no nodes to name", loc)

    def emptied(self, owner: str, loc: Loc | None) -> SpecError:
        if not owner:
            return error("`remove` removes every node of the base graph", loc,
                         hint="keep at least one node, or give this spec its own `graph:`")
        return error(f"`remove` removes every node of '{owner}'", loc, hint=f"remove '{owner}' itself")

    @staticmethod
    def replaced_around(path: str, replaced: list[str]) -> str | None:
        """The path of another replaced node that `path` lies inside, if any."""
        return next((outer for outer in replaced if path.startswith(outer + ".")), None)

    def inside_replaced(self, path: str, loc: Loc | None, replaced: list[str]) -> SpecError:
        outer = self.replaced_around(path, replaced)
        return error(f"'{path}' lies inside '{outer}', which `replace` also replaces", loc,
                     hint=f"write the change into the node that replaces '{outer}'")
