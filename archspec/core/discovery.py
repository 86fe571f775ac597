"""Discovery: import every module of a package, so that each registers what it defines (the ops,
their lowerings, the targets). The one place the registries walk their packages.

A registry names the package it walks (a dotted name, not an import): the modules found
register with the registry, which sits below them and never depends on what they hold."""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from types import ModuleType


def import_modules(package: ModuleType | str, skip: tuple[str, ...] = (), nested: bool = True) -> None:
    """Import every module under `package` (a module or its dotted name; with `nested`, its
    subpackages' too), but those whose last name is in `skip`."""
    if isinstance(package, str):
        package = importlib.import_module(package)
    walk = pkgutil.walk_packages if nested else pkgutil.iter_modules
    for info in walk(package.__path__, package.__name__ + "."):
        if info.name.rpartition(".")[2] not in skip:
            importlib.import_module(info.name)


def module_files(package: str) -> list[str]:
    """The dotted names (relative to `package`) of every module under it, read from the file
    layout alone: nothing is imported but `package`'s parents. Folders without __init__.py are
    not packages and are left out, as pkgutil does."""
    folder = importlib.util.find_spec(package).submodule_search_locations[0]  # runs no __init__ of `package`
    found = []

    def walk(path: str, prefix: str) -> None:
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            if entry.is_dir():
                if os.path.exists(os.path.join(entry.path, "__init__.py")) and entry.name.isidentifier():
                    found.append(prefix + entry.name)
                    walk(entry.path, prefix + entry.name + ".")
            elif entry.name.endswith(".py") and entry.name != "__init__.py" and entry.name[:-3].isidentifier():
                found.append(prefix + entry.name[:-3])

    walk(folder, "")
    return found
