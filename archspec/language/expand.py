"""expand: a validated spec document -> IR.

Evaluates params and `${...}` expressions (values.py), instantiates blocks, unrolls
`repeat`, drops nodes whose `if` is false, gives every node its dotted path, checks each
primitive node's parameters against its op (node_params.py), and resolves `from` references
(scope.py; they may point forward, and a loop among them is reported as a cycle).
Independent errors are collected and reported together.

Paths: a node's path is its id under the path of what contains it. A repeated node gets
`id.0`, `id.1`, ...; the nodes of a block or of an inline `graph:` group live under the
path of the node that uses it: stages.2.blocks.1.attn.
"""

from __future__ import annotations

import difflib

import os
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from ..core.errors import Collector, Loc, SpecError, error, warning
from ..core.ir import INPUT, Graph, GroupInfo, Node, Output
from ..core.words import did_you_mean, one_of
from ..primitives import plugins, registry
from ..primitives.base import Op
from .expressions import work_budget
from .hints import hint_budget, some, suggest
from .inputs import InputTypes, symbolic_dims
from .limits import MAX_NESTING, MAX_NODES, MAX_REPEAT
from .loader import Document
from .names import check_node_id, check_parameter_name, node_names
from .node_params import misplaced_parameter, node_params
from .schema import META_KEYS, BlockDef, NodeMeta, SpecDoc
from .scope import Alias, Group, Out, Ref, Scope, resolve
from .validation import diagnostics_from
from .values import POISON, Env, Params, Silent, evaluate_value

GROUP = "graph"  # the op key of an inline group of nodes


def at_node(exc: SpecError, node_path: str) -> SpecError:
    """The same diagnostics, those without a node path given `node_path`."""
    return SpecError([d if d.path else replace(d, path=node_path) for d in exc.diagnostics])


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


class Expander:
    def __init__(self, doc: Document, spec: SpecDoc):
        self.doc, self.spec = doc, spec
        self.params = Params(spec.params, doc)
        self.errors = Collector()
        self.pending: list[Pending] = []
        self.block_stack: list[str] = []
        self.block_uses: list[tuple] = []  # (path, block, input names, input values): GroupInfo once resolved
        self.resolved: dict = {}  # scope.resolve's memo
        self.depth = 0  # blocks and groups being expanded, one inside the other
        self.graph = Graph(spec.name, spec.doc, doc.file)

    # -- top level ------------------------------------------------------------------------
    def run(self) -> Graph:
        if self.spec.requires:
            self._try(plugins.require, self.spec.requires,
                      [self.doc.loc(("requires", i)) for i in range(len(self.spec.requires))])
            self.errors.raise_if_any()
        for name in self.spec.params:
            self._try(self.params.get, name)
        self.check_block_names()
        self.errors.raise_if_any()
        self.graph.dims = symbolic_dims(self.spec, self.doc, self.params, self.errors)
        self.errors.raise_if_any()
        top = Scope(None)
        chain = self.add_inputs(top)
        self.add_inputs(top, "targets")
        self.errors.raise_if_any()
        last = self.expand_list(self.spec.graph, ("graph",), top, Env(self.params), "", chain)
        objectives = Scope(top)  # objectives see the graph's names; their paths start with `objectives.`
        if self.spec.objectives:
            self.expand_list(self.spec.objectives, ("objectives",), objectives, Env(self.params), "objectives.", None)
        self.errors.raise_if_any()
        self.resolve_all(top, last, objectives)
        self.errors.raise_if_any()
        self.graph.lint()
        self.graph.mappings = self.mapping_files()
        self.errors.raise_if_any()
        self.graph.warnings = unused_nodes(self.graph)
        return self.graph

    def _try(self, fn, *args):
        try:
            return fn(*args)
        except SpecError as exc:
            self.errors.add(exc)
        except Silent:
            pass
        return None

    def check_block_names(self) -> None:
        for name in self.spec.blocks:
            taken = ("a primitive" if name in registry.primitives() else "the key of inline groups" if name == GROUP
                     else f"the node key `{name}`" if name in META_KEYS else None)
            if taken:
                self.errors.add(error(f"block '{name}' has the name of {taken}",
                                      self.doc.loc(("blocks", name), key=True), hint="give the block another name"))
        self.check_parameter_names()

    def check_parameter_names(self) -> None:
        """Names that become parameters of a forward (inputs, targets, block inputs) are Python names."""
        problems = []
        for section in ("inputs", "targets"):
            names = getattr(self.spec, section)
            problems += [check_parameter_name(name, section[:-1], self.doc.loc((section, name), key=True), names,
                                              top_level=True)
                         for name in names]
        for block_name, block in self.spec.blocks.items():
            problems += [check_parameter_name(name, f"block '{block_name}' input",
                                              self.doc.loc(("blocks", block_name, "inputs", i)), block.inputs)
                         for i, name in enumerate(block.inputs)]
        for problem in filter(None, problems):
            self.errors.add(problem)

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

    def mapping_files(self) -> list[str]:
        """The spec's weight mapping files (absolute paths), each relative to the file that
        names it; a missing one is an error at the name."""
        files = []
        for i, name in enumerate(self.spec.mappings):
            loc = self.doc.loc(("mappings", i))
            folder = os.path.dirname(loc.file) if loc and os.path.isfile(loc.file) else os.getcwd()
            path = os.path.abspath(os.path.join(folder, name))
            if not os.path.isfile(path):
                self.errors.add(error(f"no such mapping file: {name}", loc,
                                      hint=f"mapping files are found relative to the folder of {loc.file}" if loc
                                      else None))
            files.append(path)
        return files

    # -- graphs and nodes -------------------------------------------------------------------
    def expand_list(self, nodes: list, path: tuple, scope: Scope, env: Env, prefix: str, chain):
        names = node_names(nodes, scope.names)
        for i, (raw, name) in enumerate(zip(nodes, names)):
            try:
                chain = self.expand_node(raw, name, path + (i,), scope, env, prefix, chain)
            except SpecError as exc:
                self.errors.add(exc)
                chain = POISON
            except Silent:
                chain = POISON
        return chain

    def split(self, raw: Any, path: tuple) -> tuple[str, NodeMeta]:
        """(op key, meta) of a node mapping."""
        if not isinstance(raw, dict):
            raise error("a graph node must be a mapping like `- attention: {kind: global, heads: 12}`",
                        self.doc.loc(path))
        ops = [k for k in raw if k not in META_KEYS]
        known = registry.primitives() + list(self.spec.blocks) + [GROUP]
        for op in ops:
            if op not in known:
                where = self.doc.loc(path + (op,), key=True)
                meta = difflib.get_close_matches(op, META_KEYS, n=1, cutoff=0.75)  # `mask` is not `as`
                if meta and not suggest(op, known):  # a misspelt node key (`fromm`), not an op
                    raise error(f"unknown key '{op}' in this node", where, hint=f"did you mean '{meta[0]}'?")
                hint = suggest(op, known) or misplaced_parameter(op) or f"ops: {some(known)}"
                raise error(f"unknown op '{op}'", where, hint=hint)
        if not ops:
            raise error("this node has no op", self.doc.loc(path),
                        hint=f"give one of {one_of(registry.primitives())}, a block's name, or graph: [...]")
        if len(ops) > 1:
            raise error(f"a node has one op; this one has {one_of(ops)}", self.doc.loc(path + (ops[1],), key=True),
                        hint="split them into two nodes")
        meta_raw = {k: v for k, v in raw.items() if k in META_KEYS}
        try:
            meta = NodeMeta.model_validate(meta_raw)
        except ValidationError as exc:
            raise SpecError(diagnostics_from(exc, meta_raw, self.doc, path, NodeMeta, "node")) from None
        return ops[0], meta

    def check_id_unique(self, name: str, path: tuple, scope: Scope) -> None:
        """Alternatives may share an id when at most one of them is kept (`if`)."""
        if name in scope.names and name not in scope.skipped:
            first = scope.where.get(name)
            at = f" (first at line {first.line})" if first else ""
            raise error(f"id '{name}' is used twice in this graph{at}", self.doc.loc(path + ("id",)),
                        hint="ids name nodes within one graph or block; make them unique")

    def expand_node(self, raw, name: str, path: tuple, scope: Scope, env: Env, prefix: str, chain):
        op, meta = self.split(raw, path)
        try:
            active = meta.if_ is None or self.condition(meta.if_, path + ("if",), env)
        except SpecError as exc:
            raise at_node(exc, prefix + (meta.id or op)) from None
        if meta.id is not None and active:
            self.check_id_unique(name, path, scope)
        try:
            inputs = self.node_inputs(meta, path, scope, chain, prefix + name)
            if not active:  # the node stands for its input
                if name not in scope.names:
                    scope.names[name], scope.where[name] = Alias(inputs[0]), self.doc.loc(path)
                    scope.skipped.add(name)
                return Alias(inputs[0])
            value = self.repeated(op, raw.get(op), meta, path, scope, env, prefix + name, inputs)
        except SpecError as exc:
            raise at_node(exc, prefix + name) from None
        scope.names[name], scope.where[name] = value, self.doc.loc(path)
        scope.skipped.discard(name)
        self._try(self.check_node_name, name, op, meta, path, prefix, scope)
        return value

    def check_node_name(self, name: str, op: str, meta: NodeMeta, path: tuple, prefix: str, scope: Scope) -> None:
        """The name of a kept node becomes a module attribute in the built model (names.py)."""
        top_level = path[:1] == ("graph",) and not prefix
        if meta.id is not None:
            check_node_id(name, self.doc.loc(path + ("id",)), top_level, scope.names)
        else:
            check_node_id(name, self.doc.loc(path + (op,), key=True), top_level, scope.names, given=False)

    def node_inputs(self, meta: NodeMeta, path: tuple, scope: Scope, chain, node_path: str) -> list:
        if meta.from_ is None:
            if chain is None:
                raise error("this node has nothing to read", self.doc.loc(path), hint="give `from: <input or node>`")
            return [chain]
        refs = [meta.from_] if isinstance(meta.from_, str) else meta.from_
        if not refs:
            raise error("`from` is empty", self.doc.loc(path + ("from",)))
        base = path + ("from",)
        return [Ref(r, scope, self.doc.loc(base if isinstance(meta.from_, str) else base + (i,)), node_path)
                for i, r in enumerate(refs)]

    def condition(self, raw, path: tuple, env: Env) -> bool:
        value = evaluate_value(raw, path, env, self.doc)
        if not isinstance(value, bool):
            raise error(f"`if` must be true or false, got {value!r}", self.doc.loc(path),
                        hint="write a condition, e.g. ${depth > 0}")
        return value

    def repeated(self, op, body, meta: NodeMeta, path, scope, env, node_path, inputs):
        if meta.repeat is None:
            if meta.as_ is not None:
                raise error("`as` names the index of a `repeat`", self.doc.loc(path + ("as",)))
            return self.instantiate(op, body, path, scope, env, node_path, inputs)
        times = evaluate_value(meta.repeat, path + ("repeat",), env, self.doc)
        if isinstance(times, bool) or not isinstance(times, int) or not 0 <= times <= MAX_REPEAT:
            raise error(f"`repeat` must be a whole number from 0 to {MAX_REPEAT}, got {times!r}",
                        self.doc.loc(path + ("repeat",)))
        if times == 0:
            return Alias(inputs[0])
        index = meta.as_ or "i"
        self.graph.groups[node_path] = GroupInfo("repeat")
        group = Group(None)
        current = list(inputs)
        for k in range(times):
            value = self.instantiate(op, body, path, scope, env.child({index: k}), f"{node_path}.{k}", current)
            group.members[str(k)] = value
            current = [value] + current[1:]
        group.out = current[0]
        return group

    def instantiate(self, op, body, path, scope, env, node_path, inputs):
        if len(self.pending) > MAX_NODES:
            raise error(f"the spec expands to more than {MAX_NODES} nodes (archspec's limit)", self.doc.loc(path),
                        hint="a network of a few hundred nodes is large; check `repeat` counts and nested repeats")
        try:
            if op == GROUP or op in self.spec.blocks:
                return self.nested(op, body, path, scope, env, node_path, inputs)
            return self.primitive(op, body, path, scope, env, node_path, inputs, self.doc.locs.get(path + ("from",)))
        except SpecError as exc:
            raise at_node(exc, node_path) from None

    def nested(self, op, body, path, scope, env, node_path, inputs):
        """A group or block: nodes inside this node, at most MAX_NESTING levels deep (a chain of
        blocks each using the next is not bounded by the YAML's nesting)."""
        if self.depth >= MAX_NESTING:
            raise error(f"blocks and groups nest deeper than {MAX_NESTING} levels (archspec's limit)",
                        self.doc.loc(path + (op,), key=True),
                        hint="a network is a few levels deep (stages, blocks, sub-layers); use `repeat` for depth")
        self.depth += 1
        try:
            if op == GROUP:
                return self.group(body, path, scope, env, node_path, inputs)
            return self.block(op, body, path, env, node_path, inputs)
        finally:
            self.depth -= 1

    def group(self, body, path, scope, env, node_path, inputs):
        if not isinstance(body, list) or not body:
            raise error("`graph:` holds a non-empty list of nodes", self.doc.loc(path + (GROUP,)))
        if len(inputs) != 1:
            raise error("a `graph:` group reads one input; its nodes may read others with `from`",
                        self.doc.loc(path + ("from",)))
        inner = Scope(scope)
        self.graph.groups.setdefault(node_path, GroupInfo("group"))
        out = self.expand_list(body, path + (GROUP,), inner, env, node_path + ".", inputs[0])
        return Group(out, inner.names)

    def block(self, name, body, path, env, node_path, inputs):
        block: BlockDef = self.spec.blocks[name]
        if name in self.block_stack:
            loop = " -> ".join(self.block_stack[self.block_stack.index(name):] + [name])
            raise error(f"block '{name}' uses itself: {loop}", self.doc.loc(path + (name,), key=True),
                        hint="a block cannot contain itself; use `repeat` for depth")
        if len(inputs) != len(block.inputs):
            raise error(f"block '{name}' reads {len(block.inputs)} input(s) ({one_of(block.inputs)}), "
                        f"this node gives {len(inputs)}", self.doc.loc(path + ("from",)),
                        hint=f"name one node for each of {one_of(block.inputs)}: `from: [node, ...]`")
        args = self.block_args(name, block, body, path, env)
        self.block_uses.append((node_path, name, tuple(block.inputs), list(inputs)))
        inner = Scope(None)
        for input_name, value in zip(block.inputs, inputs):
            inner.names[input_name] = value
        self.block_stack.append(name)
        try:
            block_env = Env(self.params, (args,))
            out = self.expand_list(block.graph, ("blocks", name, "graph"), inner, block_env, node_path + ".",
                                   inputs[0])
        finally:
            self.block_stack.pop()
        members = {k: v for k, v in inner.names.items() if k not in block.inputs}
        return Group(out, members)

    def block_args(self, name, block: BlockDef, body, path, env) -> dict:
        given = body if body is not None else {}
        base = path + (name,)
        if not isinstance(given, dict):
            raise error(f"block '{name}' takes a mapping of its parameters", self.doc.loc(base))
        for key in given:
            if key not in block.params:
                hint = did_you_mean(key, block.params) or f"parameters: {one_of(block.params) or 'none'}"
                raise error(f"block '{name}' has no parameter '{key}'", self.doc.loc(base + (key,), key=True),
                            hint=hint)
        args = evaluate_value(given, base, env, self.doc)
        for key, default in block.params.items():
            if key in args:
                continue
            if default is None:
                raise error(f"block '{name}' needs parameter '{key}'", self.doc.loc(base, key=True),
                            hint=f"give it a value: `{name}: {{{key}: ...}}`")
            args[key] = evaluate_value(default, ("blocks", name, "params", key), Env(self.params, (args,)), self.doc)
        return args

    def primitive(self, name, body, path, scope, env, node_path, inputs, explicit=None):
        base = path + (name,)
        raw = body if body is not None else {}
        if not isinstance(raw, dict):
            raise error(f"{name} takes a mapping of parameters", self.doc.loc(base), hint=f"e.g. `- {name}: {{...}}`")
        values = evaluate_value(raw, base, env, self.doc)
        op, params = node_params(name, values, self.doc, base, node_path)
        if op.plugin is not None and op.plugin not in self.spec.requires:
            raise error(f"{op.label} comes from the plugin '{op.plugin}', which this spec does not require",
                        self.doc.loc(base, key=True), node_path, hint=f"add `requires: [{op.plugin}]` to the spec")
        refs = {k: Ref(values[k], scope, self.doc.loc(base + (k,)), node_path) for k in op.refs
                if isinstance(values.get(k), str)}
        expected = op.reads(params)
        if not expected and explicit is None:
            inputs = []  # a source (a learned parameter) reads nothing, not the previous node
        if (op.primitive == "loss") != node_path.startswith("objectives."):
            raise error("a loss goes under `objectives`, and `objectives` holds only losses"
                        if node_path.startswith("objectives.") else "a `loss` node belongs under `objectives`, not in "
                        "the graph", self.doc.loc(base, key=True), node_path,
                        hint="objectives read the graph's outputs and the targets; the model's forward computes the "
                             "graph, model.loss(...) the objectives")
        if not op.accepts(params, len(inputs)):
            kind = f" (kind {op.kind})" if op.kind else ""
            if not expected:
                raise error(f"{name} reads no input, and this node gives {len(inputs)}",
                            self.doc.loc(path + ("from",)), node_path, hint=f"{name} makes a tensor: remove `from`")
            count = f"{len(expected)} or more" if op.variadic else str(len(expected))
            names = one_of(expected) + (", ..." if op.variadic else "")
            raise error(f"{name}{kind} reads {count} input(s) ({names}), this node gives {len(inputs)}",
                        self.doc.loc(path + ("from",)), node_path,
                        hint=f"name one node for each of {names}: `from: [node, ...]`")
        param_locs = {k: self.doc.loc(base + (k,)) for k in values}
        self.pending.append(Pending(node_path, op, params, list(inputs), refs, self.doc.loc(base, key=True),
                                    param_locs, self.doc.locs.get(path + ("from",))))
        return Out(node_path)

    # -- references ---------------------------------------------------------------------------
    def resolve_all(self, top: Scope, last, objectives: Scope) -> None:
        for pending in self.pending:
            self._try(self.finish, pending)
        self.errors.raise_if_any()
        self.check_cycles()
        for path, block, names, values in self.block_uses:
            self.graph.groups[path] = GroupInfo("block", block, names, tuple(self.resolve(v) for v in values))
        self.graph.outputs = self._try(self.outputs, top, last) or []
        self.graph.objectives = [Output(name, self.resolve(value), objectives.where.get(name))
                                 for name, value in objectives.names.items() if self.resolve(value) is not None]
        self.check_objective_inputs()

    def resolve(self, value) -> str | None:
        return resolve(value, self.resolved)

    def check_objective_inputs(self) -> None:
        """Objectives read what the model gives (its outputs) and what it is given (its inputs
        and targets): model.loss computes them from forward's results."""
        given = {o.node for o in self.graph.outputs} | {n.name for n in self.graph.inputs() + self.graph.targets()}
        for objective in self.graph.objectives:
            node = self.graph.record(objective.node)
            for source in self.graph.inputs_of(node.name):
                if source not in given:
                    self.errors.add(error(f"objectives read the model's outputs, inputs and targets; {source} is none "
                                          "of them", node.from_loc or node.loc, node.name,
                                          hint=f"name {source} under `outputs`"))

    def finish(self, p: Pending) -> None:
        is_objective = p.name.startswith("objectives.")
        names = [self.resolve(v) for v in p.inputs]
        if any(n is None for n in names):
            return
        targets = [n for n in names if n in self.graph.target_names()]
        if targets and not is_objective:
            raise error(f"'{targets[0]}' is a training target: only objectives read targets", p.from_loc or p.loc,
                        p.name, hint="declare it under `inputs` if the network reads it")
        params = p.params
        if p.refs:
            params = params.model_copy(update={k: self.resolve(r) for k, r in p.refs.items()})
        self.graph.add(Node(p.name, p.op, params, p.loc, p.param_locs, p.from_loc), names)

    def check_cycles(self) -> None:
        if self.graph.order() is not None:
            return
        import networkx as nx  # only to name the cycle in the error

        cycle = nx.find_cycle(self.graph.to_networkx())
        names = [a for a, _, _ in cycle] + [cycle[0][0]]
        node = self.graph.record(cycle[-1][1])
        raise error(f"cycle: {' -> '.join(names)}", node.from_loc or node.loc, node.name,
                    hint="a node cannot read, directly or indirectly, its own output")

    def outputs(self, top: Scope, last) -> list[Output]:
        spec = self.spec.outputs
        if spec is None:
            name = self.resolve(last)
            return [Output("output", name, self.doc.loc(("graph",)))] if name else []
        if not spec:
            raise error("`outputs` is empty", self.doc.loc(("outputs",)),
                        hint="name the nodes the model returns, or leave `outputs` out to return the last node")
        items = spec.items() if isinstance(spec, dict) else [(t.replace(".", "_"), t) for t in spec]
        outs = []
        for i, (out_name, text) in enumerate(items):
            path = ("outputs", out_name) if isinstance(spec, dict) else ("outputs", i)
            loc = self.doc.loc(path)
            node = self.resolve(Ref(text, top, loc))
            if node is not None:
                outs.append(Output(out_name, node, loc))
        return outs


def unused_nodes(graph: Graph) -> list:
    """Warnings for the nodes and inputs no output depends on (their parameters and FLOPs
    are still counted, and they are still built)."""
    needed = graph.ancestors([out.node for out in graph.outputs + graph.objectives])
    found = []
    for node in graph.nodes():
        if node.name in needed:
            continue
        what = f"input '{node.name}'" if node.is_input else "this node"
        found.append(warning(f"no output depends on {what}", node.loc, None if node.is_input else node.name,
                             hint="read it with `from:`, name it under `outputs`, or remove it"))
    return found


def validate(doc: Document) -> SpecDoc:
    """The top-level document checked against the schema (all problems at once)."""
    if not isinstance(doc.data, dict):
        raise error("a spec is a mapping with `name`, `inputs` and `graph`", doc.loc(()))
    try:
        return SpecDoc.model_validate(doc.data)
    except ValidationError as exc:
        raise SpecError(diagnostics_from(exc, doc.data, doc, (), SpecDoc, "the spec")) from None


def expand(doc: Document) -> Graph:
    spec = validate(doc)
    with work_budget(), hint_budget():
        return Expander(doc, spec).run()
