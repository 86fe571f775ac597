"""The registry of targets: one object per backend, found by discovery.

Built-in targets are the modules of the package archspec.compiler.backends.targets (its base.py
holds the `Target` class), found by name as the ops are: each is
imported once and registers its target with `register`; there is no list of them anywhere
else. Installed packages add targets through the entry point group `archspec.targets` (an
entry point names a module that registers its targets when imported); they are looked for only
when a name is not a built-in or the whole list is asked for, since reading the installed
packages' metadata costs `archspec check` a tenth of its time. Registering a name twice is an
error, never a silent overwrite.

    target = get("onnx")
    [t.name for t in targets("bench")]      ['eager', 'compile', 'onnx', 'tensorrt']
    chain(get("tensorrt"))                  [<target export>, <target tensorrt>]
"""

from __future__ import annotations


import sys

from archspec.core.discovery import import_modules

GROUP = "archspec.targets"
TARGETS_PACKAGE = "archspec.compiler.backends.targets"  # the built-in targets' modules
PRECISIONS = ("fp32", "bf16", "fp16", "int8")
_TARGETS: dict = {}  # name -> Target
_LOADED: set[str] = set()  # "builtins", "plugins"
_PLUGIN_MODULES: list[str] = []  # the modules the entry points named


class TargetRegistryError(Exception):
    """Two targets claim the same name, or a target needs one that is not there: a bug in
    archspec or in a plugin, found when it registers or is used."""


def register(target):
    if not target.name:
        raise TargetRegistryError(f"{type(target).__module__}.{type(target).__name__} has no name")
    if target.name in _TARGETS:
        raise TargetRegistryError(f"target {target.name!r} is registered twice ({type(_TARGETS[target.name]).__module__} "
                            f"and {type(target).__module__})")
    _TARGETS[target.name] = target
    return target


def load_builtins() -> None:
    """Import every module of this package but base.py (each registers its target)."""
    if "builtins" in _LOADED:
        return
    _LOADED.add("builtins")
    import_modules(TARGETS_PACKAGE, skip=("base",), nested=False)


def load_plugins() -> None:
    """Import the module of every entry point of the group `archspec.targets`."""
    load_builtins()
    if "plugins" in _LOADED:
        return
    _LOADED.add("plugins")
    from importlib.metadata import entry_points

    for point in entry_points(group=GROUP):
        _PLUGIN_MODULES.append(point.module)
        point.load()


def reset() -> None:
    """Forget every target and unload the target modules, so that the next question discovers
    them again (tests that add a target folder to `__path__` use it)."""
    _TARGETS.clear()
    _LOADED.clear()
    ours = [m for m in sys.modules if m.startswith(TARGETS_PACKAGE + ".") and m != f"{TARGETS_PACKAGE}.base"]
    for name in ours + _PLUGIN_MODULES:
        sys.modules.pop(name, None)
    _PLUGIN_MODULES.clear()


def _ordered(found) -> list:
    return sorted(found, key=lambda t: (t.order, t.name))


def get(name: str):
    """The target called `name`. KeyError when there is none, plugins included."""
    load_builtins()
    if name not in _TARGETS:
        load_plugins()
    return _TARGETS[name]


def targets(command: str | None = None) -> list:
    """Every target (that serves `command`), in listed order."""
    load_plugins()
    return _ordered(t for t in _TARGETS.values() if command is None or t.serves(command))


def builtins(command: str) -> list:
    """The built-in targets that serve `command`: what --help texts list, at no metadata cost."""
    load_builtins()
    return _ordered(t for t in _TARGETS.values() if t.serves(command))


def default(command: str) -> str | None:
    """The name of the built-in target `command` defaults to (None: it has none)."""
    return next((t.name for t in builtins(command) if command in t.default_for), None)


def giving(precision: str) -> list[str]:
    """The names of the targets whose builds give `precision`."""
    return [t.name for t in targets("build") if precision in t.build_precisions]


def precisions(command: str) -> list[str]:
    """Every precision some target gives for `command` ("build" or "bench"), fp32 first."""
    offered = {p for t in targets(command) for p in getattr(t, f"{command}_precisions")}
    return [p for p in PRECISIONS if p in offered]


def chain(target) -> list:
    """The targets whose builds run for `target`, in order: what it needs (and what they need),
    then itself."""
    order: list = []

    def visit(t, path: tuple):
        if t.name in path:
            raise TargetRegistryError(f"target {t.name!r} needs itself ({' -> '.join(path + (t.name,))})")
        for name in t.needs:
            try:
                visit(get(name), path + (t.name,))
            except KeyError:
                raise TargetRegistryError(f"target {t.name!r} needs {name!r}, which is not registered") from None
        if t not in order:
            order.append(t)

    visit(target, ())
    return order


class TargetChoices:
    """The names of the targets serving a command, as argparse `choices`: built-ins are asked
    first, plugins only for a name that is not one or for the full list (an error message)."""

    def __init__(self, command: str):
        self.command = command

    def __contains__(self, name) -> bool:
        try:
            return get(name).serves(self.command)
        except KeyError:
            return False

    def __iter__(self):
        return iter([t.name for t in targets(self.command)])


class PrecisionChoices:
    """The precisions some target gives for a command, as argparse `choices`, looked up only
    when a --precision is given."""

    def __init__(self, command: str):
        self.command = command

    def __contains__(self, precision) -> bool:
        return precision in precisions(self.command)

    def __iter__(self):
        return iter(precisions(self.command))
