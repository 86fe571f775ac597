"""expand: a validated spec document -> IR.

Evaluates params and `${...}` expressions, instantiates blocks, unrolls `repeat`, drops nodes
whose `if` is false, gives every node its dotted path, and resolves `from` references
(which may point forward; a loop among them is reported as a cycle). Independent errors are
collected and reported together.

Paths: a node's path is its id under the path of what contains it. A repeated node gets
`id.0`, `id.1`, ...; the nodes of a block or of an inline `graph:` group live under the
path of the node that uses it: stages.2.blocks.1.attn.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, get_args

import networkx as nx
from pydantic import ValidationError

from archspec.diagnostics import Collector, Diagnostic, Loc, SpecError, did_you_mean, error, one_of
from archspec.expressions import ExprError, evaluate, has_expression, interpolate
from archspec.loader import Document
from archspec.schema import META_KEYS, BlockDef, NodeMeta, SpecDoc, diagnostics_from

from . import primitives  # noqa: F401  (registers the primitives)
from .ir import INPUT, Graph, Node, Output
from .registry import MAX_SIZE, PRIMITIVES, kinds_of
from .types import BATCH, Sym, TensorType, grid_tokens, ids, image, tokens, vector

MAX_REPEAT = 10_000
MAX_NODES = 50_000
GROUP = "graph"  # the op key of an inline group of nodes
REF_PARAMS = ("tie",)  # parameters that name another node


class _Silent(Exception):
    """A problem already reported elsewhere (a failed param or node); stop quietly."""


def at_node(exc: SpecError, node_path: str) -> SpecError:
    """The same diagnostics, those without a node path given `node_path`."""
    return SpecError([d if d.path else replace(d, path=node_path) for d in exc.diagnostics])


# -- values: what a name in a scope stands for ---------------------------------------------------


@dataclass
class Out:
    node: str  # a primitive node's output


@dataclass
class Group:
    out: Any  # the value reading the group gives
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


POISON = object()  # the value of a node that failed: readers are skipped silently


class Scope:
    def __init__(self, parent: "Scope | None"):
        self.parent = parent
        self.names: dict[str, Any] = {}
        self.where: dict[str, Loc | None] = {}
        self.skipped: set[str] = set()  # ids of nodes whose `if` is false: an active node may take them

    def visible(self) -> list[str]:
        scope, names = self, []
        while scope:
            names += list(scope.names)
            scope = scope.parent
        return names


# -- expressions -----------------------------------------------------------------------------------


class Params:
    """The spec's params, evaluated on first use (so order does not matter), cycles refused."""

    def __init__(self, raw: dict, doc: Document):
        self.raw, self.doc = raw, doc
        self.values: dict[str, Any] = {}
        self.stack: list[str] = []

    def get(self, name: str) -> Any:
        if name in self.values:
            if self.values[name] is POISON:
                raise _Silent()
            return self.values[name]
        if name not in self.raw:
            raise KeyError(name)
        if name in self.stack:
            cycle = " -> ".join(self.stack[self.stack.index(name):] + [name])
            raise error(f"param '{name}' depends on itself: {cycle}", self.doc.loc(("params", name)),
                        hint="give one of them a value that does not depend on the others")
        self.stack.append(name)
        try:
            self.values[name] = evaluate_value(self.raw[name], ("params", name), Env(self), self.doc)
        except (SpecError, _Silent):
            self.values[name] = POISON
            raise
        finally:
            self.stack.pop()
        return self.values[name]


class Env:
    """Names visible to an expression: loop indices and block parameters, then params."""

    def __init__(self, params: Params, frames: tuple[dict, ...] = ()):
        self.params, self.frames = params, frames

    def child(self, frame: dict) -> "Env":
        return Env(self.params, (frame,) + self.frames)

    def lookup(self, name: str) -> Any:
        for frame in self.frames:
            if name in frame:
                return frame[name]
        return self.params.get(name)

    def names(self) -> list[str]:
        return [n for f in self.frames for n in f] + list(self.params.raw)


def evaluate_value(value: Any, path: tuple, env: Env, doc: Document) -> Any:
    """A value with every `${...}` inside it evaluated; errors point into the expression."""
    if isinstance(value, dict):
        return {k: evaluate_value(v, path + (k,), env, doc) for k, v in value.items()}
    if isinstance(value, list):
        return [evaluate_value(v, path + (i,), env, doc) for i, v in enumerate(value)]
    if not has_expression(value):
        return value
    try:
        return interpolate(value, env.lookup, env.names)
    except ExprError as exc:
        loc = doc.loc(path)
        if loc is not None:
            quote = 1 if path in doc.quoted else 0
            loc = Loc(loc.file, loc.line, loc.col + quote + exc.offset)
        raise error(exc.message, loc, hint=exc.hint) from None


# -- the expansion -----------------------------------------------------------------------------------


@dataclass
class Pending:
    """A primitive node whose references are not resolved yet."""

    name: str
    op: str
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
        self.graph = Graph(spec.name, spec.doc, doc.file)

    # -- top level ------------------------------------------------------------------------
    def run(self) -> Graph:
        for name in self.spec.params:
            self._try(self.params.get, name)
        self.check_block_names()
        self.errors.raise_if_any()
        self.graph.dims = self.symbolic_dims()
        self.errors.raise_if_any()
        top = Scope(None)
        chain = None
        for name in self.spec.inputs:
            input_type = self._try(self.input_type, name)
            if input_type is None:
                continue
            self.graph.add(Node(name, INPUT, None, loc=self.doc.loc(("inputs", name), key=True), type=input_type))
            top.names[name] = Out(name)
            top.where[name] = self.doc.loc(("inputs", name), key=True)
            chain = chain or Out(name)
        self.errors.raise_if_any()
        last = self.expand_list(self.spec.graph, ("graph",), top, Env(self.params), "", chain)
        self.errors.raise_if_any()
        self.resolve_all(top, last)
        self.errors.raise_if_any()
        self.graph.lint()
        return self.graph

    def _try(self, fn, *args):
        try:
            return fn(*args)
        except SpecError as exc:
            self.errors.add(exc)
        except _Silent:
            pass
        return None

    def check_block_names(self) -> None:
        for name in self.spec.blocks:
            taken = ("a primitive" if name in PRIMITIVES else "the key of inline groups" if name == GROUP
                     else f"the node key `{name}`" if name in META_KEYS else None)
            if taken:
                self.errors.add(error(f"block '{name}' has the name of {taken}",
                                      self.doc.loc(("blocks", name), key=True), hint="give the block another name"))

    def symbolic_dims(self) -> dict[str, Sym]:
        dims = {"B": BATCH}
        for name, bounds in self.spec.dims.items():
            loc = self.doc.loc(("dims", name))
            if name == "B":
                self.errors.add(error("`B` is the batch and is always symbolic; declare other dims", loc))
            elif name in self.spec.params:
                self.errors.add(error(f"dim '{name}' has the name of a param", loc, hint="rename one of them"))
            elif len(bounds) != 2 or not 1 <= bounds[0] <= bounds[1] <= MAX_SIZE:
                self.errors.add(error(f"dim '{name}' needs a range [min, max] with 1 <= min <= max <= {MAX_SIZE:,}",
                                      loc))
            else:
                dims[name] = Sym(name, bounds[0], bounds[1])
        return dims

    def input_type(self, name: str) -> TensorType:
        decl = self.spec.inputs[name]
        base = ("inputs", name)
        shape_raw = decl if isinstance(decl, list) else decl.shape
        shape_path = base if isinstance(decl, list) else base + ("shape",)
        dtype = "float32" if isinstance(decl, list) else decl.dtype
        shape = [self.input_dim(v, shape_path + (i,)) for i, v in enumerate(shape_raw)]
        loc = self.doc.loc(shape_path)
        if not shape or shape[0] is not BATCH:
            raise error(f"input '{name}' must start with the batch dim B", self.doc.loc(shape_path + (0,)),
                        hint=f"e.g. [B, {', '.join(str(d) for d in shape[1:]) or '3, 224, 224'}]")
        rank = len(shape)
        grid = None if isinstance(decl, list) else decl.grid
        if dtype == "int64":
            if rank != 2:
                raise error(f"integer input '{name}' must be token ids [B, L]", loc)
            return ids(shape[1])
        if rank == 4:
            if any(isinstance(d, Sym) for d in shape[1:]):
                raise error("an image's channels and size must be fixed numbers", loc,
                            hint="check other sizes with --set (e.g. --set img=256)")
            return image(*shape[1:])
        if rank == 3:
            if grid is None:
                return tokens(shape[1], shape[2])
            if len(grid) != 2 or grid[0] * grid[1] != shape[1]:
                raise error(f"grid {grid} does not hold {shape[1]} tokens", self.doc.loc(base + ("grid",)))
            return grid_tokens(tuple(grid), shape[2])
        if rank == 2:
            return vector(shape[1])
        raise error(f"input '{name}' has rank {rank}; inputs are images [B,C,H,W], tokens [B,N,C], "
                    "ids [B,L] (dtype int64) or vectors [B,C]", loc)

    def input_dim(self, value: Any, path: tuple):
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("${") and text.endswith("}"):
                text = text[2:-1]
            if text in self.graph.dims:
                return self.graph.dims[text]
            try:
                value = evaluate(text, Env(self.params).lookup, Env(self.params).names)
            except ExprError as exc:
                hint = exc.hint or "sizes are numbers, B, a dim declared under `dims`, or an expression over params"
                raise error(exc.message, self.doc.loc(path), hint=hint) from None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise error(f"a size must be a positive integer, got {value!r}", self.doc.loc(path))
        if value > MAX_SIZE:
            raise error(f"a size of {value} is beyond archspec's limit of {MAX_SIZE:,}", self.doc.loc(path))
        return value

    # -- graphs and nodes -------------------------------------------------------------------
    def expand_list(self, nodes: list, path: tuple, scope: Scope, env: Env, prefix: str, chain):
        defaults: dict[str, int] = {}
        for i, raw in enumerate(nodes):
            try:
                chain = self.expand_node(raw, path + (i,), scope, env, prefix, chain, defaults)
            except SpecError as exc:
                self.errors.add(exc)
                chain = POISON
            except _Silent:
                chain = POISON
        return chain

    def split(self, raw: Any, path: tuple) -> tuple[str, dict]:
        """(op key, meta) of a node mapping."""
        if not isinstance(raw, dict):
            raise error("a graph node must be a mapping like `- attention: {kind: global, heads: 12}`",
                        self.doc.loc(path))
        ops = [k for k in raw if k not in META_KEYS]
        known = list(PRIMITIVES) + list(self.spec.blocks) + [GROUP]
        for op in ops:
            if op not in known:
                hint = did_you_mean(op, known + list(META_KEYS)) or _parameter_of(op) or f"ops: {one_of(known)}"
                raise error(f"unknown op '{op}'", self.doc.loc(path + (op,), key=True), hint=hint)
        if not ops:
            raise error("this node has no op", self.doc.loc(path),
                        hint=f"give one of {one_of(list(PRIMITIVES))}, a block's name, or graph: [...]")
        if len(ops) > 1:
            raise error(f"a node has one op; this one has {one_of(ops)}", self.doc.loc(path + (ops[1],), key=True),
                        hint="split them into two nodes")
        meta_raw = {k: v for k, v in raw.items() if k in META_KEYS}
        try:
            meta = NodeMeta.model_validate(meta_raw)
        except ValidationError as exc:
            raise SpecError(diagnostics_from(exc, meta_raw, self.doc, path, NodeMeta, "node")) from None
        return ops[0], meta

    def node_id(self, op: str, meta: NodeMeta, scope: Scope, path: tuple, defaults: dict, active: bool) -> str:
        if meta.id is not None:
            name = meta.id
            # alternatives may share an id when at most one of them is kept (`if`)
            if name in scope.names and active and name not in scope.skipped:
                first = scope.where.get(name)
                at = f" (first at line {first.line})" if first else ""
                raise error(f"id '{name}' is used twice in this graph{at}", self.doc.loc(path + ("id",)),
                            hint="ids name nodes within one graph or block; make them unique")
            return name
        count = defaults.get(op, 0)
        name = op if count == 0 else f"{op}_{count}"
        while name in scope.names:
            count += 1
            name = f"{op}_{count}"
        defaults[op] = count + 1
        return name

    def expand_node(self, raw, path: tuple, scope: Scope, env: Env, prefix: str, chain, defaults: dict):
        op, meta = self.split(raw, path)
        try:
            active = meta.if_ is None or self.condition(meta.if_, path + ("if",), env)
        except SpecError as exc:
            raise at_node(exc, prefix + (meta.id or op)) from None
        name = self.node_id(op, meta, scope, path, defaults, active)
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
        return value

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
            raise error(f"the spec expands to more than {MAX_NODES} nodes", self.doc.loc(path))
        try:
            if op == GROUP:
                return self.group(body, path, scope, env, node_path, inputs)
            if op in self.spec.blocks:
                return self.block(op, body, path, env, node_path, inputs)
            return self.primitive(op, body, path, scope, env, node_path, inputs)
        except SpecError as exc:
            raise at_node(exc, node_path) from None

    def group(self, body, path, scope, env, node_path, inputs):
        if not isinstance(body, list) or not body:
            raise error("`graph:` holds a non-empty list of nodes", self.doc.loc(path + (GROUP,)))
        if len(inputs) != 1:
            raise error("a `graph:` group reads one input; its nodes may read others with `from`",
                        self.doc.loc(path + ("from",)))
        inner = Scope(scope)
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

    def primitive(self, op, body, path, scope, env, node_path, inputs):
        prim = PRIMITIVES[op]
        base = path + (op,)
        raw = body if body is not None else {}
        if not isinstance(raw, dict):
            raise error(f"{op} takes a mapping of parameters", self.doc.loc(base),
                        hint=f"e.g. `- {op}: {{...}}`")
        values = evaluate_value(raw, base, env, self.doc)
        refs = {k: Ref(v, scope, self.doc.loc(base + (k,)), node_path) for k, v in values.items()
                if k in REF_PARAMS and isinstance(v, str)}
        try:
            params = prim.adapter().validate_python(values)
        except ValidationError as exc:
            kind = values.get("kind") if isinstance(values, dict) else None
            what = f"{op} (kind {kind})" if kind in (kinds_of(prim.params) or []) else op
            raise SpecError(diagnostics_from(exc, values, self.doc, base, prim.params, what, node_path)) from None
        expected = prim.input_names(params)
        if len(inputs) != len(expected):
            kind = f" (kind {params.kind})" if hasattr(params, "kind") else ""
            raise error(f"{op}{kind} reads {len(expected)} input(s) ({one_of(expected)}), "
                        f"this node gives {len(inputs)}", self.doc.loc(path + ("from",)), node_path,
                        hint=f"name one node for each of {one_of(expected)}: `from: [node, ...]`")
        param_locs = {k: self.doc.loc(base + (k,)) for k in values}
        from_path = path + ("from",)
        from_loc = self.doc.locs.get(from_path)
        self.pending.append(Pending(node_path, op, params, list(inputs), refs, self.doc.loc(base, key=True),
                                    param_locs, from_loc))
        return Out(node_path)

    # -- references ---------------------------------------------------------------------------
    def resolve(self, value, seen: frozenset = frozenset()) -> str | None:
        """The IR node a value stands for (None when it is poisoned)."""
        if value is POISON or value is None:
            return None
        if isinstance(value, Out):
            return value.node
        if isinstance(value, Group):
            return self.resolve(value.out, seen)
        if isinstance(value, Alias):
            return self.resolve(value.target, seen)
        if isinstance(value, Ref):
            key = (value.text, id(value.scope))
            if key in seen:
                raise error(f"'{value.text}' refers to itself through skipped nodes", value.loc, value.owner)
            return self.resolve(self.lookup(value), seen | {key})
        raise RuntimeError(f"expand: unexpected value {value!r}")

    def lookup(self, ref: Ref):
        first, *rest = ref.text.split(".")
        scope = ref.scope
        while scope is not None and first not in scope.names:
            scope = scope.parent
        if scope is None:
            hint = did_you_mean(first, ref.scope.visible())
            raise error(f"unknown node '{first}'", ref.loc, ref.owner,
                        hint=hint or f"known here: {one_of(ref.scope.visible())}")
        value, walked = scope.names[first], first
        for part in rest:
            while isinstance(value, Alias) and isinstance(value.target, Group):
                value = value.target
            members = value.members if isinstance(value, Group) else {}
            if part not in members:
                known = one_of(members) if members else "nothing"
                hint = did_you_mean(part, members)
                if hint is None and members and all(k.isdigit() for k in members):
                    hint = f"'{walked}' is repeated: name one repetition, e.g. {walked}.{list(members)[-1]}.{part}"
                raise error(f"'{walked}' has no member '{part}' (it has {known})", ref.loc, ref.owner, hint=hint)
            value, walked = members[part], f"{walked}.{part}"
        return value

    def resolve_all(self, top: Scope, last) -> None:
        for pending in self.pending:
            node = self._try(self.finish, pending)
            if node is not None:
                self.graph.add(node)
        self.errors.raise_if_any()
        self.check_cycles()
        self.graph.outputs = self._try(self.outputs, top, last) or []

    def finish(self, p: Pending) -> Node | None:
        names = [self.resolve(v) for v in p.inputs]
        if any(n is None for n in names):
            return None
        params = p.params
        if p.refs:
            resolved = {k: self.resolve(r) for k, r in p.refs.items()}
            params = params.model_copy(update=resolved)
        return Node(p.name, p.op, params, tuple(names), p.loc, p.param_locs, p.from_loc)

    def check_cycles(self) -> None:
        try:
            cycle = nx.find_cycle(self.graph.nx)
        except nx.NetworkXNoCycle:
            return
        names = [a for a, _ in cycle] + [cycle[0][0]]
        node = self.graph.node(cycle[-1][1])
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


def _parameter_of(key: str) -> str | None:
    """A hint for a primitive's parameter written where an op belongs (`- ratio: 4` for `- mlp: ...`)."""
    owners = []
    for name, prim in PRIMITIVES.items():
        models = get_args(prim.params.__origin__) if kinds_of(prim.params) else (prim.params,)
        if any(key in m.model_fields for m in models):
            owners.append(name)
    if not owners:
        return None
    return f"'{key}' is a parameter of {one_of(owners)}; put it under its op, e.g. `{owners[0]}: {{{key}: ...}}`"


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
    return Expander(doc, spec).run()


__all__ = ["expand", "validate", "Diagnostic"]
