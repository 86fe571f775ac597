"""Plugins: installed Python packages that add primitives or kinds without editing archspec.

A plugin is a distribution that declares an entry point in the group `archspec.plugins`;
its name is the plugin's name and its value a module that registers `Op` objects (import
archspec.primitives.registry.register, as the built-in ops do). The torch side, if the
plugin has one, is a second entry point of the same name in the group
`archspec.plugins.torch`, naming a module that registers lowering rules
(archspec.compiler.lowering_rules.lowering) and what the backends must know about each op
(archspec.compiler.facts.register_facts: its token grid, ONNX fusion and head role); it is
imported only when a model is built.

    [project.entry-points."archspec.plugins"]
    example = "archspec_example_plugin.rules"
    [project.entry-points."archspec.plugins.torch"]
    example = "archspec_example_plugin.torch_side"

A spec loads a plugin by naming it: `requires: [example]`. Nothing else makes archspec
import code: a spec cannot name a module, only a plugin some installed package declares.
"""

from __future__ import annotations

import importlib

from ..core.errors import Loc, SpecError, error
from ..core.words import did_you_mean, one_of
from .registry import registering_for

GROUP = "archspec.plugins"
TORCH_GROUP = "archspec.plugins.torch"
_LOADED: set[str] = set()


def _entry_points(group: str) -> dict:
    from importlib.metadata import entry_points  # only when a spec requires a plugin: it scans site-packages

    return {ep.name: ep for ep in entry_points(group=group)}


def installed() -> list[str]:
    return sorted(_entry_points(GROUP))


def require(names: list[str], locs: list[Loc | None]) -> None:
    """Load the plugins a spec requires; a missing or broken one is a located error."""
    if all(name in _LOADED for name in names):
        return
    available = _entry_points(GROUP)
    problems = []
    for name, loc in zip(names, locs):
        if name in _LOADED:
            continue
        if name not in available:
            hint = did_you_mean(name, available) or (
                f"installed plugins: {one_of(sorted(available))}" if available else "no archspec plugin is installed")
            problems.append(error(f"plugin '{name}' is not installed", loc,
                                  hint=f"{hint}; a plugin is a package with an entry point in the group '{GROUP}'"))
            continue
        try:
            with registering_for(name):
                importlib.import_module(available[name].value.split(":")[0])
        except Exception as exc:  # noqa: BLE001 - the plugin's failure, reported at the spec that asks for it
            problems.append(error(f"plugin '{name}' failed to load: {type(exc).__name__}: {exc}", loc,
                                  hint=f"the module {available[name].value} raised while registering its ops"))
            continue
        _LOADED.add(name)
    if problems:
        raise SpecError([d for p in problems for d in p.diagnostics])


def load_torch_side(name: str) -> bool:
    """Import a loaded plugin's torch side (its lowerings); False when it declares none."""
    torch_side = _entry_points(TORCH_GROUP).get(name)
    if torch_side is None:
        return False
    importlib.import_module(torch_side.value.split(":")[0])
    return True
