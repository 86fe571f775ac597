"""Discovery: import every module of a package, so that each registers what it defines (the ops,
their lowerings, the targets). The one place the registries walk their packages."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def import_modules(package: ModuleType, skip: tuple[str, ...] = (), nested: bool = True) -> None:
    """Import every module under `package` (with `nested`, its subpackages' too), but those whose
    last name is in `skip`."""
    walk = pkgutil.walk_packages if nested else pkgutil.iter_modules
    for info in walk(package.__path__, package.__name__ + "."):
        if info.name.rpartition(".")[2] not in skip:
            importlib.import_module(info.name)
