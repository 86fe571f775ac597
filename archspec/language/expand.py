"""expand: a validated spec document -> IR.

Evaluates params and `${...}` expressions (values.py), instantiates blocks, unrolls
`repeat`, drops nodes whose `if` is false, gives every node its dotted path, checks each
primitive node's parameters against its op (node_params.py, node_checks.py), and resolves
`from` references (scope.py; they may point forward, and a loop among them is reported as a
cycle). Independent errors are collected and reported together.

Paths: a node's path is its id under the path of what contains it. A repeated node gets
`id.0`, `id.1`, ...; the nodes of a block or of an inline `graph:` group live under the
path of the node that uses it: stages.2.blocks.1.attn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.declared import ValidationError
from ..core.errors import Collector, Loc, SpecError, error, warning
from ..core.ir import INPUT, OUTPUT_METHODS, BlockUse, Graph, GroupInfo, Node, Output, nearest_loc
from ..primitives import plugins
from ..primitives.base import Op
from . import node_checks as checks
from .expressions import work_budget
from .given import at_the_use, bare_name, uses_around
from .hints import hint_budget, suggest
from .inputs import InputTypes, symbolic_dims
from .loader import Document
from .mapping_sources import MappingSource, mapping_sources
from .names import OBJECTIVES, check_node_id, node_names
from .node_params import node_params
from .param_types import condition_warnings
from .schema import GROUP, BlockDef, NodeMeta, SpecDoc
from .scope import Absent, Alias, Compound, Out, Ref, Scope, resolve
from .validation import diagnostics_from
from .weights_of import Tie, inside, tied_pairs
from .values import POISON, Env, Params, Silent, evaluate_value


def at_node(exc: SpecError, node_path: str) -> SpecError:
    """The same diagnostics, those without a node path given `node_path`."""
    return SpecError([d if d.path else replace(d, path=node_path) for d in exc.diagnostics])


@dataclass(frozen=True)
class Site:
    """A node being expanded, and where: what `repeated`, `instantiate` and the expansion of a
    primitive, a block or an inline group read."""

    op: str  # the node's op key: a primitive, a block's name, or `graph`
    body: Any  # what is written under the op key
    path: tuple  # the node item's path in the document
    scope: Scope  # where its references are looked up (and its inline group's names live)
    env: Env  # what `${...}` sees there: params, block arguments, loop indices
    node_path: str  # its dotted path in the IR (of this copy, for a repeated node)

    @property
    def op_path(self) -> tuple:
        """The document path of what is written under the op key."""
        return self.path + (self.op,)

    def copy(self, index: str, k: int) -> "Site":
        """Copy `k` of a repeated node, `index` bound to k."""
        return replace(self, env=self.env.child({index: k}), node_path=f"{self.node_path}.{k}")


@dataclass
class Pending:
    """A primitive node whose references are not resolved yet."""

    name: str
    op: Op
    params: Any
    inputs: list[Any]  # values or Refs
    refs: dict[str, Ref]  # parameters naming other nodes
    loc: Loc | None
    param_locs: dict[str, Loc]
    from_loc: Loc | None
    named: dict[int, Ref] = field(default_factory=dict)  # slot of `from:` -> the node an option names there


@dataclass(frozen=True)
class SkippedReader:
    """A skipped node (`if` false) that reads more than one input: it passes the first on."""

    path: str
    loc: Loc | None
    inputs: list[Any]  # values or Refs, as written in its `from`


def listing_quoted(names: list[str]) -> str:
    """'a', 'a' and 'b', 'a', 'b' and 2 more."""
    quoted = [f"'{name}'" for name in names[:3]]
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    if len(quoted) == 1:
        return quoted[0] + more
    return (", ".join(quoted[:-1]) + (", " if more else " and ") + quoted[-1]) + more


class Expander:
    def __init__(self, doc: Document, spec: SpecDoc, tolerant: bool = False):
        self.doc, self.spec = doc, spec
        self.tolerant = tolerant  # go on past errors, keeping the nodes that expand (expand_partial)
        self.params = Params(spec.params, doc, spec.param_types)
        self.errors = Collector()
        self.pending: list[Pending] = []
        self.block_stack: list[str] = []
        self.block_arguments: list[dict] = []  # per block being expanded: argument -> (value, where the use gave it)
        self.block_uses: list[tuple] = []  # (path, block, input names, input values): GroupInfo once resolved
        self.resolved: dict = {}  # scope.resolve's memo
        self.depth = 0  # blocks and groups being expanded, one inside the other
        self.output_warnings: list = []  # outputs that name a node switched off
        self.output_names: set[str] = set()  # the outputs' names objectives may read (no objectives themselves)
        self.marked_unused: list[tuple[str, Loc | None]] = []  # (path, where) of each node with `unused: true`
        self.skipped_readers: list[SkippedReader] = []  # skipped nodes that read more than their first input
        self.scopes: list[Scope] = []  # the scopes with a kept node named by `id` (kept_alternatives reads them)
        self.shares: list[tuple[str, str]] = []  # (node, node whose weights it uses): `share`, `weights_of`
        self.ties: list[Tie] = []  # the nodes with `weights_of`, checked once every node exists
        self.graph = Graph(spec.name, spec.doc, doc.file)

    # -- top level ------------------------------------------------------------------------
    def run(self) -> Graph:
        self.check_header()
        top = Scope(None)
        chain = self.add_inputs(top)
        self.add_inputs(top, "targets")
        self.stop_if_errors()
        last = self.expand_list(self.spec.graph, ("graph",), top, Env(self.params), "", chain)
        objectives = Scope(top)  # objectives see the graph's names; their paths start with `objectives.`
        self.name_outputs(objectives, top)
        if self.spec.objectives:
            self.expand_list(self.spec.objectives, (OBJECTIVES,), objectives, Env(self.params), OBJECTIVES + ".", None)
        self.stop_if_errors()
        self.resolve_all(top, last, objectives)
        self.stop_if_errors()
        if self.tolerant:  # what the graph returns, of the nodes it has
            self.graph.outputs = [o for o in self.graph.outputs if o.node in self.graph]
            self.graph.objectives = [o for o in self.graph.objectives if o.node in self.graph]
        self.tie_weights()
        record_shares(self.graph, self.shares, {p.name: i for i, p in enumerate(self.pending)})
        if not self.tolerant:
            self.graph.lint()
        sources = mapping_files(self.spec, self.doc)
        self.graph.mapping_sources = sources  # read by compiler/weights/load.py
        self.graph.mappings = [source.path for source in sources if source.path is not None]
        unread = unread_params(self.doc, self.spec)
        self.graph.params = {name: self.params.get(name) for name in self.spec.params}
        self.stop_if_errors()
        needed = self.graph.ancestors([out.node for out in self.graph.outputs + self.graph.objectives])
        unused = nodes_under({path for path, _ in self.marked_unused},
                             [node.name for node in self.graph.nodes() if not node.is_input])
        marked = {path for path, _ in self.marked_unused}  # an alternative marked unused is not read, as it says
        kept = [(path, loc) for path, loc in self.kept_alternatives() if path not in marked]
        said_unused = {name for names in unused.values() for name in names}
        for problem in (unread_alternatives(self.graph, kept, needed)
                        + unread_copies(self.graph, needed, said_unused)
                        + used_after_all(self.marked_unused, unused, needed)
                        + self.dropped_by_skipping(needed | said_unused)):
            self.errors.add(problem)
        self.stop_if_errors()
        self.graph.warnings = ([s.problem for s in sources if s.problem is not None]
                               + unused_nodes(self.graph, needed | said_unused)
                               + condition_warnings(self.doc, self.spec) + unread
                               + method_named_outputs(self.graph.outputs) + self.output_warnings)
        self.graph.warnings = self.at_the_uses(self.graph.warnings)
        return self.graph

    def dropped_by_skipping(self, needed: set[str]) -> list:
        """Errors for the skipped nodes that read several inputs and pass the first on where the
        others are computed for nothing: the Falcon trial's block ended in `{if: ${parallel},
        from: [x, attn, mlp], add}`, and with parallel false every layer passed x on, an identity,
        that built (warnings only), loaded every weight and was 1.69 off."""
        problems, said = [], set()
        for reader in self.skipped_readers:
            passed = self.resolve_quietly(reader.inputs[0])
            dropped = [name for name in map(self.resolve_quietly, reader.inputs[1:])
                       if name is not None and name != passed and name in self.graph
                       and not self.graph.node(name).is_input and name not in needed]
            if dropped and reader.loc not in said:
                said.add(reader.loc)
                problems.append(error(
                    f"switched off, this node passes its first input '{passed}' on, and "
                    f"{listing_quoted(dropped)}, which it reads too, then feed{'s' if len(dropped) == 1 else ''} "
                    "no output", reader.loc, reader.path,
                    hint="a skipped node stands for its first input: name what the nodes after it need in their "
                         "`from`, or switch off the nodes it would have read as well"))
        return problems

    def resolve_quietly(self, value) -> str | None:
        """The node a value stands for, or None (poisoned, or a skipped node that reads nothing)."""
        try:
            return self.resolve(value)
        except SpecError:
            return None

    def name_outputs(self, objectives: Scope, top: Scope) -> None:
        """An objective reads an output by its name too (`outputs: {last_hidden_state: block1}`),
        where no node of the graph has that name (the Funnel trial's `from: [last_hidden_state, ...]`)."""
        if not isinstance(self.spec.outputs, dict):
            return
        ids = {item.get("id") for item in self.spec.objectives or () if isinstance(item, dict)}
        for name, text in self.spec.outputs.items():
            if isinstance(text, str) and name != text and name not in top.names and name not in ids:
                loc = self.doc.loc(("outputs", name))
                path = self._try(self.from_path, text, ("outputs", name), Env(self.params), "outputs")
                if path is None:  # its own error, said where the outputs are made
                    continue
                objectives.names[name], objectives.where[name] = Ref(path, top, loc), loc
                self.output_names.add(name)

    def kept_alternatives(self) -> list[tuple]:
        """(path, location of its `id`) of each kept node that shares its id with a skipped one."""
        return [(path, loc) for scope in self.scopes for name, (path, loc) in scope.kept.items()
                if scope.shared.get(name, 0) > 1]

    def check_header(self) -> None:
        """What the graph needs before it expands: the plugins it requires, its params, the names
        of its blocks and of its forward's parameters, its symbolic dims."""
        if self.spec.requires:
            self._try(plugins.require, self.spec.requires,
                      [self.doc.loc(("requires", i)) for i in range(len(self.spec.requires))])
            self.stop_if_errors()
        for problem in checks.param_declaration_problems(self.spec, self.doc):
            self.errors.add(problem)
        for name in self.spec.params:
            self._try(self.params.get, name)
        for problem in checks.block_name_problems(self.spec, self.doc) + checks.parameter_name_problems(
                self.spec, self.doc):
            self.errors.add(problem)
        self.stop_if_errors()
        self.graph.dims = symbolic_dims(self.spec, self.doc, self.params, self.errors)
        self.stop_if_errors()

    def stop_if_errors(self) -> None:
        """Raise the errors collected so far (a tolerant expansion goes on with the nodes it has),
        each about a block's argument pointed at the use that gave it."""
        if not self.tolerant and self.errors.diagnostics:
            located = Collector()
            located.extend(self.at_the_uses(self.errors.diagnostics))
            located.raise_if_any()

    def at_the_uses(self, diagnostics: list) -> list:
        return [at_the_use(d, uses_around(self.graph, d.path), self.doc) for d in diagnostics]

    def _try(self, fn, *args):
        try:
            return fn(*args)
        except SpecError as exc:
            self.errors.add(exc)
        except Silent:
            pass
        return None

    def add_inputs(self, top: Scope, section: str = "inputs"):
        """Add the graph inputs (or the training targets) to the IR and the top scope; the
        first input is what the graph's first node reads."""
        types = InputTypes(self.spec, self.doc, self.params, self.graph.dims)
        chain = None
        for name in getattr(self.spec, section):
            loc = self.doc.loc((section, name), key=True)
            if section == "targets" and name in self.spec.inputs:
                self.errors.add(error(f"target '{name}' has the name of an input", loc, hint="rename one of them"))
                continue
            input_type = self._try(types.of, name, section)
            if input_type is None:
                continue
            self.graph.add(Node(name, INPUT, None, loc=loc), type=input_type, target=section == "targets")
            top.names[name], top.where[name] = Out(name), loc
            chain = chain or Out(name)
        return chain

    # -- graphs and nodes -------------------------------------------------------------------
    def expand_list(self, nodes: list, path: tuple, scope: Scope, env: Env, prefix: str, chain):
        """Expand a list of nodes (each reads the one before unless it says `from`); the value the
        last one gives."""
        for i, (raw, name) in enumerate(zip(nodes, node_names(nodes, scope.names))):
            try:
                op, meta = checks.op_and_meta(raw, path + (i,), self.doc, self.spec)
                site = Site(op, raw.get(op), path + (i,), scope, env, prefix + name)
                chain = self.expand_node(site, name, meta, chain)
            except SpecError as exc:
                self.errors.add(exc)
                chain = POISON
            except Silent:
                chain = POISON
        return chain

    def expand_node(self, site: Site, name: str, meta: NodeMeta, chain):
        try:
            active = meta.if_ is None or self.condition(meta.if_, site)
        except SpecError as exc:
            raise at_node(exc, site.node_path) from None
        if meta.id is not None and active:
            checks.check_id_unique(name, site.scope, self.doc, site.path, meta.if_ is not None, site.env.described())
        try:
            inputs = self.node_inputs(meta, site, chain)
            start = len(self.pending)
            # skipped: it stands for its (first) input
            value = self.repeated(site, meta, inputs) if active else Alias(inputs[0], site.node_path)
            if not active and len(inputs) > 1:
                self.skipped_readers.append(SkippedReader(site.node_path, self.doc.loc(site.path), inputs))
            if active and meta.weights_of is not None:
                self.tie(site, meta, start)
            if active and meta.unused is not None and self.flag(meta.unused, site, "unused"):
                self.marked_unused.append((site.node_path, self.doc.loc(site.path + ("unused",))))
        except SpecError as exc:
            raise at_node(exc, site.node_path) from None
        scope = site.scope
        if meta.id is not None:
            scope.shared[name] = scope.shared.get(name, 0) + 1
        if not active:
            self._try(self.check_node_name, name, meta, site)  # a name that no value of the params could build
            if name not in scope.names:
                named = Absent(name, self.doc.loc(site.path)) if meta.from_ is None and self.reads_nothing(site) \
                    else value
                scope.names[name], scope.where[name] = named, self.doc.loc(site.path)
                scope.skipped.add(name)
                return value
            if name in scope.skipped:
                return value
            # an alternative of a node kept right before it: what follows reads the kept one, not this one's
            # input; with other nodes between them it stands for its input, as any skipped node (the PatchTST
            # trial's block ended with a skipped alternative and returned the kept one, dropping the nodes between)
            kept = scope.names[name]
            return kept if chain is kept else value
        scope.names[name], scope.where[name] = value, self.doc.loc(site.path)
        scope.skipped.discard(name)
        if meta.id is not None:
            if not scope.kept:  # each scope listed once
                self.scopes.append(scope)
            scope.kept[name] = (site.node_path, self.doc.loc(site.path + ("id",)))
        self._try(self.check_node_name, name, meta, site)
        return value

    def reads_nothing(self, site: Site) -> bool:
        """Whether a node is a primitive that reads nothing (a param, a constant of fixed shape): skipped,
        it has no input to stand for. False where its params do not evaluate (its `if` guards them)."""
        if site.op == GROUP or site.op in self.spec.blocks:
            return False
        try:
            values = evaluate_value(site.body if site.body is not None else {}, site.op_path, site.env, self.doc)
            op, params = node_params(site.op, values, self.doc, site.op_path, site.node_path)
            return not op.reads(params)
        except (SpecError, Silent, ValidationError, ValueError, TypeError, KeyError):
            return False

    def tie(self, site: Site, meta: NodeMeta, start: int) -> None:
        """Note a node with `weights_of` (its primitive nodes are pending[start:])."""
        checks.check_weights_of(meta, self.doc, site.path)
        path = site.path + ("weights_of",)
        ref = Ref(self.from_path(meta.weights_of, path, site.env, "weights_of"), site.scope, self.doc.loc(path),
                  site.node_path)
        mine = {inside(p.name, site.node_path): p for p in self.pending[start:]}
        self.ties.append(Tie(site.node_path, ref, mine))

    def tie_weights(self) -> None:
        """`weights_of`: each tie's pairs of nodes join the shares, once their ops and parameters agree."""
        if not self.ties:
            return
        pending = {p.name: p for p in self.pending}
        for tie in self.ties:
            self.shares += self._try(tied_pairs, tie, pending) or []
        self.stop_if_errors()

    def check_node_name(self, name: str, meta: NodeMeta, site: Site) -> None:
        """The name of a kept node becomes a module attribute in the built model (names.py)."""
        top_level = site.path[:1] == ("graph",) and site.node_path == name
        if meta.id is not None:
            check_node_id(name, self.doc.loc(site.path + ("id",)), top_level, site.scope.names)
        else:
            check_node_id(name, self.doc.loc(site.op_path, key=True), top_level, site.scope.names, given=False)

    def node_inputs(self, meta: NodeMeta, site: Site, chain) -> list:
        if meta.from_ is None:
            if chain is None:
                raise error("this node has nothing to read", self.doc.loc(site.path),
                            hint="give `from: <input or node>`")
            return [chain]
        refs = [meta.from_] if isinstance(meta.from_, str) else meta.from_
        base = site.path + ("from",)
        if not refs:
            raise error("`from` is empty", self.doc.loc(base))
        paths = [base if isinstance(meta.from_, str) else base + (i,) for i in range(len(refs))]
        try:
            return [Ref(self.from_path(r, path, site.env), site.scope, self.doc.loc(path), site.node_path)
                    for r, path in zip(refs, paths)]
        except SpecError as exc:
            raise own_index_in_from(exc, meta) from None

    def from_path(self, raw, path: tuple, env: Env, key: str = "from"):
        """A `from` (or `outputs`) entry: a path, or one made by expressions (`ms.${s - 1}.out0`),
        evaluated where it is (loop indices, block parameters and the spec's params)."""
        value = evaluate_value(raw, path, env, self.doc)
        if not isinstance(value, str) or not value:
            raise error(f"`{key}` names a node or input; {raw!r} gives {value!r}", self.doc.loc(path),
                        hint="an expression there must give a path, e.g. \"${'x' if parallel else 'attn'}\"")
        return value

    def condition(self, raw, site: Site) -> bool:
        value = evaluate_value(raw, site.path + ("if",), site.env, self.doc)
        if not isinstance(value, bool):
            self.refuse_argument_as_condition(raw, value, site)
        checks.check_condition(value, self.doc, site.path)
        return value

    def flag(self, raw, site: Site, key: str) -> bool:
        """A node's true/false key other than `if` (`unused`), written as such or as an expression."""
        value = evaluate_value(raw, site.path + (key,), site.env, self.doc)
        checks.check_flag(value, key, self.doc, site.path)
        return value

    def refuse_argument_as_condition(self, raw, value, site: Site) -> None:
        """An `if: ${name}` inside a block whose use gave `name` something not true or false: the
        error is the use's, located where it gives the argument (the Q-Former trial's
        `cross: "${i % 2}"` was reported inside the block, once per copy)."""
        name = bare_name(raw)
        given = self.block_arguments[-1].get(name) if self.block_arguments and name else None
        if given is None or given[1] is None:
            return
        line = self.doc.loc(site.path + ("if",))
        raise error(f"block parameter `{name}` is a condition (`if: {raw}`, line {line.line}), and this use gives "
                    f"it {value!r}", given[1], hint="give true or false, e.g. ${i % 2 == 0}")

    def repeated(self, site: Site, meta: NodeMeta, inputs: list):
        if meta.repeat is None:
            checks.check_no_index(meta, self.doc, site.path)
            return self.instantiate(site, inputs)
        times = evaluate_value(meta.repeat, site.path + ("repeat",), site.env, self.doc)
        checks.check_repeat_count(times, self.doc, site.path)
        if times == 0:
            return Alias(inputs[0], site.node_path)
        self.graph.groups[site.node_path] = GroupInfo("repeat")
        copies = Compound(None)
        current = list(inputs)
        made = []  # with `share`: the primitive nodes of each copy, by their path inside it
        for k in range(times):
            start = len(self.pending)
            value = self.instantiate(site.copy(meta.as_ or "i", k), current)
            copies.members[str(k)] = value
            current = [value] + current[1:]
            if meta.share:
                inside = f"{site.node_path}.{k}."
                made.append({p.name[len(inside):] if p.name.startswith(inside) else "": p
                             for p in self.pending[start:]})
        if meta.share:
            self.share_copies(site, made)
        copies.out = current[0]
        return copies

    def share_copies(self, site: Site, made: list[dict]) -> None:
        """`share: true`: each node of copies 1..N-1 uses the weights of the same node of copy 0
        (recorded in the IR as meta["shared_with"], written once the nodes are in the graph)."""
        first = {rel: p.op for rel, p in made[0].items()}
        for k, copy in enumerate(made[1:], 1):
            checks.check_shared_copy({rel: p.op for rel, p in copy.items()}, first, k, self.doc, site.path)
            for rel, p in copy.items():
                self.shares.append((p.name, made[0][rel].name))

    def instantiate(self, site: Site, inputs: list):
        checks.check_node_count(len(self.pending), self.doc, site.path)
        try:
            if site.op == GROUP or site.op in self.spec.blocks:
                return self.nested(site, inputs)
            return self.primitive(site, inputs)
        except SpecError as exc:
            raise at_node(exc, site.node_path) from None

    def nested(self, site: Site, inputs: list):
        """A group or block: nodes inside this node, at most MAX_NESTING levels deep."""
        checks.check_nesting(self.depth, site.op, self.doc, site.path)
        self.depth += 1
        try:
            return self.group(site, inputs) if site.op == GROUP else self.block(site, inputs)
        finally:
            self.depth -= 1

    def group(self, site: Site, inputs: list):
        checks.check_group(site.body, inputs, self.doc, site.path)
        inner = Scope(site.scope)
        self.graph.groups.setdefault(site.node_path, GroupInfo("group"))
        out = self.expand_list(site.body, site.op_path, inner, site.env, site.node_path + ".", inputs[0])
        return Compound(out, inner.names)

    def block(self, site: Site, inputs: list):
        name, block = site.op, self.spec.blocks[site.op]
        checks.check_block_use(name, block, self.block_stack, inputs, self.doc, site.path)
        args = self.block_args(site, block)
        self.block_uses.append((site.node_path, name, tuple(block.inputs), list(inputs)))
        inner = Scope(None)
        inner.names.update(zip(block.inputs, inputs))
        self.block_stack.append(name)
        given_at = param_locations(self.doc, site.op_path, site.body) if isinstance(site.body, dict) else {}
        self.graph.block_uses[site.node_path] = BlockUse(name, tuple((key, loc) for key, loc in given_at.items()
                                                                     if key in args and loc is not None))
        self.block_arguments.append({key: (value, given_at.get(key)) for key, value in args.items()})
        try:
            out = self.expand_list(block.graph, ("blocks", name, "graph"), inner, Env(self.params, (args,)),
                                   site.node_path + ".", inputs[0])
        finally:
            self.block_stack.pop()
            self.block_arguments.pop()
        return Compound(out, {k: v for k, v in inner.names.items() if k not in block.inputs})

    def block_args(self, site: Site, block: BlockDef) -> dict:
        """The arguments of a block use: those given, evaluated where the block is used, then the
        defaults of the rest, which may read the arguments before them."""
        name, given = site.op, site.body if site.body is not None else {}
        checks.check_block_arguments(name, block, given, self.doc, site.path)
        args = evaluate_value(given, site.op_path, site.env, self.doc)
        for key, default in block.params.items():
            if key in args:
                continue
            if default is None:
                raise checks.missing_block_argument(name, key, self.doc, site.path)
            args[key] = evaluate_value(default, ("blocks", name, "params", key), Env(self.params, (args,)), self.doc)
        return args

    def primitive(self, site: Site, inputs: list):
        base, raw = site.op_path, site.body if site.body is not None else {}
        checks.check_parameter_mapping(site.op, raw, self.doc, site.path)
        values = evaluate_value(raw, base, site.env, self.doc)
        op, params = node_params(site.op, values, self.doc, base, site.node_path)
        checks.check_plugin_required(op, self.spec, self.doc, site.path, site.node_path)
        refs = {k: Ref(values[k], site.scope, self.doc.loc(base + (k,)), site.node_path) for k in op.refs
                if isinstance(values.get(k), str)}
        from_loc = self.doc.locs.get(site.path + ("from",))
        if not op.reads(params) and from_loc is None:
            inputs = []  # a source (a learned parameter) reads nothing, not the previous node
        checks.check_objective_place(op, self.doc, site.path, site.node_path)
        checks.check_input_count(op, params, len(inputs), self.doc, site.path, site.node_path, base)
        param_locs = param_locations(self.doc, base, values)
        named = {slot: Ref(name, site.scope, nearest_loc(param_locs, where), site.node_path)
                 for slot, (name, where) in op.named_inputs(params).items()}
        self.pending.append(Pending(site.node_path, op, params, list(inputs), refs, self.doc.loc(base, key=True),
                                    param_locs, from_loc, named))
        return Out(site.node_path)

    # -- references ---------------------------------------------------------------------------
    def resolve_all(self, top: Scope, last, objectives: Scope) -> None:
        waiting = self.pending
        while waiting:  # a tolerant expansion adds a node once what it reads is there
            left = [p for p in waiting if self._try(self.finish, p) is False]
            waiting = left if len(left) < len(waiting) else []
        self.stop_if_errors()
        if not self.tolerant:
            checks.check_acyclic(self.graph)
        for path, block, names, values in self.block_uses:
            self.graph.groups[path] = GroupInfo("block", block, names, tuple(self.resolve(v) for v in values))
        self.graph.outputs = self._try(self.outputs, top, last) or []
        self.graph.objectives = [Output(name, self.resolve(value), objectives.where.get(name))
                                 for name, value in objectives.names.items()
                                 if name not in self.output_names and self.resolve(value) is not None]
        for problem in checks.objective_input_problems(self.graph):
            self.errors.add(problem)

    def resolve(self, value) -> str | None:
        return resolve(value, self.resolved)

    def finish(self, p: Pending) -> bool:
        """Add the node to the IR (True), or say it waits for a node it reads (False, tolerant only)."""
        names = [self.resolve(v) for v in p.inputs]
        if any(n is None for n in names):
            return True
        if self.tolerant and any(n not in self.graph for n in names):
            return False
        targets = [n for n in names if n in self.graph.target_names()]
        if targets and not p.name.startswith(OBJECTIVES + "."):
            raise error(f"'{targets[0]}' is a training target: only objectives read targets", p.from_loc or p.loc,
                        p.name, hint="declare it under `inputs` if the network reads it")
        check_named_inputs(p, names, self.resolve)
        params = p.params
        if p.refs:
            params = params.model_copy(update={k: self.resolve(r) for k, r in p.refs.items()})
        self.graph.add(Node(p.name, p.op, params, p.loc, p.param_locs, p.from_loc), names)
        return True

    def outputs(self, top: Scope, last) -> list[Output]:
        spec = self.spec.outputs
        if spec is None:
            name = self.resolve(last)
            return [Output("output", name, self.doc.loc(("graph",)))] if name else []
        if not spec:
            raise error("`outputs` is empty", self.doc.loc(("outputs",)),
                        hint="name the nodes the model returns, or leave `outputs` out to return the last node")
        items = spec.items() if isinstance(spec, dict) else [(None, t) for t in spec]
        outs = []
        for i, (out_name, text) in enumerate(items):
            path = ("outputs", out_name) if isinstance(spec, dict) else ("outputs", i)
            loc = self.doc.loc(path)
            text = self.from_path(text, path, Env(self.params), "outputs")
            out_name = out_name or text.replace(".", "_")  # a list: the name from the path
            node = self.resolve(Ref(text, top, loc))
            if node is not None:
                outs.append(Output(out_name, node, loc))
                if switched_off(text, top):
                    self.output_warnings.append(warning(
                        f"output '{out_name}' names '{text}', which is switched off (its `if` is false, or it "
                        f"repeats 0 times): the output is what that node reads, '{node}'", loc,
                        hint=f"name '{node}' under `outputs` if that is meant; a spec that switches the node off "
                             "can give its own `outputs`"))
        return outs


def switched_off(path: str, top: Scope) -> bool:
    """Whether the node a dotted path names is switched off (`if` false, `repeat: 0`): it stands
    for its input (an Alias)."""
    value = top.names.get(path.split(".")[0])
    for part in path.split(".")[1:]:
        value = value.members.get(part) if isinstance(value, Compound) else None
    return isinstance(value, Alias)


def own_index_in_from(exc: SpecError, meta: NodeMeta) -> SpecError:
    """A repeated node's `from` naming its own index (the SAM decoder trial): said why. The first
    copy reads `from`, each later one the copy before; the index is seen inside the copies."""
    index = meta.as_ or "i"
    first = exc.diagnostics[0]
    if meta.repeat is None or first.message != f"unknown name '{index}'":
        return exc
    hint = (f"a repeated node's `from` is read once, by its first copy (each later copy reads the one before), so "
            f"its index `{index}` is not seen there; inside a repeated `graph:` group the copies' nodes see it")
    return SpecError([replace(first, hint=hint)] + list(exc.diagnostics[1:]))


def method_named_outputs(outputs: list[Output]) -> list:
    """A warning for each output (of several) named as a method of the outputs: `out.keys` gives the
    method (the SAM decoder trial's `keys` output), `out["keys"]` the tensor."""
    if len(outputs) < 2:
        return []  # a single output is the tensor itself
    return [warning(f"output '{out.name}' is named as a method of the outputs: out.{out.name} gives the method, "
                    f"out[\"{out.name}\"] the tensor", out.loc,
                    hint=f"name it otherwise (outputs: {{{out.name}_out: ...}}) to read it as an attribute")
            for out in outputs if out.name in OUTPUT_METHODS]


def mapping_files(spec: SpecDoc, doc: Document) -> list[MappingSource]:
    """The spec's weight mapping files, each relative to the file that names it (or archspec's
    shipped one of that name); an entry that leads nowhere carries its warning
    (mapping_sources.py): a mapping matters only when a checkpoint is loaded."""
    locs = [doc.loc(("mappings", i)) for i in range(len(spec.mappings))]
    return mapping_sources(spec.mappings, locs, doc.file)


def record_shares(graph: Graph, shares: list[tuple[str, str]], rank: dict[str, int]) -> None:
    """meta["shared_with"] of each node whose weights are another's (`share: true` on a repeat):
    the first node (in `rank`, the spec's order) of its set, so that a copy of a shared repeat
    inside a shared repeat reaches copy 0 of both. Costing counts the set's parameters once (at
    that node), lowering makes the others' tensors that node's."""
    owner: dict[str, str] = {}

    def find(name: str) -> str:
        while name in owner:
            name = owner[name]
        return name

    for node, source in shares:
        a, b = find(node), find(source)
        if a != b:
            first, second = sorted((a, b), key=rank.__getitem__)
            owner[second] = first
    for node in {name for pair in shares for name in pair}:  # either side: `weights_of` may name a later node
        if node in graph and find(node) != node:
            graph.meta(node)["shared_with"] = find(node)


def unread_alternatives(graph: Graph, kept: list[tuple], needed: set[str]) -> list:
    """Errors for the kept alternatives (a node whose `if` held, sharing its id with skipped ones)
    that no output depends on: the spec chose it and then computes it for nothing, which reads as
    a model other than the one meant."""
    if not kept:
        return []
    inside = nodes_under({path for path, _ in kept}, [node.name for node in graph.nodes() if not node.is_input])
    problems = []
    for path, loc in kept:
        if inside[path] and not any(n in needed for n in inside[path]):
            problems.append(error(f"the alternative kept under id '{path.rsplit('.', 1)[-1]}' is computed, but no "
                                  "output reads it", loc, path,
                                  hint="a node after the alternatives reads the kept one by its id or through the "
                                       "chain; check the `from:` of the nodes after it"))
    return problems


def used_after_all(marked: list[tuple], inside: dict[str, list[str]], needed: set[str]) -> list:
    """Errors for the nodes marked `unused: true` that an output depends on (the spec says they
    are kept for their parameters alone, and forward would call them)."""
    problems = []
    for path, loc in marked:
        read = [name for name in inside[path] if name in needed]
        if read:
            problems.append(error(f"'{path}' is marked `unused: true`, and an output depends on "
                                  f"{'it' if read[0] == path else repr(read[0])}", loc, path,
                                  hint="drop `unused` where the model reads the node; it marks a module kept for "
                                       "its parameters alone"))
    return problems


def unread_copies(graph: Graph, needed: set[str], said_unused: frozenset[str] | set[str] = frozenset()) -> list:
    """Errors for the copies of a repeat that no output reads while a later copy is read: a node
    inside reads a node from before the repeat by its id, so every copy reads that node instead of
    the copy before, and all but the last compute for nothing (the Decision Transformer trial's
    `from: [drop, mask]` on a repeated group's first node built a model one layer short, with a
    warning). A copy whose every node the spec marks `unused` is meant (the UperNet trial's
    `unused: ${i == 0}` on parallel branches met this error all the same)."""
    repeats = {path for path, info in graph.groups.items() if info.kind == "repeat"}
    if not repeats:
        return []
    nodes = {node.name: node for node in graph.nodes() if not node.is_input}
    problems = []
    for path, inside in nodes_under(repeats, list(nodes)).items():
        copies: dict[str, list[str]] = {}  # copy index -> the names in it
        for name in inside:
            copies.setdefault(name[len(path) + 1:].split(".", 1)[0], []).append(name)
        read = [int(k) for k, names in copies.items() if k.isdigit() and any(n in needed for n in names)]
        dead = sorted(int(k) for k, names in copies.items()
                      if k.isdigit() and read and int(k) < max(read) and not any(n in needed for n in names)
                      and not all(n in said_unused for n in names))
        if dead:
            first = nodes[copies[str(dead[0])][0]]
            problems.append(error(
                f"{'copy' if len(dead) == 1 else 'copies'} {', '.join(map(str, dead))} of the {len(copies)} of the "
                f"repeat '{path}' {'is' if len(dead) == 1 else 'are'} built, but no output reads "
                f"{'it' if len(dead) == 1 else 'them'}: each copy reads a node from before the repeat by its id, "
                "not the copy before it", first.loc, first.name,
                hint="a repeated `graph:` group chains through its first node's input, which `from:` there "
                     "replaces: repeat a block that takes the extra input (`inputs: [x, mask]`), whose copies "
                     "each read the one before as x; copies meant as branches no output reads are marked "
                     "`unused: \"${i == 0}\"` (with `as: i`)"))
    return problems


def nodes_under(paths: set[str], names: list[str]) -> dict[str, list[str]]:
    """For each path, the names that are it or lie under it (`path.` + more), found by walking each
    name's prefixes once: linear in the names (a spec of thousands of repeated blocks, each with an
    alternative, took seconds when every path scanned every name)."""
    inside: dict[str, list[str]] = {path: [] for path in paths}
    for name in names:
        prefix = ""
        for part in name.split("."):
            prefix = f"{prefix}.{part}" if prefix else part
            if prefix in inside:
                inside[prefix].append(name)
    return inside


def unused_nodes(graph: Graph, needed: set[str]) -> list:
    """Warnings for the nodes and inputs no output depends on (their parameters are still counted
    and built, and forward does not call them)."""
    found = []
    for node in graph.nodes():
        if node.name in needed:
            continue
        what = f"input '{node.name}'" if node.is_input else "this node"
        hint = "read it with `from:`, name it under `outputs`, or remove it"
        if not node.is_input:
            hint += " (or mark it `unused: true`: kept for its parameters, as a reference's unused pooler)"
        found.append(warning(f"no output depends on {what}", node.loc, None if node.is_input else node.name,
                             hint=hint))
    return found


def validate(doc: Document) -> SpecDoc:
    """The top-level document checked against the schema (all problems at once)."""
    if not isinstance(doc.data, dict):
        raise error("a spec is a mapping with `name`, `inputs` and `graph`", doc.loc(()))
    try:
        return SpecDoc.model_validate(doc.data)
    except ValidationError as exc:
        raise SpecError(diagnostics_from(exc, doc.data, doc, (), SpecDoc, "the spec")) from None


def expand_partial(doc: Document) -> Graph | None:
    """For the editor, when `expand` fails: the IR of the nodes that expand and of what they read,
    past the errors elsewhere (None when the document's top level does not validate)."""
    try:
        spec = validate(doc)
    except SpecError:
        return None
    expander = Expander(doc, spec, tolerant=True)
    with work_budget(), hint_budget():
        try:
            return expander.run()
        except (SpecError, Silent):
            return expander.graph


def expand(doc: Document) -> Graph:
    spec = validate(doc)
    with work_budget(), hint_budget():
        return Expander(doc, spec).run()


NESTED_DEPTH = 5  # a parameter's keys and items located below it: scores.0.softcap.cap, scores.0.mod.steps.1.out


def param_locations(doc, base: tuple, values: dict) -> dict:
    """Where each parameter of a node was written (its value), and each key inside one and each
    item of a list that is a mapping or a list (`scores.0.softcap.capp`: the key), so that a
    rule may point at a nested option."""
    locs = {}

    def walk(value, path: tuple, name: str, depth: int) -> None:
        locs[name] = doc.loc(path, key=depth > 0 and isinstance(path[-1], str))
        if depth >= NESTED_DEPTH:
            return
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            if isinstance(value, dict) or isinstance(item, (dict, list)):  # not each number of a long list
                walk(item, path + (key,), f"{name}.{key}", depth + 1)

    for key, value in values.items():
        walk(value, base + (key,), str(key), 0)
    return locs


def check_named_inputs(p: Pending, names: list[str], resolve) -> None:
    """Each input an option names (`embeddings: rel`) is the node `from:` gives in its place: the
    input is read by position, and a name that is not there was read as something else (the
    DeBERTa trial's `embeddings: x` ran on whatever stood in that place)."""
    reads = p.op.reads(p.params)
    for slot, ref in p.named.items():
        target = resolve(ref)  # an unknown name is an error here, located at the option
        if target is not None and slot < len(names) and names[slot] != target:
            raise error(f"this option reads '{ref.text}', input {slot + 1} of `from:`, and `from:` gives "
                        f"'{names[slot]}' there", ref.loc, p.name,
                        hint=f"`from:` lists the inputs in this order: {', '.join(reads)}")


def unread_params(doc, spec) -> list:
    """Warnings for params that no `${...}` of the spec (nor a dim's bare name) reads and whose
    name is close to one that is read: a misspelt override (the CodeGen trial's `rotary_dims: 8`
    under `extends` left the base's `rotary_dim: 16` in force, silently). Unread params that
    resemble no other stay quiet: a mapping file or a reader of the build may read them."""
    named = names_read(doc.data) | names_read(getattr(doc, "replaced", {}))  # (h: ${img}, replaced by --set h=8)
    read = [name for name in spec.params if name in named]
    found = []
    for name, value in spec.params.items():
        if name in named or has_placeholder(value):
            continue  # read; or computed from others (`frames: ${samples // 320}`), no misspelt override
        guess = suggest(name, read)  # within the check's budget of searches
        if guess is not None:
            found.append(warning(f"param '{name}' is read by nothing in the spec", doc.loc(("params", name), key=True),
                                 hint=f"{guess} (a misspelt param adds a new one and leaves the other as it was)"))
    return found


_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_]\w*")


def has_placeholder(value) -> bool:
    """Whether a param's value is computed by a `${...}` (a string holding one)."""
    return isinstance(value, str) and _PLACEHOLDER.search(value) is not None


def names_read(data) -> set[str]:
    """Every name a `${...}` of `data` mentions, and every string that is a bare name (a dim's
    `[1, context]`), walking mappings and lists (iteratively: specs may nest deeply)."""
    found, stack = set(), [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            if _NAME.fullmatch(value):
                found.add(value)
            for expression in _PLACEHOLDER.findall(value):
                found.update(_NAME.findall(expression))
    return found
