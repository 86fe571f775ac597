"""mod: a score modification written in the spec as a small graph of element-wise steps over the
score and its indices: FlexAttention's `score_mod(score, b, h, q_idx, kv_idx)` in YAML.

    scores:
      - mod:
          tensors: [head_bias]            # read from the node's `from:` after the token stream
          steps:
            - {t: {divide: [score, 30.0]}}
            - {squashed: {tanh: t}}
            - {capped: {multiply: [squashed, 30.0]}}
            - {bias: {at: [head_bias, h]}}          # head_bias [heads], at this score's head
            - {out: {add: [capped, bias]}}

Each step is `{name: {op: [arguments]}}` (a one-argument op may take the argument alone), one
whitelisted op per step; an argument is a number, `score` (the scaled score q·k^T), `b`, `h`,
`q`, `k` (the batch, head, query and key indices: integers), a tensor named in `tensors`, or an
earlier step. The last step is the new score. Never evaluated as code: the steps are parsed
and checked here (each error names the step), and lowering maps each op to one torch function.
While generate() decodes, `q` and `k` are the tokens' positions (as in the forward of the row
alone). The mask of the kind is added after the steps, as after the other parts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .....core.declared import Field
from ....base import Params, RuleError
from .....core.suggestions import Remedy
from ....registry import register
from ....decoding import Mixes
from .base import DECODES, ScorePart, ScoreSite, register_score_decoding

INDICES = ("b", "h", "q", "k")  # FlexAttention's b, h, q_idx, kv_idx
SCORE = "score"

# op -> (number of arguments, the kinds each takes, the kind it gives): "num" is an integer or a
# float; "same" gives the kind of the first argument (integer if every number argument is one);
# "at" indexes a tensor by integer indices (one per dim of the tensor).
OPS: dict[str, tuple[int | None, str, str]] = {
    "add": (2, "num", "same"), "subtract": (2, "num", "same"), "multiply": (2, "num", "same"),
    "divide": (2, "num", "float"), "floor_divide": (2, "num", "same"), "remainder": (2, "num", "same"),
    "tanh": (1, "num", "float"), "exp": (1, "num", "float"),
    "log": (1, "num", "float"), "abs": (1, "num", "same"), "clamp": (3, "num", "same"),
    "less": (2, "num", "bool"), "less_equal": (2, "num", "bool"), "greater": (2, "num", "bool"),
    "greater_equal": (2, "num", "bool"), "equal": (2, "num", "bool"), "not_equal": (2, "num", "bool"),
    "and": (2, "bool", "bool"), "or": (2, "bool", "bool"), "not": (1, "bool", "bool"),
    "where": (3, "where", "same"), "at": (None, "at", "float"),
    "maximum": (2, "num", "same"), "minimum": (2, "num", "same"),
}


class ModParams(Params):
    tensors: list[str] = Field(default_factory=list,
                               description="names of the tensors the steps read, given in the node's `from:` "
                                           "after the token stream (and the score bias), in this order")
    steps: list[dict[str, Any]] = Field(min_length=1,
                                        description="the steps, in order, each {name: {op: [arguments]}}; the "
                                                    "last is the new score (ops: " + ", ".join(OPS) + ")")


@dataclass(frozen=True)
class Step:
    name: str
    op: str
    args: tuple  # names (str) and numbers
    kind: str  # "int", "float" or "bool"


def parse_steps(p, site: ScoreSite | None = None) -> list[Step]:
    """The steps of a `mod` part, checked: RuleError (field `scores`) naming the step for an
    unknown op or name, a wrong number or kind of arguments, or a last step that is no score.
    With the site, a tensor indexed by `at` must have one index per dim."""
    kinds: dict[str, str] = {SCORE: "float", **{i: "int" for i in INDICES}}
    ranks: dict[str, tuple | None] = {}
    for i, name in enumerate(p.tensors):
        where = f"score part 'mod': tensor {name!r}"
        if name in kinds or not name.isidentifier():
            raise RuleError(f"{where}: a tensor's name must be an identifier other than "
                            f"{', '.join((SCORE,) + INDICES)}", field=f"tensors.{i}")
        kinds[name] = "tensor"
        ranks[name] = site.tensors[i].shape if site is not None and i < len(site.tensors) else None
    limits = {"h": site.heads, "q": site.queries, "k": site.keys} if site is not None else {}
    bounds = {i: (0, most - 1) for i, most in limits.items() if isinstance(most, int)}  # the integers' ranges
    steps = []
    for n, entry in enumerate(p.steps, start=1):
        steps.append(parse_step(n, entry, kinds, ranks, limits, bounds))
        kinds[steps[-1].name] = steps[-1].kind
        if steps[-1].kind == "int":
            bounds[steps[-1].name] = int_range(steps[-1], bounds)
    if steps[-1].kind == "bool":
        raise RuleError(f"score part 'mod': the last step {steps[-1].name!r} is the new score, and "
                        f"{steps[-1].op} gives true or false", field=f"steps.{len(steps) - 1}",
                        hint=Remedy("end with a number: e.g. {out: {where: [mask, score, -1.0e9]}}"))
    return steps


def parse_step(n: int, entry: dict, kinds: dict[str, str], ranks: dict[str, tuple | None],
               limits: dict[str, int] | None = None, bounds: dict | None = None) -> Step:
    """One step, checked (RuleError located at the step); `limits`: the most heads, queries and
    keys, which an index `at` reads directly must have room for; `bounds`: the (least, most) of
    each integer known so far, which an index `at` reads must stay within."""
    where, at = f"score part 'mod': step {n}", f"steps.{n - 1}"
    if len(entry) != 1:
        raise RuleError(f"{where} must be one {{name: {{op: [arguments]}}}}, got {entry!r}", field=at)
    (name, body), = entry.items()
    where += f" {name!r}"
    if not isinstance(name, str) or not name.isidentifier() or name in kinds:
        taken = "is an index, the score, a tensor or an earlier step" if name in kinds else "is no identifier"
        raise RuleError(f"{where}: the name {taken}", field=at,
                        hint=Remedy("give each step a new name (the last step's is free: e.g. out)"))
    if not isinstance(body, dict) or len(body) != 1:
        raise RuleError(f"{where} must be {{op: [arguments]}} with one op, got {body!r}", field=at,
                        hint=Remedy(f"the ops are: {', '.join(OPS)}"))
    (op, args), = body.items()
    if op not in OPS:
        raise RuleError(f"{where}: unknown op {op!r}", field=at, hint=Remedy(f"the ops are: {', '.join(OPS)}"))
    args = tuple(args) if isinstance(args, list) else (args,)
    count, takes, gives = OPS[op]
    if count is not None and len(args) != count:
        raise RuleError(f"{where}: {op} takes {count} argument(s), got {len(args)}", field=at)
    found = [argument_kind(where, a, kinds, at) for a in args]
    if op in ("divide", "floor_divide", "remainder") and isinstance(args[1], (int, float)) and args[1] == 0:
        raise RuleError(f"{where}: {op} by 0", field=at)
    if takes == "at":
        return Step(name, op, args, check_at(where, args, found, ranks, at, limits or {}, bounds or {}))
    wanted = ["bool", "num", "num"] if takes == "where" else [takes] * len(args)
    for a, got, want in zip(args, found, wanted):
        if (want == "num") != (got in ("int", "float")) or got == "tensor":
            raise RuleError(f"{where}: {op} takes {'true/false' if want == 'bool' else 'a number'} for {a!r}, "
                            f"which is {describe(got)}", field=at,
                            hint=Remedy("index a tensor with at: [tensor, h] first") if got == "tensor" else None)
    numbers = found[1:] if takes == "where" else found
    if gives == "same":
        gives = "int" if all(k == "int" for k in numbers) else "float"
    return Step(name, op, args, gives)


def argument_kind(where: str, a, kinds: dict[str, str], at: str = "scores") -> str:
    if isinstance(a, bool):
        raise RuleError(f"{where}: {str(a).lower()} is no number (write a comparison for true/false)", field=at)
    if isinstance(a, int):
        return "int"
    if isinstance(a, float):
        return "float"
    if isinstance(a, str) and a in kinds:
        return kinds[a]
    raise RuleError(f"{where}: unknown name {a!r}", field=at,
                    hint=Remedy(f"the names are: {', '.join(kinds)}, and numbers"))


def check_at(where: str, args: tuple, found: list[str], ranks: dict[str, tuple | None], at: str = "scores",
             limits: dict[str, int] | None = None, bounds: dict | None = None) -> str:
    """`at: [tensor, i, ...]` indexes the tensor's dims after its leading 1s, one index each (a
    param [heads] is [1, heads], indexed by one: h); a dim indexed by h, q or k itself must have
    room for every head, query or key (`limits`), else a run would index past its end."""
    if not args or found[0] != "tensor":
        raise RuleError(f"{where}: at takes a tensor first, then one integer index per dim", field=at)
    shape = ranks.get(args[0])
    if any(k != "int" for k in found[1:]):
        raise RuleError(f"{where}: at indexes {args[0]!r} with integers (b, h, q, k or steps of them), got "
                        + ", ".join(f"{a!r} ({describe(k)})" for a, k in zip(args[1:], found[1:])), field=at)
    indexed, lead = len(args) - 1, 0
    while shape is not None and lead < len(shape) - 1 and shape[lead] == 1:
        lead += 1  # a param [heads] is [1, heads]: its leading 1s are not indexed
    if shape is not None and indexed != len(shape) - lead:
        raise RuleError(f"{where}: {args[0]!r} is [{', '.join(map(str, shape))}], indexed by {indexed}: at takes "
                        f"one index for each of its dims after the leading 1s ({len(shape) - lead})", field=at)
    for index, size in zip(args[1:], shape[lead:] if shape is not None else ()):
        most = (limits or {}).get(index)
        if most is not None and isinstance(size, int) and size < most:
            what = {"h": "heads", "q": "queries", "k": "keys"}[index]
            raise RuleError(f"{where}: {args[0]!r} has {size} rows along the dim {index} indexes, and this attention "
                            f"has up to {most} {what}", field=at,
                            hint=Remedy(f"make the table at least {most} long (or index it with a step that stays "
                                        f"below {size})"))
        check_index_range(where, args[0], index, (bounds or {}).get(index), size, at)
    return "float"


def check_index_range(where: str, table: str, index, known: tuple | None, size, at: str) -> None:
    """An index computed from h, q, k and numbers stays within the table's dim: a negative one
    would count from its end (another model, without a word), one past it fails at run time."""
    if known is None or not isinstance(size, int):
        return
    lo, hi = known
    if lo < 0:
        raise RuleError(f"{where}: the index {index!r} into {table!r} goes down to {lo}: a negative index would "
                        "read the table from its end, another model", field=at,
                        hint=Remedy(f"add an offset of at least {-lo} (e.g. q - k + (keys - 1) for a relative "
                                    "distance), or clamp it"))
    if hi >= size:
        raise RuleError(f"{where}: the index {index!r} into {table!r} reaches {hi}, and that dim has {size} rows",
                        field=at, hint=Remedy(f"make the table at least {hi + 1} long, or clamp the index"))


def int_range(step: Step, bounds: dict) -> tuple[int, int] | None:
    """(least, most) of an integer step over every head, query and key (b's and others' unknown:
    None), by interval arithmetic over its op."""
    values = [(a, a) if isinstance(a, int) and not isinstance(a, bool) else bounds.get(a) for a in step.args]
    if any(v is None for v in values[1:] if step.op != "where") or (step.op != "where" and values[0] is None):
        return None
    if step.op in ("add", "subtract", "multiply", "maximum", "minimum"):
        (a, b), (c, d) = values
        if step.op == "add":
            return a + c, b + d
        if step.op == "subtract":
            return a - d, b - c
        if step.op == "maximum":
            return max(a, c), max(b, d)
        if step.op == "minimum":
            return min(a, c), min(b, d)
        products = (a * c, a * d, b * c, b * d)
        return min(products), max(products)
    if step.op == "abs":
        (a, b), = values
        return (0 if a <= 0 <= b else min(abs(a), abs(b))), max(abs(a), abs(b))
    if step.op == "clamp":
        (a, b), (lo, _), (hi, _) = values
        return min(max(a, lo), hi), min(max(b, lo), hi)
    if step.op in ("floor_divide", "remainder") and values[1][0] == values[1][1] and values[1][0] > 0:
        (a, b), (c, _) = values
        return (a // c, b // c) if step.op == "floor_divide" else (0, c - 1)
    if step.op == "where" and values[1] is not None and values[2] is not None:
        return min(values[1][0], values[2][0]), max(values[1][1], values[2][1])
    return None


def describe(kind: str) -> str:
    return {"int": "an integer", "float": "a number", "bool": "true/false", "tensor": "a tensor"}[kind]


class ModPart(ScorePart):
    """A small graph of element-wise steps over the score, its indices b, h, q, k and named
    tensors (FlexAttention's score_mod), before the softmax. Written out; fused by flex_attention
    under torch.compile."""

    name = "mod"
    Params = ModParams
    changes_scores = True
    explicit = True

    def check(self, p, site: ScoreSite) -> None:
        if len(site.tensors) != len(p.tensors):
            raise RuleError(f"score part 'mod' reads {len(p.tensors)} tensor(s) ({', '.join(p.tensors) or 'none'}), "
                            f"and this attention gives it {len(site.tensors)}", field="scores",
                            hint=Remedy("name them in the node's `from:` after the token stream (and the score bias)"))
        for name, t in zip(p.tensors, site.tensors):
            if t.dtype != "float32":
                raise RuleError(f"score part 'mod': tensor {name!r} must be float, got {t.describe()}", field="scores",
                                hint=Remedy(f"cast it first: a node `{{from: {name}, cast: {{dtype: float32}}}}`, "
                                            "named in `tensors` and `from` in its place (a step compares it with a "
                                            "number as before)"))
        parse_steps(p, site)


def read_at_a_position(p) -> str | None:
    """The first tensor a step reads at an index made from q or k (a row per token or per key),
    or None: while decoding, a step's tensors hold the new token's row alone, so such a read
    fails (the Doge trial's per-key bias: an IndexError, or an abort under compile)."""
    from_position = {"q", "k"}
    for step in parse_steps(p):
        names = {arg for arg in step.args if isinstance(arg, str)}
        if step.op == "at" and step.args[0] in p.tensors and names & from_position - {step.args[0]}:
            return step.args[0]
        if names & from_position:
            from_position.add(step.name)
    return None


def mod_decoding(p):
    """Element-wise steps decode over the cache (q and k are positions there), unless they read a
    tensor at a position."""
    tensor = read_at_a_position(p)
    if tensor is None:
        return DECODES
    return Mixes(f"it reads tensor {tensor!r} at a query's or key's place, and while decoding the tensors hold the "
                 "new token's row alone (the cache keeps keys and values only)")


MOD = register(ModPart())
register_score_decoding(MOD, mod_decoding)
