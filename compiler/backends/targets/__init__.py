"""The built-in targets, one module each (base.py holds the `Target` class); the registry they
register with is archspec/compiler/backends/registry.py, whose names this package gives too
(`from . import register` in a target's module)."""

from __future__ import annotations

from ..registry import (  # noqa: F401  (the registry's names, as before)
    GROUP,
    PRECISIONS,
    PrecisionChoices,
    TARGETS_PACKAGE,
    TargetChoices,
    TargetRegistryError,
    builtins,
    chain,
    default,
    get,
    giving,
    load_builtins,
    load_plugins,
    precisions,
    register,
    reset,
    targets,
)
