"""The floors of the code import only downward, no modules import each other, and no two
packages do (a package's modules importing another's, and back; subpackages count apart).

    1 core        archspec/core/                 errors, diagnostics, tensor types, IR, interpreter
    2 primitives  archspec/primitives/           op objects, shape and cost rules, infer and cost passes
    3 language    archspec/language/             loader, expressions, schema, compose, expand
    4 torch       compiler/ (archspec.compiler)  lowering, modules, weights
    5 backends    compiler/backends/             torch.export, ONNX, TensorRT, model.py
    6 face        archspec/__init__, pipeline, report, cli/

Read from the source (an AST walk of every module, imports inside functions included), so a
lazy import is held to the same rule. A package's own __init__ runs when any of its modules is
imported, but only imports written in a module count: package __init__ files are kept free of
imports that would climb (archspec/__init__.py imports the face lazily, inside functions).

`test_the_checker_catches_an_upward_import_and_a_cycle` feeds the checker modules that break
the rules, so this test is known to fail when the code does.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

from tests.conftest import ROOT

FLOORS = {  # module prefix -> floor (the longest matching prefix wins)
    "archspec.core": 1,
    "archspec.primitives": 2,
    "archspec.language": 3,
    "archspec.compiler": 4,
    "archspec.compiler.backends": 5,
    "archspec": 6,
}
FLOOR_NAMES = {1: "core", 2: "primitives", 3: "language", 4: "torch", 5: "backends", 6: "face"}
TORCH_FREE = (1, 2, 3)
FOLDERS = {"archspec": ROOT / "archspec", "archspec.compiler": ROOT / "compiler"}


def floor_of(module: str) -> int:
    best = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len)
    return FLOORS[best]


def module_sources() -> dict[str, str]:
    """Module name -> source text of every module of the installed package."""
    sources = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            sources[".".join([package, *parts])] = path.read_text()
    return sources


def imports_of(module: str, source: str, known: set[str], is_package: bool) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the source that names a known module or a
    top-level `compiler` package; `from pkg import name` counts as pkg.name when that is a module."""
    found = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in ("archspec", "compiler", "torch"):
                found.append((name, node.lineno))
    return found


def layer_violations(sources: dict[str, str], packages: set[str] | None = None) -> list[str]:
    """Every import against the floors, every import cycle, every top-level `compiler` import
    and every torch import below the torch floor."""
    known = set(sources)
    packages = packages if packages is not None else {m for m in known if m in FOLDERS or _is_package(m)}
    graph = nx.DiGraph()
    problems = []
    for module, source in sources.items():
        graph.add_node(module)
        floor = floor_of(module)
        for name, line in imports_of(module, source, known, module in packages):
            if name == "compiler" or name.startswith("compiler."):
                problems.append(f"{module}:{line} imports `{name}`: the package is archspec.compiler")
                continue
            if name.split(".")[0] == "torch":
                if floor in TORCH_FREE:
                    problems.append(f"{module}:{line} ({FLOOR_NAMES[floor]}) imports torch")
                continue
            target = name if name in known else _owning_module(name, known)
            if target is None or target == module:
                continue
            graph.add_edge(module, target)
            if floor_of(target) > floor:
                problems.append(f"{module}:{line} ({FLOOR_NAMES[floor]}) imports {target} "
                                f"({FLOOR_NAMES[floor_of(target)]}), a higher floor")
    for cycle in nx.simple_cycles(graph):
        problems.append("import cycle: " + " -> ".join(cycle + [cycle[0]]))
    return problems


def package_of(module: str, packages: set[str]) -> str:
    return module if module in packages else module.rpartition(".")[0]


def package_pairs(sources: dict[str, str], packages: set[str] | None = None) -> dict[tuple[str, str], str]:
    """(A, B) -> a line naming one import each way, for every two packages that import each
    other (a subpackage is a package of its own; imports inside functions count)."""
    known = set(sources)
    packages = packages if packages is not None else {m for m in known if m in FOLDERS or _is_package(m)}
    first: dict[tuple[str, str], str] = {}
    for module, source in sorted(sources.items()):
        for name, line in imports_of(module, source, known, module in packages):
            target = name if name in known else _owning_module(name, known)
            if target is None or target == module or name.split(".")[0] != "archspec":
                continue
            edge = (package_of(module, packages), package_of(target, packages))
            if edge[0] != edge[1]:
                first.setdefault(edge, f"{module}:{line} imports {target}")
    return {(a, b): f"packages {a} and {b} import each other: {first[a, b]}; {first[b, a]}"
            for (a, b) in first if a < b and (b, a) in first}


def _owning_module(name: str, known: set[str]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _is_package(module: str) -> bool:
    for package, folder in FOLDERS.items():
        if module == package or module.startswith(package + "."):
            rest = module[len(package):].lstrip(".").split(".") if module != package else []
            if (folder.joinpath(*rest) / "__init__.py").exists():
                return True
    return False


def test_the_floors_import_only_downward_and_nothing_imports_each_other():
    problems = layer_violations(module_sources())
    assert not problems, "\n".join(problems)


def test_no_two_packages_import_each_other():
    pairs = package_pairs(module_sources())
    problems = [text for _, text in sorted(pairs.items())]
    assert not problems, "\n".join(problems)


def test_the_package_check_names_both_packages_and_an_import_each_way():
    sources = {
        "archspec.language.x": "def f():\n    from archspec.primitives.y import z\n",
        "archspec.primitives.y": "from ..language.x import f\n",
        "archspec.primitives.ops.w": "from ..y import z\n",  # a subpackage importing its parent: one way only
    }
    pairs = package_pairs(sources, packages={"archspec.primitives.ops"})
    assert list(pairs) == [("archspec.language", "archspec.primitives")]
    assert pairs["archspec.language", "archspec.primitives"] == (
        "packages archspec.language and archspec.primitives import each other: archspec.language.x:2 imports "
        "archspec.primitives.y; archspec.primitives.y:1 imports archspec.language.x")


def test_the_checker_catches_an_upward_import_and_a_cycle():
    sources = {
        "archspec.core.ir": "from ..primitives.base import Op\n",  # core reaching up to primitives
        "archspec.primitives.base": "x = 1\n",
        "archspec.language.a": "from . import b\n",
        "archspec.language.b": "def f():\n    from archspec.language import a\n",  # a lazy import still counts
        "archspec.primitives.rules": "import torch\n",
        "archspec.compiler.lower": "from compiler.modules import common\n",
    }
    problems = layer_violations(sources, packages=set())
    assert any("archspec.core.ir:1 (core) imports archspec.primitives.base (primitives)" in p for p in problems)
    assert any(p.startswith("import cycle:") and "archspec.language.a" in p and "archspec.language.b" in p
               for p in problems)
    assert any("archspec.primitives.rules:1 (primitives) imports torch" in p for p in problems)
    assert any("imports `compiler.modules`" in p for p in problems)
    assert len(problems) == 4, problems


def test_the_installed_package_list_names_every_folder():
    """pyproject lists the packages (compiler/ is mapped to archspec.compiler): a new folder
    that is not listed would be missing from a wheel."""
    text = (ROOT / "pyproject.toml").read_text()
    listed = set(re.findall(r'^\s*"(archspec(?:\.[a-z_]+)*)",$', text, re.M))
    folders = {m for m in module_sources() if _is_package(m)}
    assert listed == folders


def test_no_test_imports_a_top_level_compiler_package():
    for path in (ROOT / "tests").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            assert not any(n == "compiler" or n.startswith("compiler.") for n in names), f"{path}:{node.lineno}"


def test_no_class_name_lives_on_two_sides():
    """One name per concept: a rule-side class (archspec/) and a torch-side class (compiler/)
    never share a name (`MlpOp` the op, `Mlp` the module)."""
    def class_names(folder: str) -> set[str]:
        return {node.name for path in (ROOT / folder).rglob("*.py")
                for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.ClassDef)}

    shared = class_names("archspec") & class_names("compiler")
    assert not shared, f"class names on both sides: {sorted(shared)}"
