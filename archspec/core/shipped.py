"""Where the shipped architectures are, and which names they go by.

The shipped specs (one YAML file per architecture) and their mapping files live in the
repository's top-level specs/ folder. A wheel installs that folder as package data inside the
package, as archspec/specs/ (pyproject.toml maps the package `archspec.specs` to specs/); an
editable install or a source checkout reads the repository's specs/ beside archspec/. A shipped
spec's name is its file name without `.yaml` (`swin_t` is specs/swin_t.yaml); the examples
(specs/examples/) and the mapping files are not architectures and have no name.

Torch-free and dependency-free (floor 1), so the language floor's path rule (which folders a
spec may name, language/paths.py) and the face (names on the command line, create_model) read
the same folder.
"""

from __future__ import annotations

import fnmatch
import os

SUFFIX = ".yaml"
PACKAGE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # archspec/


def shipped_folder() -> str:
    """The folder holding the shipped specs: archspec/specs/ in an installed wheel, else the
    repository's specs/ beside the package (a source checkout or an editable install)."""
    installed = os.path.join(PACKAGE_FOLDER, "specs")
    if os.path.isdir(installed):
        return installed
    return os.path.join(os.path.dirname(PACKAGE_FOLDER), "specs")


def shipped_names(pattern: str = "*") -> list[str]:
    """The names of the shipped specs that match the shell-style `pattern` (fnmatch, case as
    given), sorted."""
    try:
        files = os.listdir(shipped_folder())
    except OSError:
        return []
    names = (f[: -len(SUFFIX)] for f in files if f.endswith(SUFFIX) and not f.startswith("."))
    return sorted(n for n in names if fnmatch.fnmatchcase(n, pattern))


def shipped_spec(name: str) -> str | None:
    """The path of the shipped spec called `name`; None when there is none by that name."""
    if not looks_like_a_name(name) or name not in shipped_names():
        return None
    return os.path.join(shipped_folder(), name + SUFFIX)


def shipped_spec_named(text: str) -> str | None:
    """The path of the shipped spec that a spec's `extends:` or `mappings:` entry names by its
    name alone: `llama`, or its file name `llama.yaml` / `llama.yml` with no folder; None when
    `text` is neither. (A file of that name beside the spec is looked for first, by the caller.)"""
    if not isinstance(text, str) or not text:
        return None
    if looks_like_a_name(text):
        return shipped_spec(text)
    stem, suffix = os.path.splitext(text)
    if suffix in (".yaml", ".yml") and looks_like_a_name(stem):
        return shipped_spec(stem)
    return None


def shipped_mapping_named(text: str) -> str | None:
    """The path of the shipped mapping file (specs/mappings/) that `text` names by its name alone:
    `hf_llama`, or `hf_llama.yaml` with no folder; None when there is none."""
    if not isinstance(text, str) or not text:
        return None
    stem, suffix = os.path.splitext(text)
    if suffix not in (".yaml", ".yml"):
        stem, suffix = text, SUFFIX
    if not looks_like_a_name(stem) or stem.startswith(".") or stem == "README":
        return None
    path = os.path.join(shipped_folder(), "mappings", stem + suffix)
    return path if os.path.isfile(path) else None


def looks_like_a_name(text: str) -> bool:
    """Whether `text` could be a shipped spec's name rather than a path: no folder separator and
    no YAML suffix (`swin_t`, not `swin_t.yaml` or `specs/swin_t`)."""
    seps = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    return bool(text) and not any(s in text for s in seps) and not text.endswith((".yaml", ".yml")) \
        and text not in (".", "..")


def closest_names(word: str, count: int = 3) -> list[str]:
    """Up to `count` shipped names close to `word` (for a did-you-mean), closest first."""
    import difflib  # only when a hint is wanted

    return difflib.get_close_matches(word, shipped_names(), n=count, cutoff=0.5)


HEADER_LINES = 12  # the leading comment lines read for a spec's paper and reference


def header_comment(path: str) -> str:
    """The spec file's leading comment lines, joined into one text (they name the paper and the
    reference the spec equals: `archspec models`, a model folder's card)."""
    lines = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#") or len(lines) >= HEADER_LINES:
                break
            lines.append(line[1:].strip())
    return " ".join(lines)
