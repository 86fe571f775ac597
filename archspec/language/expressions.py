"""`${...}` expressions: a small evaluator over a whitelisted Python AST. Never `eval`.

Allowed: numbers, strings, booleans, lists; + - * / // % ** and unary minus; comparisons,
`and`/`or`/`not`, `a if c else b`; indexing and slicing; names (params, loop indices, block
parameters); the functions min, max, len, sum, abs, round, int, float, range, linspace; the math
functions log, exp, sqrt, ceil, floor, sign; and where(cond, a, b), which evaluates only the branch
it picks (so `where(x > 0, log(x), 0)` is fine at x = 0). A domain error (log of 0, sqrt of -1) or a
result too large is a located error, never a traceback, NaN or infinity.
Everything is bounded: no list longer than MAX_LIST, no integer beyond 2**63, no expression
nested deeper than MAX_EXPRESSION_DEPTH, and no more than MAX_WORK list items and characters
computed by all the expressions of one spec together (limits.py).
"""

from __future__ import annotations

import ast
import contextvars
import functools
import math
import re
import warnings
from contextlib import contextmanager
from typing import Any, Callable

from ..core.words import did_you_mean
from .hints import some, suggest
from .limits import MAX_EXPRESSION as MAX_TEXT, MAX_EXPRESSION_DEPTH, MAX_INT, MAX_LIST, MAX_WORK

_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")


def _zero_hint(node: ast.BinOp) -> str | None:
    """Which value was 0 in a division that failed (`heads` of `dim // heads`, set to 0)."""
    if isinstance(node.op, ast.Pow):
        return "0 to a negative power"
    if isinstance(node.right, ast.Constant):
        return None
    return f"`{ast.unparse(node.right)}` is 0 here"


class ExprError(Exception):
    """An expression problem; `offset` is the 0-based column within the value's text."""

    def __init__(self, message: str, offset: int = 0, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.hint = hint


# -- the work budget: what all the expressions of one spec may compute together ------------------

_budget: contextvars.ContextVar[list | None] = contextvars.ContextVar("archspec_expression_budget", default=None)


@contextmanager
def work_budget(limit: int = MAX_WORK):
    """Bound the list items and characters the expressions evaluated inside compute or consume in
    all (a node repeated 10,000 times that builds a 10,000-item list each time is refused, not slow)."""
    token = _budget.set([limit])
    try:
        yield
    finally:
        _budget.reset(token)


def _spend(amount: int, col: int) -> None:
    budget = _budget.get()
    if budget is None or amount <= 0:
        return
    budget[0] -= amount
    if budget[0] < 0:
        raise ExprError(f"the spec's expressions compute more than {MAX_WORK:,} values in all (archspec's limit)",
                        col, hint="compute big lists once, as params, and index them in the nodes")


def _spend_on(values, col: int) -> None:
    """Charge the budget for the lists and strings an operation consumes."""
    _spend(sum(len(v) for v in values if isinstance(v, (list, str))), col)


def has_expression(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "number", str: "string", list: "list"}.get(type(value), type(value).__name__)


def _linspace(start, stop, num):
    num = _as_int(num, "linspace's third argument")
    if num < 0 or num > MAX_LIST:
        raise ValueError(f"linspace of {num} points (allowed 0..{MAX_LIST})")
    if num == 1:
        return [float(start)]
    step = (stop - start) / (num - 1)
    return [start + step * i for i in range(num)]


def _range(*args):
    ints = [_as_int(a, "range's arguments") for a in args]
    result = range(*ints)
    if len(result) > MAX_LIST:
        raise ValueError(f"range of {len(result)} numbers (at most {MAX_LIST})")
    return list(result)


def _as_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be integers, got {_type_name(value)} {value!r}")
    return value


def _round(value, ndigits=None):
    if ndigits is not None and abs(_as_int(ndigits, "round's digits")) > 30:
        raise ValueError(f"{ndigits} digits (allowed -30..30)")
    return round(value) if ndigits is None else round(value, ndigits)


def _numbers(args, name):
    items = args[0] if len(args) == 1 and isinstance(args[0], list) else list(args)
    if not items:
        raise ValueError(f"{name}() of nothing")
    for item in items:
        if isinstance(item, (str, list)):
            raise ValueError(f"{name}() takes numbers, got {_type_name(item)}")
    return items


def _real(value, name: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}() takes a number, got {_type_name(value)} {value!r}")
    return value


def _log(value, base=None):
    value = _real(value, "log")
    if value <= 0:
        raise ValueError(f"log of {value!r} is undefined (it needs a number above 0)")
    if base is None:
        return math.log(value)
    base = _real(base, "log")
    if base <= 0 or base == 1:
        raise ValueError(f"log to base {base!r} is undefined (the base must be above 0 and not 1)")
    return math.log(value) / math.log(base)


def _exp(value):
    value = _real(value, "exp")
    try:
        return math.exp(value)
    except OverflowError:
        raise OverflowError(f"exp({value!r}) is too large") from None


def _sqrt(value):
    value = _real(value, "sqrt")
    if value < 0:
        raise ValueError(f"sqrt of {value!r} is undefined (it needs a number 0 or above)")
    return math.sqrt(value)


def _ceil(value):
    return math.ceil(_real(value, "ceil"))


def _floor(value):
    return math.floor(_real(value, "floor"))


def _sign(value):
    value = _real(value, "sign")
    one = (value > 0) - (value < 0)
    return float(one) if isinstance(value, float) else one


def _where(cond, a, b):  # the evaluator calls it lazily (see _Evaluator._Call); this is its eager form
    return a if cond else b


FUNCTIONS: dict[str, Callable] = {
    "min": lambda *a: min(_numbers(a, "min")),
    "max": lambda *a: max(_numbers(a, "max")),
    "sum": lambda xs: sum(_numbers([xs], "sum")) if xs != [] else 0,
    "len": lambda x: len(x),
    "abs": abs,
    "round": _round,
    "int": int,
    "float": float,
    "range": _range,
    "linspace": _linspace,
    "log": _log,
    "exp": _exp,
    "sqrt": _sqrt,
    "ceil": _ceil,
    "floor": _floor,
    "sign": _sign,
    "where": _where,
}

_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
}
_COMPARE = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}


def _check_value(value: Any, col: int) -> None:
    """One scalar: a bounded integer, a finite real number."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise ExprError("integer too large", col)
    if isinstance(value, float):
        if math.isnan(value):
            raise ExprError("result is not a number (NaN)", col)
        if math.isinf(value):
            raise ExprError("number too large (infinite)", col)
    if isinstance(value, complex):
        raise ExprError("result is not a real number", col)


def _check_size(value: Any, node: ast.AST) -> Any:
    """Refuse results that are huge, infinite or not real; lists count all their items, nested ones too
    (`[[0]*10000]*10000` is small in memory but would be huge once printed or compared)."""
    col = getattr(node, "col_offset", 0)
    if isinstance(value, str):
        if len(value) > MAX_LIST:
            raise ExprError(f"result has {len(value)} characters (at most {MAX_LIST})", col)
        _spend(len(value), col)
        return value
    if not isinstance(value, list):
        _check_value(value, col)
        return value
    count, stack = 0, [value]
    while stack:
        items = stack.pop()
        count += len(items)
        if count > MAX_LIST:
            raise ExprError(f"result has more than {MAX_LIST} items", col)
        for item in items:
            if isinstance(item, list):
                stack.append(item)
            elif isinstance(item, str):
                count += len(item)
            else:
                _check_value(item, col)
    if count > MAX_LIST:
        raise ExprError(f"result has more than {MAX_LIST} items", col)
    _spend(count, col)
    return value


_DISALLOWED = {
    "Attribute": "attribute access (a.b)",
    "Lambda": "lambda",
    "ListComp": "a comprehension",
    "SetComp": "a comprehension",
    "DictComp": "a comprehension",
    "GeneratorExp": "a generator",
    "Dict": "a mapping {...}",
    "Set": "a set {...}",
    "JoinedStr": "an f-string",
    "FormattedValue": "an f-string",
    "Starred": "* unpacking",
    "NamedExpr": "assignment (:=)",
    "Await": "await",
    "Yield": "yield",
    "YieldFrom": "yield",
}


class _Evaluator:
    def __init__(self, lookup: Callable[[str], Any], names: Callable[[], list[str]]):
        self.lookup = lookup
        self.names = names

    def eval(self, node: ast.AST) -> Any:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise self.disallowed(node)
        if isinstance(node, (ast.Name, ast.Expression)):
            return method(node)  # a value that exists already, or one checked below: walking it again is waste
        return _check_size(method(node), node)

    @staticmethod
    def disallowed(node: ast.AST) -> ExprError:
        kind = type(node).__name__
        what = _DISALLOWED.get(kind, kind)
        if isinstance(node, ast.Attribute):
            what = f"attribute access (.{node.attr})"
        return ExprError(f"{what} is not allowed in an expression", getattr(node, "col_offset", 0),
                         hint="expressions allow arithmetic, comparisons, indexing, a if c else b, "
                              f"and the functions {', '.join(FUNCTIONS)}")

    def _Expression(self, node):
        return self.eval(node.body)

    def _Constant(self, node):
        if not isinstance(node.value, (int, float, str, bool)) and node.value is not None:
            raise ExprError(f"constant {node.value!r} is not allowed", node.col_offset)
        return node.value

    def _Name(self, node):
        try:
            return self.lookup(node.id)
        except KeyError:
            known = self.names()
            hint = suggest(node.id, known)
            if hint is None and node.id in FUNCTIONS:
                hint = f"{node.id} is a function: call it, e.g. {node.id}(...)"
            if hint is None:
                hint = f"names here: {some(known)}" if known else "no params are defined"
            raise ExprError(f"unknown name '{node.id}'", node.col_offset, hint) from None

    def _List(self, node):
        return [self.eval(e) for e in node.elts]

    _Tuple = _List

    def _UnaryOp(self, node):
        if isinstance(node.op, ast.Invert):
            raise ExprError("the operator ~ is not allowed", node.col_offset)
        value = self.eval(node.operand)
        if isinstance(node.op, ast.Not):
            return not self._truth(value, node.operand)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ExprError(f"unary minus needs a number, got {_type_name(value)}", node.col_offset)
        return -value if isinstance(node.op, ast.USub) else +value

    def _BinOp(self, node):
        op = type(node.op)
        if op not in _BINARY:
            raise ExprError("this operator is not allowed", node.col_offset,
                            hint="operators: + - * / // % ** and comparisons")
        left, right = self.eval(node.left), self.eval(node.right)
        self._guard(op, left, right, node)
        _spend_on((left, right), node.col_offset)
        try:
            return _BINARY[op](left, right)
        except ZeroDivisionError:
            raise ExprError("division by zero", node.col_offset, hint=_zero_hint(node)) from None
        except OverflowError:
            raise ExprError("number too large", node.col_offset) from None
        except TypeError:
            raise ExprError(
                f"cannot apply {_SYMBOLS[op]} to {_type_name(left)} and {_type_name(right)}", node.col_offset
            ) from None

    def _guard(self, op, left, right, node):
        """Refuse results that would be huge before computing them."""
        if op is ast.Mod and isinstance(left, str):
            raise ExprError("% works on numbers; string formatting is not allowed", node.col_offset)
        if op is ast.Pow and isinstance(right, (int, float)) and isinstance(left, (int, float)):
            if abs(right) > 64 and abs(left) > 1:
                raise ExprError("exponent too large", node.col_offset)
        if op is ast.Mult:
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (list, str)) and isinstance(count, int) and len(seq) * max(count, 0) > MAX_LIST:
                    raise ExprError(f"result would have more than {MAX_LIST} items", node.col_offset)

    def _BoolOp(self, node):
        if isinstance(node.op, ast.And):
            value = True
            for child in node.values:
                value = self.eval(child)
                if not self._truth(value, child):
                    return value
            return value
        value = False
        for child in node.values:
            value = self.eval(child)
            if self._truth(value, child):
                return value
        return value

    def _Compare(self, node):
        left = self.eval(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            if type(op) not in _COMPARE:
                raise ExprError("`is` is not allowed; compare with == or !=", node.col_offset)
            right = self.eval(comparator)
            _spend_on((left, right), node.col_offset)
            try:
                ok = _COMPARE[type(op)](left, right)
            except TypeError:
                if isinstance(op, (ast.In, ast.NotIn)):
                    raise ExprError(f"`in` looks for a value in a list (or a text in a text), and its right side is "
                                    f"{_type_name(right)} {right!r}", node.col_offset) from None
                raise ExprError(f"cannot compare {_type_name(left)} with {_type_name(right)}", node.col_offset) from None
            if not ok:
                return False
            left = right
        return True

    def _IfExp(self, node):
        return self.eval(node.body) if self._truth(self.eval(node.test), node.test) else self.eval(node.orelse)

    def _truth(self, value, node) -> bool:
        """`value` as a condition; an ExprError for text that spells a boolean ('false', '0'),
        which as a condition is true like any text but '' (the SmolLM3 trial's `--set
        'sliding="false"'` built sliding attention without a word)."""
        if isinstance(value, str) and value.strip().lower() in BOOLEAN_TEXTS:
            raise ExprError(f"{value!r} is text, not a boolean, and as a condition any text but '' is true",
                            node.col_offset, hint="write true or false without quotes (`--set flag=false`)")
        return bool(value)

    def _Subscript(self, node):
        target = self.eval(node.value)
        if not isinstance(target, (list, str)):
            raise ExprError(f"cannot index a {_type_name(target)}", node.col_offset)
        if isinstance(node.slice, ast.Slice):
            parts = [None if p is None else self.eval(p) for p in (node.slice.lower, node.slice.upper, node.slice.step)]
            for p in parts:
                if p is not None and (isinstance(p, bool) or not isinstance(p, int)):
                    raise ExprError(f"slice bounds must be integers, got {_type_name(p)}", node.col_offset)
            if parts[2] == 0:
                raise ExprError("slice step cannot be zero", node.col_offset)
            return target[slice(*parts)]
        index = self.eval(node.slice)
        if isinstance(index, bool) or not isinstance(index, int):
            raise ExprError(f"index must be an integer, got {_type_name(index)} {index!r}", node.col_offset)
        if not -len(target) <= index < len(target):
            named = f"`{node.value.id}`" if isinstance(node.value, ast.Name) else "the list"
            raise ExprError(f"index {index} is out of range for a list of {len(target)}", node.col_offset,
                            hint=f"{named} has {len(target)} entries and this reads entry {index}: a list read by a "
                                 f"repeat's index needs one entry per copy (at least {index + 1})"
                            if index >= 0 else None)
        return target[index]

    def _Call(self, node):
        if not isinstance(node.func, ast.Name):
            if isinstance(node.func, (ast.Attribute, ast.Lambda)):
                raise self.disallowed(node.func)
            raise ExprError("only the named functions can be called", node.col_offset,
                            hint=f"functions: {', '.join(FUNCTIONS)}")
        if node.func.id not in FUNCTIONS:
            name = node.func.id
            raise ExprError(f"unknown function '{name}'", node.col_offset,
                            did_you_mean(name, FUNCTIONS) or f"functions: {', '.join(FUNCTIONS)}")
        if node.keywords:
            raise ExprError("keyword arguments are not allowed", node.col_offset)
        if node.func.id == "where":
            return self._where(node)
        args = [self.eval(a) for a in node.args]
        _spend_on(args, node.col_offset)
        try:
            return FUNCTIONS[node.func.id](*args)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ExprError(f"{node.func.id}(): {exc}", node.col_offset) from None

    def _where(self, node):
        """where(cond, a, b): `a` if cond holds, else `b`; only the branch picked is evaluated."""
        if len(node.args) != 3:
            raise ExprError(f"where() takes 3 arguments (cond, a, b), got {len(node.args)}", node.col_offset,
                            hint="where(x > 0, log(x), 0)")
        cond = self.eval(node.args[0])
        if isinstance(cond, list):
            raise ExprError("where()'s condition must be one value, got a list", node.args[0].col_offset)
        return self.eval(node.args[1] if cond else node.args[2])


@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> ast.Expression:
    """The AST of an expression (cached: a repeated block evaluates the same texts many times)."""
    with warnings.catch_warnings():  # e.g. SyntaxWarning for "\d": not the user's concern here
        warnings.simplefilter("ignore")
        tree = ast.parse(text, mode="eval")
    _check_depth(tree)
    return tree


def _check_depth(tree: ast.AST) -> None:
    """Refuse an expression nested deeper than MAX_EXPRESSION_DEPTH (the evaluator recurses
    once per level), measured without recursion."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            raise ExprError(f"expression nested deeper than {MAX_EXPRESSION_DEPTH} levels (archspec's limit)",
                            getattr(node, "col_offset", 0),
                            hint="split it into params: `a: ${...}`, then use ${a}")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))


BOOLEAN_TEXTS = {"true", "false", "yes", "no", "on", "off", "y", "n", "0", "1"}  # text a condition refuses


def evaluate(text: str, lookup: Callable[[str], Any], names: Callable[[], list[str]] = lambda: []) -> Any:
    """Evaluate one expression (the text between `${` and `}`)."""
    if len(text) > MAX_TEXT:
        raise ExprError(f"expression longer than {MAX_TEXT} characters")
    if not text.strip():
        raise ExprError("empty expression")
    try:
        tree = _parse(text.strip())
    except SyntaxError as exc:
        offset = (exc.offset - 1 if exc.offset else len(text.strip())) + (len(text) - len(text.lstrip()))
        raise ExprError(f"invalid expression: {exc.msg}", offset) from None
    except ValueError as exc:  # e.g. a NUL character
        raise ExprError(f"invalid expression: {exc}") from None
    except (RecursionError, MemoryError):
        raise ExprError("expression too deeply nested") from None
    try:
        return _Evaluator(lookup, names).eval(tree)
    except RecursionError:
        raise ExprError("expression too deeply nested") from None


def interpolate(value: str, lookup: Callable[[str], Any], names: Callable[[], list[str]] = lambda: []) -> Any:
    """A string holding `${...}`: the typed value if it is one whole expression, else a string.

    ExprError offsets are relative to the start of `value`.
    """
    whole = _PLACEHOLDER.fullmatch(value.strip())
    if whole:
        start = value.index("${") + 2
        return _shifted(whole.group(1), start, lookup, names)
    pieces, last = [], 0
    for match in _PLACEHOLDER.finditer(value):
        pieces.append(value[last : match.start()])
        pieces.append(str(_shifted(match.group(1), match.start() + 2, lookup, names)))
        last = match.end()
    if "${" in value[last:]:
        raise ExprError("'${' without a closing '}'", value.index("${", last))
    pieces.append(value[last:])
    return "".join(pieces)


def _shifted(text, start, lookup, names):
    try:
        return evaluate(text, lookup, names)
    except ExprError as exc:
        exc.offset += start
        raise
