"""The checks expansion makes, each a small function: of the spec's names before the graph
expands, of one node (its mapping, its `if`, `repeat` and id, a block use, an inline group, a
primitive's plugin, place and input count), and of the expanded graph (cycles, what objectives
read). Each raises, or returns, a located error with the text and hint `check` shows; `doc` and
`path` (the node item's path in the document) give the place, looked up only on a failure.
"""

from __future__ import annotations

from ..core.declared import ValidationError
from ..core.errors import Diagnostic, SpecError, error
from ..core.ir import Graph
from ..core.words import DidYouMean, did_you_mean, one_of, plural
from ..primitives import registry
from ..primitives.base import Op
from .hints import some, suggest
from .limits import MAX_NESTING, MAX_NODES, MAX_REPEAT
from .loader import Document
from .names import OBJECTIVES, check_parameter_name
from .node_params import misplaced_parameter
from .param_types import TIMM_KEYWORDS
from .schema import GROUP, META_KEYS, BlockDef, NodeMeta, SpecDoc
from .scope import Scope
from .validation import diagnostics_from


# -- the spec's names, before the graph expands ------------------------------------------------------
def block_name_problems(spec: SpecDoc, doc: Document) -> list[SpecError]:
    """A block may not have the name of a primitive, of inline groups or of a node key."""
    problems = []
    for name in spec.blocks:
        taken = ("a primitive" if name in registry.primitives() else "the key of inline groups" if name == GROUP
                 else f"the node key `{name}`" if name in META_KEYS else None)
        if taken:
            problems.append(error(f"block '{name}' has the name of {taken}", doc.loc(("blocks", name), key=True),
                                  hint="give the block another name"))
    return problems


def parameter_name_problems(spec: SpecDoc, doc: Document) -> list[SpecError]:
    """Names that become parameters of a forward (inputs, targets, block inputs) are Python names."""
    problems = []
    for section in ("inputs", "targets"):
        names = getattr(spec, section)
        problems += [check_parameter_name(name, section[:-1], doc.loc((section, name), key=True), names,
                                          top_level=True)
                     for name in names]
    for block_name, block in spec.blocks.items():
        problems += [check_parameter_name(name, f"block '{block_name}' input",
                                          doc.loc(("blocks", block_name, "inputs", i)), block.inputs)
                     for i, name in enumerate(block.inputs)]
    return [problem for problem in problems if problem is not None]


def param_declaration_problems(spec: SpecDoc, doc: Document) -> list[SpecError]:
    """`param_types` and `timm_args` name the spec's params."""
    named = [(name, doc.loc(("param_types", name), key=True), "param_types") for name in spec.param_types]
    named += [(target, doc.loc(("timm_args", key)), "timm_args") for key, target in spec.timm_args.items()
              if isinstance(target, str)]
    problems = [error(f"timm_args: '{key}' is not one of timm.create_model's keywords", doc.loc(("timm_args", key), key=True),
                      hint=suggest(key, TIMM_KEYWORDS) or f"timm's keywords: {', '.join(TIMM_KEYWORDS)}")
                for key in spec.timm_args if key not in TIMM_KEYWORDS]
    problems += data_config_problems(spec, doc)
    for name, where, section in named:
        if name not in spec.params:
            hint = suggest(name, spec.params) or (f"params: {some(spec.params)}" if spec.params else
                                                  "declare it under `params`")
            problems.append(error(f"{section}: '{name}' is not a param of this spec", where, hint=hint))
    return problems


def data_config_problems(spec: SpecDoc, doc: Document) -> list[SpecError]:
    """`pretrained_cfg`'s mean and std give one value per channel: as many of one as of the other."""
    cfg = spec.pretrained_cfg
    if cfg is None or cfg.mean is None or cfg.std is None or len(cfg.mean) == len(cfg.std):
        return []
    return [error(f"pretrained_cfg: mean has {len(cfg.mean)} values and std {len(cfg.std)}",
                  doc.loc(("pretrained_cfg", "std")), hint="give one mean and one std per input channel")]


# -- one node --------------------------------------------------------------------------------------
def op_and_meta(raw, path: tuple, doc: Document, spec: SpecDoc) -> tuple[str, NodeMeta]:
    """(op key, meta) of a node mapping: exactly one known op, and valid node keys."""
    if not isinstance(raw, dict):
        raise error("a graph node must be a mapping like `- attention: {kind: global, heads: 12}`", doc.loc(path))
    ops = [k for k in raw if k not in META_KEYS]
    known = registry.primitives() + list(spec.blocks) + [GROUP]
    for op in ops:
        if op not in known:
            raise _unknown_op(op, known, doc.loc(path + (op,), key=True))
    if not ops:
        raise error("this node has no op", doc.loc(path),
                    hint=f"give one of {one_of(registry.primitives())}, a block's name, or graph: [...]")
    if len(ops) > 1:
        raise error(f"a node has one op; this one has {one_of(ops)}", doc.loc(path + (ops[1],), key=True),
                    hint="split them into two nodes")
    meta_raw = {k: v for k, v in raw.items() if k in META_KEYS}
    try:
        return ops[0], NodeMeta.model_validate(meta_raw)
    except ValidationError as exc:
        raise SpecError(diagnostics_from(exc, meta_raw, doc, path, NodeMeta, "node")) from None


def _unknown_op(op: str, known: list[str], where) -> SpecError:
    import difflib  # only when a node is misspelt: keeps `archspec check` start-up short

    meta = difflib.get_close_matches(op, META_KEYS, n=1, cutoff=0.75)  # `mask` is not `as`
    if meta and not suggest(op, known):  # a misspelt node key (`fromm`), not an op
        return error(f"unknown key '{op}' in this node", where, hint=DidYouMean(op, meta[0]))
    hint = suggest(op, known) or misplaced_parameter(op) or f"ops: {some(known)}"
    return error(f"unknown op '{op}'", where, hint=hint)


def check_id_unique(name: str, scope: Scope, doc: Document, path: tuple, conditional: bool = False,
                    values: str = "") -> None:
    """A kept node's id is not taken in its graph (alternatives, `if`, may share an id when at
    most one of them is kept). `conditional`: this node has an `if` (an alternative whose
    condition held beside another's); `values`: the repeat indices and block arguments then."""
    if name in scope.names and name not in scope.skipped:
        first = scope.where.get(name)
        at = f" (first at line {first.line})" if first else ""
        if conditional:  # the ModernBERT trial was told to make the ids unique, which alternatives are not
            when = f" (with {values})" if values else ""
            raise error(f"id '{name}' is kept twice in this graph{at}: alternatives share an id when one of them "
                        f"is kept, and here both are kept{when}", doc.loc(path + ("if",)),
                        hint="make the conditions exclude each other, e.g. `if: ${i == 0}` and `if: ${i != 0}`")
        raise error(f"id '{name}' is used twice in this graph{at}", doc.loc(path + ("id",)),
                    hint="ids name nodes within one graph or block; make them unique")


def check_condition(value, doc: Document, path: tuple) -> None:
    if not isinstance(value, bool):
        raise error(f"`if` must be true or false, got {value!r}", doc.loc(path + ("if",)),
                    hint="write a condition, e.g. ${depth > 0}")


def check_flag(value, key: str, doc: Document, path: tuple) -> None:
    if not isinstance(value, bool):
        raise error(f"`{key}` must be true or false, got {value!r}", doc.loc(path + (key,)),
                    hint="write true, false, or an expression giving one, e.g. ${i == 0}")


def check_no_index(meta: NodeMeta, doc: Document, path: tuple) -> None:
    """`as` and `share` only with `repeat`."""
    if meta.as_ is not None:
        raise error("`as` names the index of a `repeat`", doc.loc(path + ("as",)))
    if meta.share is not None:
        raise error("`share` goes with `repeat`: it makes the copies of a repeated node use one set of weights",
                    doc.loc(path + ("share",)), hint="add `repeat: N` to this node, or remove `share`")


def check_weights_of(meta: NodeMeta, doc: Document, path: tuple) -> None:
    """`weights_of` names one node's weights for one node: a repeat shares its copies with `share`."""
    if meta.repeat is not None:
        raise error("`weights_of` and `repeat` together: the copies would all use one other node's weights",
                    doc.loc(path + ("weights_of",)),
                    hint="repeat a node with `share: true` to make its copies one set of weights, or tie one node")


def check_shared_copy(copy: dict, first: dict, k: int, doc: Document, path: tuple) -> None:
    """Copy `k` of a `share: true` repeat has the nodes of copy 0 (by their paths inside the
    copy), each of the same op: one set of weights serves them all."""
    extra = [n for n in copy if n not in first]
    lacking = [n for n in first if n not in copy]
    if extra or lacking:
        what = (f"'{extra[0]}', which copy 0 lacks" if extra else f"no '{lacking[0]}', which copy 0 has")
        raise error(f"the copies of a shared repeat differ: copy {k} has {what}", doc.loc(path + ("share",)),
                    hint="copies that share weights hold the same nodes; an `if` over the repeat index cannot "
                         "drop a node from some of them")
    for rel, op in copy.items():
        if op is not first[rel]:
            raise error(f"the copies of a shared repeat differ: '{rel}' is {op.label} in copy {k} and "
                        f"{first[rel].label} in copy 0", doc.loc(path + ("share",)),
                        hint="copies that share weights compute the same ops")


def check_repeat_count(times, doc: Document, path: tuple) -> None:
    if isinstance(times, bool) or not isinstance(times, int) or not 0 <= times <= MAX_REPEAT:
        raise error(f"`repeat` must be a whole number from 0 to {MAX_REPEAT}, got {times!r}",
                    doc.loc(path + ("repeat",)))


def check_node_count(count: int, doc: Document, path: tuple) -> None:
    if count > MAX_NODES:
        raise error(f"the spec expands to more than {MAX_NODES} nodes (archspec's limit)", doc.loc(path),
                    hint="a network of a few hundred nodes is large; check `repeat` counts and nested repeats")


def check_nesting(depth: int, op: str, doc: Document, path: tuple) -> None:
    """Blocks and groups nest at most MAX_NESTING levels deep (a chain of blocks each using the
    next is not bounded by the YAML's nesting)."""
    if depth >= MAX_NESTING:
        raise error(f"blocks and groups nest deeper than {MAX_NESTING} levels (archspec's limit)",
                    doc.loc(path + (op,), key=True),
                    hint="a network is a few levels deep (stages, blocks, sub-layers); use `repeat` for depth")


def check_group(body, inputs: list, doc: Document, path: tuple) -> None:
    if not isinstance(body, list) or not body:
        raise error("`graph:` holds a non-empty list of nodes", doc.loc(path + (GROUP,)))
    if len(inputs) != 1:
        raise error("a `graph:` group reads one input; its nodes may read others with `from`",
                    doc.loc(path + ("from",)))


def check_block_use(name: str, block: BlockDef, using: list[str], inputs: list, doc: Document, path: tuple) -> None:
    """A block does not use itself (`using`: the blocks being expanded), and gets its inputs."""
    if name in using:
        loop = " -> ".join(using[using.index(name):] + [name])
        raise error(f"block '{name}' uses itself: {loop}", doc.loc(path + (name,), key=True),
                    hint="a block cannot contain itself; use `repeat` for depth")
    if len(inputs) != len(block.inputs):
        raise error(f"block '{name}' reads {len(block.inputs)} input(s) ({one_of(block.inputs)}), "
                    f"this node gives {len(inputs)}", doc.loc(path + ("from",)),
                    hint=f"name one node for each of {one_of(block.inputs)}: `from: [node, ...]`")


def check_block_arguments(name: str, block: BlockDef, given, doc: Document, path: tuple) -> None:
    """A block use gives a mapping of the block's parameters."""
    base = path + (name,)
    if not isinstance(given, dict):
        raise error(f"block '{name}' takes a mapping of its parameters", doc.loc(base))
    for key in given:
        if key not in block.params:
            hint = did_you_mean(key, block.params) or f"parameters: {one_of(block.params) or 'none'}"
            raise error(f"block '{name}' has no parameter '{key}'", doc.loc(base + (key,), key=True), hint=hint)


def missing_block_argument(name: str, key: str, doc: Document, path: tuple) -> SpecError:
    return error(f"block '{name}' needs parameter '{key}'", doc.loc(path + (name,), key=True),
                 hint=f"give it a value: `{name}: {{{key}: ...}}`")


def check_parameter_mapping(name: str, raw, doc: Document, path: tuple) -> None:
    if not isinstance(raw, dict):
        raise error(f"{name} takes a mapping of parameters", doc.loc(path + (name,)), hint=f"e.g. `- {name}: {{...}}`")


def check_plugin_required(op: Op, spec: SpecDoc, doc: Document, path: tuple, node_path: str) -> None:
    if op.plugin is not None and op.plugin not in spec.requires:
        raise error(f"{op.label} comes from the plugin '{op.plugin}', which this spec does not require",
                    doc.loc(path + (op.primitive,), key=True), node_path,
                    hint=f"add `requires: [{op.plugin}]` to the spec")


def check_objective_place(op: Op, doc: Document, path: tuple, node_path: str) -> None:
    """Losses (objective ops) go under `objectives`, and only they."""
    under_objectives = node_path.startswith(OBJECTIVES + ".")
    if op.objective != under_objectives:
        raise error("a loss goes under `objectives`, and `objectives` holds only losses" if under_objectives
                    else "a `loss` node belongs under `objectives`, not in the graph",
                    doc.loc(path + (op.primitive,), key=True), node_path,
                    hint="objectives read the graph's outputs and the targets; the model's forward computes the "
                         "graph, model.loss(...) the objectives")


def check_input_count(op: Op, params, count: int, doc: Document, path: tuple, node_path: str,
                      base: tuple = ()) -> None:
    """The node gives the op as many inputs as it reads; when it does not because an option that
    names inputs is malformed (a score part's misspelt option), that option's error instead."""
    if op.accepts(params, count):
        return
    problem = op.reads_problem(params)
    if problem is not None:
        field = tuple(int(k) if k.isdigit() else k for k in (problem.field or "").split(".") if k)
        where = doc.loc(base + field, key=bool(field) and isinstance(field[-1], str))  # at the option's key
        raise SpecError(Diagnostic(problem.message, where, node_path, suggestion=problem.suggestion))
    name, expected = op.primitive, op.reads(params)
    where = doc.loc(path + ("from",))
    if not expected:
        raise error(f"{name} reads no input here, and `from` names {plural(count, 'node')}", where, node_path,
                    hint=f"{name} makes a tensor: remove `from`")
    kind = f" (kind {op.kind})" if op.kind else ""
    wanted = f"{len(expected)} or more" if op.variadic else str(len(expected))
    names = one_of(expected) + (", ..." if op.variadic else "")
    more = op.more_inputs_hint(params, count)
    raise error(f"{name}{kind} reads {wanted} input(s) ({names}), this node gives {count}", where, node_path,
                hint=f"name one node for each of {names}: `from: [node, ...]`" + (f"; {more}" if more else ""))


# -- the expanded graph ------------------------------------------------------------------------------
def check_acyclic(graph: Graph) -> None:
    if graph.order() is not None:
        return
    import networkx as nx  # only to name the cycle in the error

    cycle = nx.find_cycle(graph.to_networkx())
    names = [a for a, _, _ in cycle] + [cycle[0][0]]
    node = graph.record(cycle[-1][1])
    hint = "a node cannot read, directly or indirectly, its own output"
    if across_copies(names):
        hint += ("; the cycle runs through copies of a repeated group, where a name from outside it "
                 "is the whole repeat's output, not a copy's input: to read the input, write a block "
                 "with `inputs: [x]` (section 3.5)")
    raise error(f"cycle: {' -> '.join(names)}", node.from_loc or node.loc, node.name, hint=hint)


def across_copies(names: list[str]) -> bool:
    """Whether node paths go through two copies of one repeat (`h.0.out`, `h.1.attn`)."""
    copies: dict[str, set[str]] = {}
    for name in names:
        parts = name.split(".")
        for i, part in enumerate(parts[1:], start=1):
            if part.isdigit():
                copies.setdefault(".".join(parts[:i]), set()).add(part)
    return any(len(seen) > 1 for seen in copies.values())


def objective_input_problems(graph: Graph) -> list[SpecError]:
    """Objectives read what the model gives (its outputs) and what it is given (its inputs
    and targets): model.loss computes them from forward's results."""
    given = {o.node for o in graph.outputs} | {n.name for n in graph.inputs() + graph.targets()}
    problems = []
    for objective in graph.objectives:
        node = graph.record(objective.node)
        problems += [error(f"objectives read the model's outputs, inputs and targets; {source} is none of them",
                           node.from_loc or node.loc, node.name, hint=f"name {source} under `outputs`")
                     for source in graph.inputs_of(node.name) if source not in given]
    return problems
