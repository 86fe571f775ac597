"""The house's size figures (issue 34's note): the largest modules, classes and constructors of
archspec/ and compiler/, and how many pairs of places in the checkout repeat each other (the `duplicates`
tool, where it is installed).

    python tests/benchmarks/house_metrics.py [ROOT] [--top 5]

ROOT defaults to this checkout; give another (a `git worktree` of an older commit) to compare.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess

FOLDERS = ("archspec", "compiler")


def sources(root: str):
    """(path relative to root, text) of every .py file under FOLDERS."""
    for folder in FOLDERS:
        for base, dirs, files in os.walk(os.path.join(root, folder), followlinks=False):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(base, d))]
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(base, name)
                    with open(path, encoding="utf-8") as f:
                        yield os.path.relpath(path, root), f.read()


def measure(root: str) -> dict:
    modules, classes, constructors = [], [], []
    for path, text in sources(root):
        modules.append((len(text.splitlines()), path))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                classes.append((node.end_lineno - node.lineno + 1, f"{path}:{node.name}"))
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                        args = item.args
                        count = len(args.args) - 1 + len(args.kwonlyargs) + bool(args.vararg) + bool(args.kwarg)
                        constructors.append((count, f"{path}:{node.name}.__init__"))
    return {"modules": sorted(modules, reverse=True), "classes": sorted(classes, reverse=True),
            "constructors": sorted(constructors, reverse=True)}


def duplicate_pairs(root: str) -> str:
    """The `duplicates` tool's first line (pairs and files read) over the whole checkout, or why not."""
    tool = shutil.which("duplicates")
    if tool is None:
        return "the duplicates tool is not installed here"
    out = subprocess.run([tool, "--repo", root, "--seconds", "300"], capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    found = measure(args.root)
    print(f"{args.root}: {len(found['modules'])} modules, {sum(n for n, _ in found['modules']):,} lines, "
          f"{len(found['classes'])} classes")
    for title, unit in (("modules", "lines"), ("classes", "lines"), ("constructors", "parameters")):
        print(f"largest {title} ({unit}): " + ", ".join(f"{p} {n}" for n, p in found[title][: args.top]))
    print("repeated places:", duplicate_pairs(args.root))


if __name__ == "__main__":
    main()
