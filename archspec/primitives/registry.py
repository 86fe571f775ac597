"""The registry of primitives and their kinds.

Built-in primitives are found by discovery: every module under archspec/primitives/ops/ is
imported once, and each registers its `Op` objects with `register`. There is no list of
them anywhere else. Plugins register the same way when a spec requires them (plugins.py);
each op remembers the plugin it came from (`op.plugin`, None for the built-ins). Registering
the same primitive kind twice is an error, never a silent overwrite.
"""

from __future__ import annotations

from ..core.discovery import import_modules
from .base import Op

_OPS: dict[str, dict[str | None, Op]] = {}
_LOADED = False
_REGISTERING_FOR: list[str] = []  # the plugin whose module is being imported, if any


class RegistryError(Exception):
    """Two ops claim the same primitive and kind, or a primitive mixes kinds and no kind:
    a bug in archspec or in a plugin, found when it registers."""


def register(op: Op) -> Op:
    kinds = _OPS.setdefault(op.primitive, {})
    if op.kind in kinds:
        raise RegistryError(f"{op.label} is registered twice ({type(kinds[op.kind]).__module__} and "
                            f"{type(op).__module__})")
    if kinds and (op.kind is None) != (next(iter(kinds)) is None):
        raise RegistryError(f"{op.primitive}: a primitive has kinds or has none; {op.label} does not fit")
    if op.default and any(o.default for o in kinds.values()):
        raise RegistryError(f"{op.primitive} has two default kinds")
    op.plugin = _REGISTERING_FOR[-1] if _REGISTERING_FOR else None
    kinds[op.kind] = op
    return op


class registering_for:
    """While a plugin's module is imported, the ops it registers are marked as its own."""

    def __init__(self, plugin: str):
        self.plugin = plugin

    def __enter__(self):
        _REGISTERING_FOR.append(self.plugin)

    def __exit__(self, *exc):
        _REGISTERING_FOR.pop()


def load_builtins() -> None:
    """Import every module under archspec.primitives.ops (each registers its ops)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from . import ops

    import_modules(ops)


def primitives() -> list[str]:
    load_builtins()
    return sorted(_OPS)  # not the import order, which depends on what was imported first


def has_kinds(primitive: str) -> bool:
    load_builtins()
    return None not in _OPS[primitive]


def kinds(primitive: str) -> list[str]:
    load_builtins()
    return sorted(k for k in _OPS[primitive] if k is not None)


def default_kind(primitive: str) -> str | None:
    """The kind a node of `primitive` gets when it names none (None: it must name one)."""
    load_builtins()
    return next((k for k, o in _OPS[primitive].items() if o.default and k is not None), None)


def op(primitive: str, kind: str | None = None) -> Op:
    """The op of a primitive (and kind). KeyError when there is none."""
    load_builtins()
    return _OPS[primitive][kind]


def ops() -> list[Op]:
    """Every registered op, primitive by primitive and kind by kind, in name order."""
    load_builtins()
    return [_OPS[p][k] for p in sorted(_OPS) for k in sorted(_OPS[p], key=lambda k: k or "")]
