"""Where a spec's `mappings:` entries lead, and what to say about one that leads nowhere.

A spec names its weight mapping files relative to the file that names them (the rule of
paths.py says which files it may name). A name with no file there that names one of archspec's
shipped mapping files (`mappings/timm_swin.yaml`, as the shipped specs write it) leads to the
shipped file: a shipped spec copied into another folder keeps its mappings. From any folder, an
entry may also name a shipped mapping file by its name alone (`hf_llama` or `hf_llama.yaml`), or a
shipped spec by its name (`llama` or `llama.yaml`), which stands for that spec's own mapping files.
A file of that name beside the spec always wins over the shipped one.

A mapping file matters only when a checkpoint is loaded (`--weights`). So an entry that leads
nowhere (no such file, one that cannot be read, or one the rule refuses) is a warning at check,
located at the entry, and the spec's own errors are still reported; the load says it again, as
an error, only when the checkpoint fits none of the namings it could try without it
(compiler/weights/load.py).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from ..core.errors import Diagnostic, Loc, SpecError, warning
from ..core.shipped import looks_like_a_name, shipped_mapping_named, shipped_spec_named
from .paths import SHIPPED_SPECS, named_file

# Where archspec's shipped specs (and their mappings/ folder) are. When the shipped specs become
# package data, this is the one line to switch to that module's answer.
SHIPPED_FOLDER = SHIPPED_SPECS


@dataclass(frozen=True)
class MappingSource:
    """One entry of a spec's `mappings:`: where it leads, or why it leads nowhere."""

    name: str  # as the spec wrote it
    loc: Loc | None  # the entry in the spec (or in the spec it extends)
    path: str | None = None  # the file it leads to (absolute); None when it leads nowhere
    shipped: bool = False  # archspec's shipped file, found because the spec's folder has none
    problem: Diagnostic | None = None  # why it leads nowhere (a warning)

    def shipped_note(self, spec: str | None) -> str:
        """What the load summary says about a shipped file taken for this entry."""
        beside = f" beside {os.path.basename(spec)}" if spec else ""
        return f"mapping {self.name} is archspec's shipped file (there is none{beside})"


def mapping_sources(names: list, locs: list[Loc | None], root_file: str) -> list[MappingSource]:
    """The entries `names` of a spec's `mappings:` (each at its `locs` entry), for the spec at
    `root_file`: each resolved, or with the warning that says why it leads nowhere."""
    return [source for name, loc in zip(names, locs) for source in entry_sources(str(name), loc, root_file)]


def entry_sources(name: str, loc: Loc | None, root_file: str) -> list[MappingSource]:
    """What one entry leads to: one mapping file, or a shipped spec's mapping files (`llama`)."""
    if looks_like_a_name(name):  # a name, never a file: a shipped mapping file, else a shipped spec
        shipped = shipped_mapping_named(name)
        if shipped is not None:
            return [MappingSource(name, loc, shipped, shipped=True)]
        spec = shipped_spec_named(name)
        if spec is not None:
            return shipped_spec_sources(name, loc, spec)
        return [MappingSource(name, loc, problem=missing(name, loc))]
    source = mapping_source(name, loc, root_file)
    if source.problem is not None and source.problem.message.startswith("no such mapping file"):
        spec = shipped_spec_named(name)  # `llama.yaml`, with no file of that name beside the spec
        if spec is not None:
            return shipped_spec_sources(name, loc, spec)
    return [source]


def shipped_spec_sources(name: str, loc: Loc | None, spec: str) -> list[MappingSource]:
    """The mapping files of the shipped spec at `spec` (and of the specs it extends), for the
    entry `name` that named it: each shipped, named `name: entry` (`llama: mappings/hf_llama.yaml`)."""
    from .extends import with_bases  # only for an entry that names a shipped spec
    from .loader import load_file

    doc = with_bases(load_file(spec))
    entries = doc.data.get("mappings") if isinstance(doc.data, dict) else None
    if isinstance(entries, str):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        return [MappingSource(name, loc, problem=warning(
            f"mappings: the shipped spec {name} has no mapping files", loc, hint=NEEDED_ONLY))]
    out = []
    for i, entry in enumerate(entries):
        entry_loc = doc.loc(("mappings", i))
        for source in entry_sources(str(entry), entry_loc, entry_loc.file if entry_loc else spec):
            if source.path is not None:
                source = dataclasses.replace(source, name=f"{name}: {entry}", loc=loc, shipped=True)
            out.append(source)
    return out


def mapping_source(name: str, loc: Loc | None, root_file: str) -> MappingSource:
    named_by = loc.file if loc else root_file
    try:  # the rule of paths.py, applied before the file is looked for
        path = os.path.abspath(named_file(name, named_by, root_file, loc, "mappings"))
    except SpecError as exc:
        return MappingSource(name, loc, problem=as_warning(exc.diagnostics[0]))
    if not os.path.isfile(path):
        shipped = shipped_file(name) or shipped_mapping_named(name)
        if shipped is not None:
            return MappingSource(name, loc, shipped, shipped=True)
        return MappingSource(name, loc, problem=missing(name, loc))
    if not os.access(path, os.R_OK):
        return MappingSource(name, loc, problem=warning(
            f"cannot read mapping file: {name} (permission denied)", loc, hint=NEEDED_ONLY))
    return MappingSource(name, loc, path, problem=first_reading(path))


# A mapping file's top-level keys and its rules' kinds (compiler/weights/mapping_file.py reads
# each rule through its model; tests/weights check that the two agree).
MAPPING_KEYS = ("archspec", "name", "doc", "identify", "rules", "keep")
RULE_NAMES = ("rename", "fuse", "stack", "split", "transpose", "permute", "reshape", "drop", "affine", "copy",
              "create")


def first_reading(path: str) -> Diagnostic | None:
    """A warning, located in the mapping file, where check's first reading of it fails: not
    YAML, not a mapping, an unknown top-level key or an unknown rule (`fuze:`). The rules
    themselves are read at the load (`--weights`), which says again what is wrong, as an error."""
    from .loader import load_file

    try:
        doc = load_file(path)
    except SpecError as exc:
        return as_warning(exc.diagnostics[0])
    data = doc.data
    if not isinstance(data, dict):
        return warning("a mapping file is a mapping with `name` and `rules`", doc.loc(()), hint=NEEDED_ONLY)
    for key in data:
        if key not in MAPPING_KEYS:
            return unknown(doc, (key,), "key", key, MAPPING_KEYS)
    rules = data.get("rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else ()):
        for kind in rule if isinstance(rule, dict) else ():
            if kind not in RULE_NAMES:
                return unknown(doc, ("rules", i, kind), "rule", kind, RULE_NAMES)
    return None


def unknown(doc, path: tuple, what: str, name, known: tuple) -> Diagnostic:
    """A warning: an unknown `what` (key or rule) in a mapping file, with the closest known name."""
    from ..core.words import did_you_mean, one_of

    return warning(f"unknown {what} '{name}' in the mapping file (loading a checkpoint with it, --weights, would "
                   "stop here)", doc.loc(path, key=True),
                   hint=did_you_mean(str(name), known) or f"a {what} is one of: {one_of(known)}")


NEEDED_ONLY = "a mapping file is needed only to load a checkpoint in its naming (--weights)"


def shipped_file(name: str) -> str | None:
    """archspec's shipped mapping file that `name` names relative to the shipped specs folder
    (`mappings/timm_swin.yaml`), when there is one; never a file outside its mappings/ folder."""
    if os.path.isabs(name):
        return None
    specs = os.path.realpath(SHIPPED_FOLDER)
    path = os.path.realpath(os.path.join(specs, name))
    if not path.startswith(os.path.join(specs, "mappings") + os.sep) or not path.endswith((".yaml", ".yml")):
        return None
    return path if os.path.isfile(path) else None


def missing(name: str, loc: Loc | None) -> Diagnostic:
    where = f"the folder of {loc.file}" if loc else "the current folder"
    return warning(f"no such mapping file: {name}", loc,
                   hint=f"mapping files are found relative to {where}, or among archspec's shipped mappings "
                        "(by name: `hf_llama`), or a shipped spec's name stands for its mappings (`llama`); "
                        + NEEDED_ONLY)


def as_warning(diag: Diagnostic) -> Diagnostic:
    """A refusal of paths.py as a warning (the file is never read either way)."""
    hint = f"{diag.hint}; {NEEDED_ONLY}" if diag.hint else NEEDED_ONLY
    return dataclasses.replace(diag, severity="warning", hint=hint)


def as_error(source: MappingSource, why: str) -> Diagnostic:
    """The warning of an entry that leads nowhere, as the error of a load that needed it."""
    problem = source.problem
    hint = problem.hint.replace(NEEDED_ONLY, why) if problem.hint else why
    return dataclasses.replace(problem, severity="error", hint=hint)
