"""Values of a spec: its params (evaluated on first use, so their order does not matter;
cycles refused), the names an expression may see (loop indices and block parameters, then
params), and `${...}` evaluation with errors pointing into the expression."""

from __future__ import annotations

from typing import Any

from ..core.errors import Loc, SpecError, error
from .expressions import ExprError, has_expression, interpolate
from .loader import Document
from .overrides import COMMAND_LINE
from .param_types import value_problem


class Silent(Exception):
    """A problem already reported elsewhere (a failed param or node); stop quietly."""


POISON = object()  # the value of a param or node that failed: readers are skipped silently


class _Needs(Exception):
    """Raised by a lookup of a param not evaluated yet: evaluate that one first, then retry.

    Params are evaluated from an explicit stack, not by recursion, so a chain of params each
    defined from the next (`p0: ${p1 + 1}`, `p1: ${p2 + 1}`, ...) has no depth limit."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class Params:
    """The spec's params, evaluated on first use, cycles refused."""

    def __init__(self, raw: dict, doc: Document, types: dict | None = None):
        self.raw, self.doc = raw, doc
        self.types = types or {}  # param -> its declared ParamType (`param_types:`)
        self.values: dict[str, Any] = {}
        self.stack: list[str] = []  # params being evaluated, each waiting for the one after it
        self.on_stack: set[str] = set()
        self.names = list(raw)  # for hints: listed once, not once per unknown name

    def get(self, name: str) -> Any:
        if name in self.values:
            if self.values[name] is POISON:
                raise Silent()
            return self.values[name]
        if name not in self.raw:
            raise KeyError(name)
        if self.stack:  # inside another param's expression: evaluate this one first, from the stack
            raise _Needs(name)
        self._push(name)
        try:
            self._evaluate_stack()
        finally:
            self.stack.clear()
            self.on_stack.clear()
        return self.get(name)

    def _evaluate_stack(self) -> None:
        """Evaluate the param on top of the stack; one that needs another pushes it and waits.
        When one fails, those waiting for it fail too, silently (its error is reported once)."""
        try:
            while self.stack:
                name = self.stack[-1]
                try:
                    self.values[name] = evaluate_value(self.raw[name], ("params", name), Env(self), self.doc)
                except _Needs as need:
                    self._push(need.name)
                    continue
                if name in self.types:
                    self._check_type(name)
                self.on_stack.discard(self.stack.pop())
        except (SpecError, Silent):
            for waiting in self.stack:
                self.values.setdefault(waiting, POISON)
            raise

    def _check_type(self, name: str) -> None:
        """The value has the param's declared type and is one of its choices (param_types.py)."""
        problem = value_problem(name, self.values[name], self.types[name])
        if problem is not None:
            self.values[name] = POISON
            loc = self.doc.loc(("params", name))
            said = "--set " if loc is not None and loc.file == COMMAND_LINE else ""
            raise error(said + problem[0], loc, hint=problem[1])

    def _push(self, name: str) -> None:
        if name in self.on_stack:
            cycle = _chain(self.stack[self.stack.index(name):] + [name])
            raise error(f"param '{name}' depends on itself: {cycle}", self.doc.loc(("params", name)),
                        hint="give one of them a value that does not depend on the others")
        self.stack.append(name)
        self.on_stack.add(name)


def _chain(names: list[str], shown: int = 8) -> str:
    """'a -> b -> a', with the middle of a long chain left out."""
    if len(names) > shown:
        names = names[:shown // 2] + [f"... ({len(names) - shown} more)"] + names[-(shown // 2):]
    return " -> ".join(names)


class Env:
    """Names visible to an expression: loop indices and block parameters, then params."""

    def __init__(self, params: Params, frames: tuple[dict, ...] = ()):
        self.params, self.frames = params, frames

    def child(self, frame: dict) -> "Env":
        return Env(self.params, (frame,) + self.frames)

    def described(self) -> str:
        """The repeat indices and block arguments in force that are plain numbers, words or
        booleans, outermost first, as `i=3, kind='sliding'` (for an error's text)."""
        shown = {k: v for frame in reversed(self.frames) for k, v in frame.items()
                 if isinstance(v, (int, float, str, bool))}
        return ", ".join(f"{k}={v!r}" for k, v in list(shown.items())[:6])

    def lookup(self, name: str) -> Any:
        for frame in self.frames:
            if name in frame:
                return frame[name]
        return self.params.get(name)

    def names(self) -> list[str]:
        local = [n for f in self.frames for n in f]
        return local + self.params.names if local else self.params.names


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
        raise error(exc.message, loc, hint=unknown_name_hint(exc, path)) from None


def unknown_name_hint(exc: ExprError, path: tuple) -> str | None:
    """The expression's hint; for a name unknown inside a block, also why (the Q-Former trial
    read its caller's loop index `i` there): a block sees its own params and the spec's only."""
    if not (exc.message.startswith("unknown name") and path[:1] == ("blocks",)) or str(exc.hint).startswith("did you"):
        return exc.hint  # (a misspelt name of the block's own: the did-you-mean says it)
    name = exc.message.split("'")[1]
    why = (f"a block sees its own params and the spec's, not the loop indices or params of where it is used: "
           f"declare `{name}` in the block's params and pass it at each use (`{path[1]}: {{{name}: ${{{name}}}}}`)")
    return f"{exc.hint}; {why}" if exc.hint else why
