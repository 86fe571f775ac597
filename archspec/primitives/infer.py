"""infer: the output type of every node, by its op's shape rule (JAX's abstract evaluation:
a table of small rules, here hung on each op object). Errors are located at the parameter
the rule names, or at the node; nodes downstream of a failed node are skipped, not reported
twice. Results: meta["type"]."""

from __future__ import annotations

import struct
from dataclasses import replace

from ..core.errors import Diagnostic, warning
from ..core.interpreter import Interpreter, NodeFailed
from ..core.suggestions import Note
from ..core.ir import Graph, NodeView
from ..core.types import BATCH, TensorType, batch_factor
from .base import RuleError
from .dtypes import check_reads
from .index_ranges import record_and_check


class GraphContext:
    """The rule context of the torch-free passes (see base.RuleContext)."""

    def __init__(self, graph: Graph, node: NodeView):
        self.graph, self.node = graph, node

    def node_named(self, name: str) -> NodeView:
        return self.graph.node(name)

    def readers(self, name: str) -> list[str]:
        return self.graph.readers(name)

    def reader_bounds(self, name: str) -> list[tuple[str, object]]:
        """readers_bounds of `name` in this graph."""
        return readers_bounds(self.graph, name)

    def warn(self, message: str, field: str | None = None, hint: str | None = None) -> None:
        found = warning(message, self.node.param_loc(field or "from"), self.node.name, hint)
        if not any(w.message == found.message and w.loc == found.loc for w in self.graph.warnings):
            self.graph.warnings.append(found)  # once per place, not per copy of a repeat


def readers_bounds(graph: Graph, name: str) -> list[tuple[str, object]]:
    """(reader, bound) for each slot where a node reads the node `name` as integers whose values
    it bounds, 0 .. bound - 1 (Op.value_range: an embed's vocabulary, a padding mask's 2)."""
    found = []
    for reader in dict.fromkeys(graph.readers(name)):
        node = graph.node(reader)
        for slot, source in enumerate(node.inputs):
            bound = node.op.value_range(node.params, slot, GraphContext(graph, node)) if source == name else None
            if bound is not None:
                found.append((reader, bound))
    return found


def rule_failure(node: NodeView, exc: RuleError) -> NodeFailed:
    # A rule that names no parameter is about the node's inputs: point at its `from`, if it has one.
    return NodeFailed(Diagnostic(exc.message, node.param_loc(exc.field or "from"), node.name,
                                 suggestion=exc.suggestion))


class ShapeInference(Interpreter):
    key = "type"

    def placeholder(self, node: NodeView) -> TensorType:
        return node.type  # inputs are typed when the IR is made

    def call(self, node: NodeView, inputs: list[TensorType]) -> TensorType:
        try:
            batch = common_batch(inputs)
            out = node.op.shape(node.params, inputs, GraphContext(self.graph, node))
        except RuleError as exc:
            raise rule_failure(node, with_lost_grid_hint(with_video_hint(exc, inputs), node, inputs)) from None
        check_reads(node, inputs)  # int64 ids into a float-only op (dtypes.py), after the op's own words
        record_and_check(node, inputs, self.graph, GraphContext(self.graph, node))  # index ranges (index_ranges.py)
        problem = beyond_float32(node.params)
        if problem is not None:  # after the op's own rules, whose words are more precise (an mlp's ratio)
            field, path, value, words = problem
            raise NodeFailed(Diagnostic(f"{path}: {value:g} is {words}", node.param_loc(field), node.name,
                                        hint="the model computes in float32: give a value within +-3.4e38, and "
                                             "0 or one of magnitude 1.4e-45 or more"))
        return batch_of_one(out, inputs) if node.op.moves_batch else with_batch(batch_of_one(out, inputs), batch)


FLOAT32_MAX = 3.4028234663852886e38


_CHECKED: dict[int, tuple] = {}  # id(params) -> (params, answer): params are frozen, and the size
# solver types one graph at hundreds of sizes; the params are held so that their id stays theirs
_CHECKED_MOST = 8192


def beyond_float32(params) -> tuple[str, str, float, str] | None:
    """The first float of a node's params that float32, in which the model computes, cannot hold:
    (top-level field, dotted path, value, why); None when all fit. A scale of 1e300 would be
    infinite there, a theta of 1e-300 zero: both make NaN outputs with no word. Answered once per
    params object."""
    if params is None or not hasattr(params, "model_dump"):
        return None
    known = _CHECKED.get(id(params))
    if known is not None and known[0] is params:
        return known[1]
    if len(_CHECKED) >= _CHECKED_MOST:
        _CHECKED.clear()
    answer = _first_beyond_float32(params)
    _CHECKED[id(params)] = (params, answer)
    return answer


def _first_beyond_float32(params) -> tuple[str, str, float, str] | None:
    for field, value in params.model_dump().items():
        for path, number in floats(value, field):
            if abs(number) > FLOAT32_MAX:
                return field, path, number, "beyond float32's range (about +-3.4e38): it would be infinite"
            if number != 0 and struct.unpack("f", struct.pack("f", number))[0] == 0:
                return field, path, number, "too small for float32: it would be 0"
    return None


def floats(value, path: str):
    """(dotted path, float) of every float inside a dumped value."""
    if isinstance(value, float):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from floats(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from floats(item, f"{path}.{index}")


def batch_of_one(out, inputs: list[TensorType]):
    """`out` with a batch of 1 where every input has a batch of 1 (a `param`, a `constant`, or
    what is made from them): the rules build their outputs with the batch B, and a conv of a
    constant is no more per-sample than the constant."""
    single = inputs and all(isinstance(t, TensorType) and t.shape and t.shape[0] == 1 for t in inputs)
    if single and isinstance(out, TensorType) and out.shape and out.shape[0] == BATCH:
        return replace(out, shape=(1,) + tuple(out.shape[1:]))  # [B, ...] -> [1, ...]
    return out


def with_video_hint(exc: RuleError, inputs: list) -> RuleError:
    """A rule's error about a video [B, T, C, H, W] it cannot take, with what to write where the
    rule says nothing: fold the frames into the batch."""
    if exc.suggestion.advice is None and any(isinstance(t, TensorType) and len(t.shape) == 5 for t in inputs):
        exc.suggestion = replace(exc.suggestion, advice=Note(
            "fold the frames into the batch first: a rearrange 'b t c h w -> (b t) c h w' with `as: image` "
            "gives one image per frame"))
    return exc


def with_lost_grid_hint(exc: RuleError, node: NodeView, inputs: list) -> RuleError:
    """A rule's error asking for a grid its token input has not, with the node upstream that
    gave tokens without the grid its own input had (a slice that kept 9 of 16 grid tokens):
    the error is at the reader, the mistake most often there. It takes the place of the rule's
    general advice (where grids come from), which it makes precise."""
    if "grid" not in exc.message:
        return exc
    if not any(isinstance(t, TensorType) and t.layout == "tokens" and not t.grid for t in inputs):
        return exc
    lost = where_grid_lost(node)
    if lost is not None:
        exc.suggestion = replace(exc.suggestion, advice=Note(lost))
    return exc


def where_grid_lost(node: NodeView) -> str | None:
    """Words naming the nearest node upstream of `node` whose output is tokens without a grid
    while one of its inputs is on a grid; None where there is none."""
    graph, seen, frontier = node.graph, set(), list(node.inputs)
    while frontier:
        name = frontier.pop(0)
        if name in seen or name not in graph:
            continue
        seen.add(name)
        out = graph.meta(name).get("type")
        if not (isinstance(out, TensorType) and out.layout == "tokens" and not out.grid):
            continue
        for source in graph.inputs_of(name):
            had = graph.meta(source).get("type")
            if isinstance(had, TensorType) and had.layout == "tokens" and had.grid:
                op = graph.node(name).op
                return (f"the grid was lost at `{name}` ({op.primitive}): it reads `{source}`, "
                        f"{had.layout_name()} ({had.describe()}), and gives {out.layout_name()} ({out.describe()})")
        frontier.extend(graph.inputs_of(name))
    return None


def common_batch(inputs: list):
    """The batch the inputs share: B, B*k where axes were folded into it (a rearrange's `(b t)`),
    or None where none has a batch (params, constants); RuleError where two differ (B and B*8:
    one of them folded and not unfolded)."""
    batches = []
    for t in inputs:
        if isinstance(t, TensorType) and t.shape and batch_factor(t.shape[0]) is not None \
                and t.shape[0] not in batches:
            batches.append(t.shape[0])
    if len(batches) > 1:
        raise RuleError(f"reads tensors of batch {batches[0]} and of batch {batches[1]}: their rows are not the "
                        "same samples", hint="unfold the folded one first (a rearrange like '(b t) n c -> b (t n) "
                                             "c' with sizes: {t: ...}) so that both have the batch B")
    return batches[0] if batches else None


def with_batch(out, batch):
    """`out` with the inputs' batch where it is folded (B*k): the rules build their outputs with
    the batch B, and per-frame work on `[B*T, ...]` gives `[B*T, ...]`."""
    if batch is None or batch == BATCH or not isinstance(out, TensorType) or not out.shape:
        return out
    if out.shape[0] == BATCH:
        return replace(out, shape=(batch,) + tuple(out.shape[1:]))  # [B, ...] -> [B*k, ...]
    return out


def infer(graph: Graph) -> Graph:
    ShapeInference(graph).run()
    graph.lint(inferred=True)
    return graph
