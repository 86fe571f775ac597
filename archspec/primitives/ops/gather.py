"""gather: the tokens (or the values of a [B, N] tensor) at the positions an index gives, per
sample: MAE's kept tokens (`gather(x, 1, ids_shuffle[:, :len_keep])`) and its decoder's
unshuffle (`gather(x, 1, ids_restore)`). The gathered tokens lose their grid; prefix (class)
tokens are refused unless `skip_prefix` keeps them in front, with the index counting the
tokens after them."""

from __future__ import annotations

from dataclasses import replace

from ...core.declared import Field
from ...core.types import Sym, TensorType, batch_factor, summed, tokens
from ..base import Cost, Op, Params, PositiveInt, RuleError
from ..registry import register
from ..index_ranges import VALUES, keeps
from ..dtypes import READS, ANY
from ..decoding import Mixes, register_decoding


class GatherParams(Params):
    count: PositiveInt | None = Field(None, description="use only the first `count` indices (MAE's len_keep); "
                                                        "default: all of them")
    skip_prefix: bool = Field(False, description="keep the prefix (class) tokens in front; the index counts the "
                                                 "tokens after them")


def check_index(index: TensorType) -> None:
    """An index is int64 [B, M] (token ids, e.g. an argsort)."""
    if index.dtype != "int64" or len(index.shape) != 2:
        hint = ("an argsort of it gives one, or `cast: {dtype: int64}` of floats that hold whole numbers (a "
                "`constant` with `fill: index`)" if index.dtype != "int64" and len(index.shape) == 2 else None)
        raise RuleError(f"the index must be int64 [B, M] (e.g. an argsort), got {index.layout_name()} "
                        f"{index.describe()} of {index.dtype}", field="from", hint=hint)


def check_sequence(x: TensorType, op: str, role: str, skip_prefix: bool | None) -> None:
    """`x` is tokens (or a tensor) [B, N, C] or a [B, N] tensor of this batch, with a prefix only
    if skipped (`skip_prefix` None: the role cannot skip one)."""
    if not (x.layout == "tokens" or len(x.shape) == 2 or (x.layout == "tensor" and len(x.shape) == 3)):
        raise RuleError(f"{op} reads tokens [B, N, C] or a [B, N] tensor as {role}, got {x.layout_name()}",
                        field="from")
    if batch_factor(x.shape[0]) is None:
        raise RuleError(f"{op} reads one sequence per sample as {role}; {x.describe()} has batch 1", field="from")
    if x.layout != "tokens" and skip_prefix:
        raise RuleError(f"skip_prefix is for tokens; {role} is {x.layout_name()}", field="skip_prefix")
    if x.prefix and not skip_prefix:
        drop = f"drop them first (slice: {{start: {x.prefix}}})"
        raise RuleError(f"{role} ({x.describe()}) has {x.prefix} prefix (class) token(s), which the index "
                        "would count", field="from" if skip_prefix is None else "skip_prefix",
                        hint=drop if skip_prefix is None else f"`skip_prefix: true` keeps them in front and indexes "
                                                              f"the others; or {drop}")


def plus(prefix: int, length):
    """prefix + length, where the length may be symbolic (an argsort of a [B, L] input)."""
    return summed([prefix, length])


def shortest(n) -> int:
    return n.lo if isinstance(n, Sym) else n


class GatherOp(Op):
    """x[b, index[b, :count]] along the sequence: [B, N, C] -> [B, M, C] (no grid), [B, N] -> [B, M].

    Tokens lose their grid; a tensor keeps its layout and dtype."""

    primitive = "gather"
    Params = GatherParams

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "index")

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x, index = inputs
        check_sequence(x, "gather", "x", p.skip_prefix)
        check_index(index)
        taken = index.length if p.count is None else p.count
        if p.count is not None and p.count > shortest(index.length):
            raise RuleError(f"count {p.count} is more than the {index.length} indices", field="count",
                            hint=f"at most {shortest(index.length)}")
        if x.layout == "tokens":
            return tokens(plus(x.prefix, taken), x.channels, prefix=x.prefix)  # [B, P + M, C], no grid
        return replace(x, shape=(x.shape[0], taken) + tuple(x.shape[2:]))  # [B, N(, C)] -> [B, M(, C)]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)

    def value_range(self, p, slot: int, ctx) -> int | None:
        if slot != 1:
            return None
        x = ctx.node_named(ctx.node.inputs[0]).type
        return shortest(x.length) - x.prefix  # positions after the prefix


GATHER = register(GatherOp())
VALUES.register(GATHER, keeps)
READS.register(GATHER, ANY)
register_decoding(GATHER, Mixes("gather reads values at other tokens"))
