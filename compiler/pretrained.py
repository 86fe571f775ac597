"""A model folder, as Hugging Face's `save_pretrained` writes one: everything needed to build
the same model again, its weights, and a card saying what it is.

    DIR/config.json        what to build: the spec's file name, its params as resolved (after
                           --set), the weights' file and dtype, archspec's version
    DIR/<spec>.yaml        the spec file, and the files it extends from its own folder tree
                           (same relative paths; a shipped base is found by its name)
    DIR/model.safetensors  the state dict (tied names once, safetensors_file.py)
    DIR/README.md          the model card: params, FLOPs, inputs and outputs, the reference the
                           spec's header names, the measured deviation where one was measured,
                           the build's targets, and the params

`model.save_pretrained(DIR)` writes one; every `archspec build` output folder is one too; and
`archspec.from_pretrained(DIR)` builds the spec with those params and loads the weights
strictly (archspec/pretrained.py: every tensor present and of the spec's shape, none extra;
else a SpecError naming the tensor, the spec's node and its line).

What the folder needs of the spec is recorded at lowering (`spec_record`, meta["archspec_spec"]).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass

import torch

from archspec.core.errors import Loc, UsageError, error
from archspec.core.ir import Graph
from archspec.core.shipped import header_comment, shipped_folder
from archspec.core.types import BATCH
from archspec.primitives.cost import totals

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
CARD = "README.md"
FORMAT = 1  # config.json's "archspec_folder" version


@dataclass(frozen=True)
class SpecRecord:
    """What a built model keeps of its spec for a model folder (meta["archspec_spec"])."""

    name: str
    file: str | None  # the spec file (None: built from text)
    params: dict  # as resolved after --set
    param_count: int
    flops: int
    flops_at: dict  # the symbolic lengths the FLOPs are counted at
    inputs: tuple[str, ...]  # "image [B, 3, 224, 224]"
    outputs: tuple[str, ...]


def spec_record(graph: Graph) -> SpecRecord:
    total = totals(graph)
    file = graph.file if graph.file and os.path.isfile(graph.file) else None
    inputs = tuple(f"{n.name} {n.type.describe()}" for n in graph.inputs())
    outputs = tuple(f"{o.name} {graph.type_of(o.node).describe()}" for o in graph.outputs)
    flops_at = {name: sym.hi for name, sym in graph.dims.items() if name != BATCH.name}
    return SpecRecord(graph.name, os.path.abspath(file) if file else None, json.loads(json.dumps(graph.params)),
                      total.params, total.flops, flops_at, inputs, outputs)


# -- writing ----------------------------------------------------------------------------------------
def save_folder(model: torch.nn.Module, folder: str, build: dict | None = None) -> list[str]:
    """The model folder of `model` in `folder` (made if missing); the paths written. `build`: what
    a build adds to the card (its "targets", the "deviation" it measured, its "files")."""
    record = model.meta.get("archspec_spec") if hasattr(model, "meta") else None
    if record is None:
        raise TypeError("save_pretrained: this module was not built by archspec (no spec recorded at lowering)")
    if record.file is None:
        raise UsageError(f"save_pretrained: {record.name} was built from text, not a file: the folder holds the "
                         "spec's file; write the text to a .yaml file and build that")
    os.makedirs(folder, exist_ok=True)
    written = copy_spec(record.file, folder)
    written.append(write_weights(model, folder))
    dtype = next((str(p.dtype).replace("torch.", "") for p in model.parameters()), "float32")
    written.append(write_text(folder, CONFIG, json.dumps(config(record, dtype), indent=2)))
    written.append(write_text(folder, CARD, card(record, dtype, build or {})))
    return written


def config(record: SpecRecord, dtype: str) -> dict:
    from archspec.core.version import __version__

    return {"archspec_folder": FORMAT, "name": record.name, "spec": os.path.basename(record.file),
            "params": record.params, "weights": WEIGHTS, "dtype": dtype, "archspec_version": __version__}


def copy_spec(file: str, folder: str) -> list[str]:
    """The spec file, the files it extends from its folder tree and the mapping files they name
    there into `folder`, at the same relative paths; a base outside that tree must be a shipped
    spec (found by name anywhere)."""
    from archspec.language.compose import compose
    from archspec.language.loader import load_file

    home = os.path.dirname(file)
    shipped = os.path.realpath(shipped_folder())
    written = []
    for source in compose(load_file(file)).sources:
        source = os.path.abspath(source)
        relative = os.path.relpath(source, home)
        if relative.startswith(os.pardir):
            if os.path.dirname(os.path.realpath(source)) == shipped:
                continue
            raise UsageError(f"save_pretrained: {file} extends {source}, outside its folder: a model folder holds "
                             "the spec's folder tree only; move the base beside the spec")
        written.append(copy_into(source, relative, folder))
        written += copy_mappings(source, home, folder)
    return written


def copy_into(source: str, relative: str, folder: str) -> str:
    """`source` copied to `relative` under `folder` (its folders made; nothing where it is that
    file already); the target's path."""
    target = os.path.join(folder, relative)
    os.makedirs(os.path.dirname(target) or folder, exist_ok=True)
    if os.path.abspath(target) != source:
        shutil.copyfile(source, target)
    return target


def copy_mappings(source: str, home: str, folder: str) -> list[str]:
    """The mapping files a spec file names (`mappings:`) from its folder tree, into `folder` at
    the same relative paths, so that the folder's spec finds them as the original did (the DPT
    and GLM-4 trials: the build folder's spec warned of its missing mapping). Shipped mappings
    (not in the tree) are found by name anywhere, and are not copied."""
    from archspec.language.loader import load_file

    data = load_file(source).data
    names = data.get("mappings") if isinstance(data, dict) else None
    written = []
    for name in names if isinstance(names, list) else []:
        if not isinstance(name, str):
            continue
        path = os.path.abspath(os.path.join(os.path.dirname(source), name))
        path = path if os.path.isfile(path) or path.endswith(".yaml") else path + ".yaml"
        relative = os.path.relpath(path, home)
        if os.path.isfile(path) and not relative.startswith(os.pardir):
            written.append(copy_into(path, relative, folder))
    return written


def write_weights(model: torch.nn.Module, folder: str) -> str:
    from .safetensors_file import write_safetensors

    path = os.path.join(folder, WEIGHTS)
    write_safetensors(model.state_dict(), path, {"format": "pt"})
    return path


def write_text(folder: str, name: str, text: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def card(record: SpecRecord, dtype: str, build: dict) -> str:
    """The model card (README.md): what the model is, as measured at its build."""
    lengths = ", ".join(f"{k}={v}" for k, v in record.flops_at.items())
    basis = f"per sample at {lengths}" if lengths else "per sample"
    rows = [("spec", f"`{os.path.basename(record.file)}`"), ("params", f"{record.param_count:,}"),
            ("FLOPs", f"{record.flops:,} {basis} (multiply-add = 2; matmul, conv and attention)"),
            ("inputs", "; ".join(f"`{i}`" for i in record.inputs)),
            ("outputs", "; ".join(f"`{o}`" for o in record.outputs)), ("weights", f"`{WEIGHTS}` ({dtype})"),
            ("reference", header_comment(record.file) or "the spec names none"),
            ("deviation", build.get("deviation") or "none measured for this folder (the spec records none)"),
            ("built for", ", ".join(build.get("targets", ())) or "eager (save_pretrained)")]
    if build.get("files"):
        rows.append(("files", ", ".join(f"`{f}`" for f in build["files"])))
    params = [(f"`{k}`", f"`{json.dumps(v)}`") for k, v in record.params.items()]
    return "\n".join([
        f"# {record.name}", "",
        "An archspec model folder: the spec, its params as built, the weights as safetensors.", "",
        "```python", "import archspec", 'model = archspec.from_pretrained("path/to/this/folder")', "```", "",
        *table(("", ""), rows), "", "## Params", "", *table(("param", "value"), params), ""])


def table(head: tuple, rows: list) -> list[str]:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    return [f"| {head[0]} | {head[1]} |", "|---|---|", *(f"| {cell(a)} | {cell(b)} |" for a, b in rows)]


# -- reading ----------------------------------------------------------------------------------------
def read_config(folder: str) -> dict:
    """config.json of the model folder, checked; a SpecError located at it for anything wrong."""
    path = os.path.join(folder, CONFIG)
    if not os.path.isdir(folder):
        raise UsageError(f"from_pretrained: no such folder: {folder}")
    if not os.path.isfile(path):
        raise error(f"from_pretrained: {folder} holds no {CONFIG}, so it is not a model folder",
                    hint="save_pretrained(DIR) or `archspec build SPEC -o DIR` writes one")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise error(f"{CONFIG}: not readable as JSON: {exc}", Loc(path, getattr(exc, "lineno", 1) or 1,
                                                                   getattr(exc, "colno", 1) or 1)) from None
    wrong = [k for k, kind in (("spec", str), ("params", dict), ("weights", str)) if not isinstance(data.get(k), kind)]
    if not isinstance(data, dict) or wrong:
        raise error(f"{CONFIG}: {', '.join(wrong) or 'the file'} missing or of the wrong type", Loc(path, 1, 1),
                    hint='it holds {"spec": "NAME.yaml", "params": {...}, "weights": "model.safetensors"}')
    for key in ("spec", "weights"):
        inside(folder, data[key], path, key)
    return data


def inside(folder: str, name: str, config_path: str, key: str) -> str:
    """The path `name` names inside `folder`; a located error for one that leaves it."""
    root = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(folder, name))
    if os.path.isabs(name) or os.path.commonpath([root, path]) != root:
        raise error(f"{CONFIG}: \"{key}\": {name!r} lies outside the model folder", Loc(config_path, 1, 1),
                    hint="a model folder names its own files by relative paths")
    return path


def check_params(graph: Graph, data: dict, config_path: str) -> None:
    """The spec as rebuilt resolves every param to the value recorded in config.json."""
    built = json.loads(json.dumps(graph.params))
    differ = [k for k in data["params"] if built.get(k) != data["params"][k]]
    if differ:
        k = differ[0]
        raise error(f"{CONFIG}: param {k} is {json.dumps(data['params'][k])} there, but the spec beside it gives "
                    f"{json.dumps(built.get(k))}", Loc(config_path, 1, 1),
                    hint="the spec file was changed after the folder was written")
