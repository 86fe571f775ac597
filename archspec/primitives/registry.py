"""The registry of primitives and their kinds.

Built-in primitives are found by discovery: the modules under archspec/primitives/ops/ each
register their `Op` objects with `register` when imported. Which module registers which
primitive and kind is kept in op_index.py, generated from that discovery (`python -m
archspec.primitives.registry` rewrites it; tests/primitives/test_op_index.py checks it), so that
a question about one op imports that op's module alone: `archspec check` imports the rules of
the ops its spec uses, and the names of all of them cost nothing. Where the files under ops/
are not the ones the index was made from, every module is imported, as without an index.
Plugins register the same way when a spec requires them (plugins.py); each op remembers the
plugin it came from (`op.plugin`, None for the built-ins). Registering the same primitive kind
twice is an error, never a silent overwrite.
"""

from __future__ import annotations

import importlib
import sys

from ..core.discovery import import_modules, module_files
from .base import Op

OPS_PACKAGE = "archspec.primitives.ops"  # walked by name: the op files import this module
_OPS: dict[str, dict[str | None, Op]] = {}
_LOADED = False  # every built-in module imported
_INDEX: dict[str, dict[str | None, str]] | None = None  # primitive -> kind -> module, where op_index.py holds
_DEFAULTS: dict[str, str] = {}
_PRIMITIVES_LOADED: set[str] = set()  # built-in primitives whose every module is imported
_MODULE_OF: dict[tuple[str, str | None], str] = {}  # (primitive, kind) -> the module that registered it
_REGISTERING_FOR: list[str] = []  # the plugin whose module is being imported, if any


class RegistryError(Exception):
    """Two ops claim the same primitive and kind, or a primitive mixes kinds and no kind:
    a bug in archspec or in a plugin, found when it registers."""


def register(op: Op) -> Op:
    """Record `op` (an Op, or a part of one: `op.primitive` a dotted family, `op.kind` its name)."""
    if _REGISTERING_FOR:  # a plugin's kind of a built-in primitive is checked against all the built-in kinds
        load_primitive(op.primitive)
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
    _MODULE_OF[op.primitive, op.kind] = _registering_module()
    return op


def _registering_module() -> str:
    """The module under ops/ whose import is registering (a family's table may call register
    from a helper elsewhere); the caller's module where none is."""
    frame = sys._getframe(2)
    caller = frame.f_globals.get("__name__", "")
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith(OPS_PACKAGE + "."):
            return name
        frame = frame.f_back
    return caller


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
    import_modules(OPS_PACKAGE)


def _index() -> dict[str, dict[str | None, str]]:
    """primitive -> kind -> the module registering it (built-ins only); {} after load_builtins
    when op_index.py does not describe the files under ops/ (then every module is imported)."""
    global _INDEX
    if _INDEX is None:
        from . import op_index

        if tuple(module_files(OPS_PACKAGE)) == op_index.MODULES:
            _INDEX = op_index.OPS
            _DEFAULTS.update(op_index.DEFAULTS)
        else:
            _INDEX = {}
            load_builtins()
    return _INDEX


def load_primitive(primitive: str) -> None:
    """Import the modules that register the built-in kinds of `primitive` (none for a name that
    is no built-in primitive)."""
    if primitive in _PRIMITIVES_LOADED or _LOADED:
        return
    modules = _index().get(primitive)
    if modules is None:
        return
    _PRIMITIVES_LOADED.add(primitive)
    for module in dict.fromkeys(modules.values()):
        importlib.import_module(f"{OPS_PACKAGE}.{module}")


def _kinds_of(primitive: str) -> dict[str | None, object]:
    """The kinds of `primitive`, built-in and registered (values unused). KeyError for no primitive."""
    found = {**_index().get(primitive, {}), **_OPS.get(primitive, {})}
    if not found:
        raise KeyError(primitive)
    return found


def is_part_family(name: str) -> bool:
    """Whether `name` registers parts of a primitive (`attention.scores`), not a primitive."""
    return "." in name


def primitives() -> list[str]:
    """The primitives a node can name (not the part families), in name order (not the import
    order, which depends on what was imported first)."""
    return sorted(p for p in set(_index()) | set(_OPS) if not is_part_family(p))


def has_kinds(primitive: str) -> bool:
    return None not in _kinds_of(primitive)


def kinds(primitive: str) -> list[str]:
    return sorted(k for k in _kinds_of(primitive) if k is not None)


def default_kind(primitive: str) -> str | None:
    """The kind a node of `primitive` gets when it names none (None: it must name one)."""
    _kinds_of(primitive)
    if primitive in _DEFAULTS:
        return _DEFAULTS[primitive]
    return next((k for k, o in _OPS.get(primitive, {}).items() if o.default and k is not None), None)


def op(primitive: str, kind: str | None = None) -> Op:
    """The op of a primitive (and kind). KeyError when there is none."""
    found = _OPS.get(primitive, {}).get(kind)
    if found is not None:
        return found
    module = _index().get(primitive, {}).get(kind)
    if module is not None:
        importlib.import_module(f"{OPS_PACKAGE}.{module}")
    return _OPS[primitive][kind]


def ops() -> list[Op]:
    """Every registered op, primitive by primitive and kind by kind, in name order (not the parts)."""
    return [o for o in _entries() if not is_part_family(o.primitive)]


def parts(family: str) -> dict[str, object]:
    """The parts registered under `family` (`attention.scores`), by name in name order: the
    built-in ones (their files imported once) and those plugins registered."""
    load_primitive(family)
    return dict(sorted(_OPS.get(family, {}).items()))


def part(family: str, name: str):
    """The part of `family` called `name` (importing the file that registers it alone), or None."""
    try:
        return op(family, name)
    except KeyError:
        return None


def _entries() -> list:
    """Every registered op and part, in name order."""
    load_builtins()
    return [_OPS[p][k] for p in sorted(_OPS) for k in sorted(_OPS[p], key=lambda k: k or "")]


def index_source() -> str:
    """The text of op_index.py for the modules under ops/ as they are now."""
    load_builtins()
    modules = tuple(module_files(OPS_PACKAGE))
    found: dict[str, dict[str | None, str]] = {}
    defaults = {}
    prefix = OPS_PACKAGE + "."
    for o in _entries():
        module = _MODULE_OF[o.primitive, o.kind]
        if o.plugin is not None or not module.startswith(prefix):
            continue
        found.setdefault(o.primitive, {})[o.kind] = module.removeprefix(prefix)
        if o.default and o.kind is not None:
            defaults[o.primitive] = o.kind
    lines = ['"""Which module under archspec/primitives/ops/ registers each built-in primitive and kind,',
             "generated from discovery by `python -m archspec.primitives.registry` (do not edit; registry.py",
             'reads it, tests/primitives/test_op_index.py checks it)."""', "",
             "MODULES = (  # the files it was made from: where they differ, registry.py imports them all"]
    lines += [f"    {m!r}," for m in modules]
    lines += [")", "", "OPS = {  # primitive (or a dotted family of parts) -> kind or part (None: no kinds) -> module"]
    lines += [f"    {p!r}: {{{', '.join(f'{k!r}: {m!r}' for k, m in kinds.items())}}}," for p, kinds in found.items()]
    lines += ["}", "", "DEFAULTS = {  # primitive -> the kind a node gets when it names none"]
    lines += [f"    {p!r}: {k!r}," for p, k in defaults.items()]
    lines += ["}", ""]
    return "\n".join(lines)


if __name__ == "__main__":  # rewrite op_index.py (the ops register with the imported registry, not this copy)
    import os

    from archspec.primitives.registry import index_source as _source

    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "op_index.py"), "w", encoding="utf-8") as out:
        out.write(_source())
