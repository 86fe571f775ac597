"""Per-op fact tables: what a pass, a backend or the model interface must know about an op,
registered against the `Op` object from the file that knows it (TVM's
`TVM_REGISTER_OP(...).set_attr<...>(attribute, value)` is the model).

    TOKEN_GRID = Fact("TOKEN_GRID", "how the op maps its input's token grid", where="compiler/modules/<op>.py")
    TOKEN_GRID.register(PATCHIFY, patch_grid)      # from the op's own file
    TOKEN_GRID.of(node.op, node)                   # where it is used: a missing fact is an error

A fact is declared on the lowest floor whose files must fill it (a backend's facts on the torch
floor, where each op's torch file registers them). Registering a fact twice for one op is an
error, never a silent overwrite; looking up a fact nobody registered fails naming the op, the
fact and where to register it, never a silent default.

A family of ops whose kinds share one answer (every attention kind reads floats) may register it
once against the kinds' base class (`READS.register_family(AttentionOp, FLOAT_FIRST)`): a kind
added later answers through its class, and a value registered for the op itself wins.
"""

from __future__ import annotations

from typing import Any, Callable

from ..core.errors import bug
from .base import Op
from .registry import RegistryError

_MISSING = object()


class Fact:
    """One fact about ops: `name` (the name it is declared under) and `doc` say what it is,
    `where` where an op registers it;
    `load`, if given, runs before every lookup with the op (to import the files that register
    the fact, e.g. the torch side of the ops)."""

    def __init__(self, name: str, doc: str, where: str, load: Callable[[Op], None] | None = None):
        self.name, self.doc, self.where, self._load = name, doc, where, load
        self._values: dict[Op, Any] = {}
        self._families: dict[type, Any] = {}

    def __repr__(self) -> str:
        return f"<fact {self.name}>"

    def register(self, op: Op, value):
        """Record the fact's value for `op`; a second registration for the same op is an error."""
        if op in self._values:
            raise RegistryError(f"the {self.name} of {op.label} is registered twice")
        self._values[op] = value
        return value

    def register_family(self, base: type, value):
        """Record the fact's value for every op that is an instance of `base` (a family's base
        class) and has no value of its own; a second registration for one base is an error."""
        if base in self._families:
            raise RegistryError(f"the {self.name} of the family {base.__name__} is registered twice")
        self._families[base] = value
        return value

    def of(self, op: Op, node=None):
        """The fact's value for `op`. An InternalError naming the op, the fact and where to
        register it when nobody did, located at `node` (an IR node) when one is given."""
        value = self.get(op, _MISSING)
        if value is _MISSING:
            raise bug(f"{op.label} has no {self.name} registered", getattr(node, "loc", None),
                      getattr(node, "name", None),
                      hint=f"{self.name}: {self.doc}; register it with {self.name}.register(op, value) in {self.where}")
        return value

    def get(self, op: Op, default=None):
        """The fact's value for `op`, or `default` when nobody registered one (only where its
        absence means something)."""
        if self._load is not None:
            self._load(op)
        if op in self._values:
            return self._values[op]
        for base in type(op).__mro__:
            if base in self._families:
                return self._families[base]
        return default

    def registered(self) -> dict[Op, Any]:
        """Every op with this fact, and its value (for tests)."""
        return dict(self._values)
