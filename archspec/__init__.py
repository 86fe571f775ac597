"""archspec: transformer architectures as YAML graph specs, checked and compiled.

    import archspec
    report = archspec.check("specs/swin_t.yaml")          # shapes, params, FLOPs (no torch)
    model = archspec.build("specs/swin_t.yaml", seed=0)   # a torch.fx.GraphModule
    report = archspec.check_text(yaml_text)               # a spec given as text
    archspec.list_models("swin*")                         # the shipped specs by name
    model = archspec.create_model("swin_t", weights="swin_t.pth", num_classes=10)  # timm's way
    model.save_pretrained("my_swin"); model = archspec.from_pretrained("my_swin")  # a model folder

Wherever a function takes a spec's path it takes a shipped spec's name too ("swin_t" is the
shipped specs/swin_t.yaml): a name is looked up only when no file of that name exists (see
archspec/models.py).

`overrides` maps param names to values, like `--set`. Problems with the spec (or a
checkpoint) raise `SpecError` (its `diagnostics` carry file, line, column, node path, message
and hint); arguments of the wrong Python type raise `TypeError` with a plain message, and an
argument of the right type with a value no build can take (a seed out of range, a mapping
without weights) raises `UsageError`.

This package's floors (each imports only from those below it; tests/primitives/test_layers.py):
  core/ -> primitives/ -> language/ -> compiler/ (torch: modules, lowering, weights)
  -> compiler/backends/ -> this face (this file, pipeline.py, report.py, cli/).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from .core.errors import Diagnostic, InternalError, Loc, SpecError, UsageError
from .core.version import __version__
__all__ = ["check", "check_text", "build", "build_text", "create_model", "from_pretrained", "list_models", "SpecError", "InternalError",
           "UsageError", "Diagnostic", "Loc", "__version__"]


SEED_MAX = 2**64 - 1  # torch.manual_seed's range (0 .. 2^64 - 1)
PLAIN_TYPES = (str, int, float, bool, type(None), list, dict)
_WALK_LIMIT = 100_000  # values of an override looked at for their types (the language bounds the rest)


def _path_argument(function: str, path) -> str:
    """The spec file `path` names: a path, or else a shipped spec's name (archspec/models.py).
    A SpecError for neither (naming the closest shipped names), as for any missing file."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    text_function = "build" if function == "create_model" else function
    if not isinstance(path, str):
        raise TypeError(f"archspec.{function}: `path` must be a file path (str or os.PathLike) or a shipped spec's "
                        f"name, got {type(path).__name__}; for a spec held in a string use "
                        f"archspec.{text_function}_text")
    if "\n" in path and not os.path.exists(path):
        raise TypeError(f"archspec.{function}: `path` holds a line break, so it looks like YAML text rather than "
                        f"a file path; for a spec held in a string use archspec.{text_function}_text")
    from .models import not_found, resolve_spec

    found = resolve_spec(path)
    if found is None:
        raise SpecError(Diagnostic(not_found(path, "archspec.list_models()")))
    return found[0]


def _text_argument(function: str, text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"archspec.{function}: `text` must be the spec's YAML as a str, got {type(text).__name__}")
    return text


def _name_argument(function: str, name) -> str:
    if not isinstance(name, str):
        raise TypeError(f"archspec.{function}: `name` must be a str (the file name errors show), got "
                        f"{type(name).__name__}")
    return name


def _overrides_argument(function: str, overrides) -> Mapping[str, Any] | None:
    if overrides is None:
        return None
    if not isinstance(overrides, Mapping) or not all(isinstance(k, str) for k in overrides):
        raise TypeError(f"archspec.{function}: `overrides` must be a mapping of param names to values "
                        f"(like --set), got {type(overrides).__name__}")
    for key, value in overrides.items():
        wrong = _not_plain(value)
        if wrong is not None:
            raise TypeError(f"archspec.{function}: overrides[{key!r}] holds {wrong}; values are plain data "
                            f"(str, int, float, bool, None, lists and dicts of them), or YAML text as for --set")
    return overrides


def _not_plain(value) -> str | None:
    """What the first value inside `value` that is not plain data is (None: all are plain).
    Walked without recursion and bounded: a value nested too deep or too large is the
    language's to refuse, with a located error."""
    stack, seen = [value], 0
    while stack and seen < _WALK_LIMIT:
        item = stack.pop()
        seen += 1
        if not isinstance(item, PLAIN_TYPES):
            return f"a value of type {type(item).__name__}"
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return "a dict whose keys are not all str"
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _seed_argument(function: str, seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"archspec.{function}: `seed` must be an int, got {type(seed).__name__}")
    if not 0 <= seed <= SEED_MAX:
        raise UsageError(f"archspec.{function}: `seed` must lie in 0 .. 2^64 - 1 (torch's range), got {seed}")
    return seed


def _weights_argument(function: str, weights):
    if weights is None or isinstance(weights, Mapping):
        return weights
    if isinstance(weights, os.PathLike):
        weights = os.fspath(weights)
    if not isinstance(weights, str):
        raise TypeError(f"archspec.{function}: `weights` must be a checkpoint's path (str or os.PathLike) or a "
                        f"state dict (a mapping of names to tensors), got {type(weights).__name__}")
    return weights


def _mapping_argument(function: str, mapping, weights):
    if mapping is None:
        return None
    if isinstance(mapping, os.PathLike):
        mapping = os.fspath(mapping)
    if not isinstance(mapping, str):
        raise TypeError(f"archspec.{function}: `mapping` must be the path of a weight mapping file (str or "
                        f"os.PathLike), got {type(mapping).__name__}")
    if weights is None:
        raise UsageError(f"archspec.{function}: `mapping` names how a checkpoint is named, and no `weights` "
                         f"were given; pass weights=FILE too")
    return mapping


def check(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None):
    """Check the spec in the file at `path` (or the shipped spec of that name, "swin_t"): every
    shape, parameter count and FLOP count. Returns a Report; raises SpecError."""
    from .pipeline import check_file

    return check_file(_path_argument("check", path), _overrides_argument("check", overrides))


def check_text(text: str, overrides: Mapping[str, Any] | None = None, *, name: str = "<spec>"):
    """Check a spec given as YAML text (`name` is the file name its errors show)."""
    from .pipeline import check_text as check_yaml

    return check_yaml(_text_argument("check_text", text), _overrides_argument("check_text", overrides),
                      _name_argument("check_text", name))


def _build_arguments(function: str, overrides, seed, weights, mapping) -> dict:
    """The arguments build and build_text share, checked before any work."""
    weights = _weights_argument(function, weights)
    return {"overrides": _overrides_argument(function, overrides), "seed": _seed_argument(function, seed),
            "weights": weights, "mapping": _mapping_argument(function, mapping, weights)}


def build(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None, seed: int = 0, weights=None,
          mapping: str | os.PathLike | None = None):
    """Build the spec at `path` (or the shipped spec of that name) into a torch.fx.GraphModule (a
    fresh, trainable model); `weights` is a checkpoint file or state dict in archspec's naming or
    in one of the spec's mapping files' (`mappings:`); `mapping` is one more mapping file to try
    (see specs/mappings/README.md). A model built for another number of classes than the
    checkpoint's (overrides={"classes": 10}) loads every weight but the classifier, which keeps
    its initialisation, and says so on the `archspec` logger (as timm's num_classes)."""
    from .budget import check_build_memory
    from .pipeline import check_file

    path = _path_argument("build", path)
    args = _build_arguments("build", overrides, seed, weights, mapping)
    report = check_file(path, args.pop("overrides"))
    check_build_memory(report, runs_model=False)
    return _lowered(report, **args)


def _lowered(report, seed: int, weights, mapping, num_classes: int | None = None):
    """The checked spec as a module, with `weights` loaded (archspec/models.py says when the
    classifier was left new; `num_classes`: create_model's); the check's warnings (a node no
    output depends on, ...) go to the `archspec` logger first, as the CLI prints them."""
    from .models import data_cfg, load_checkpoint
    from .pipeline import lower_report

    for warning in report.warnings:  # what `archspec check` prints: a build from Python says it too
        logging.getLogger("archspec").warning("%s", warning.text())
    model = lower_report(report, seed=seed)
    if report.file and os.path.isfile(report.file):  # timm's data config as the spec declares it (pretrained_cfg)
        model.meta["archspec_data_cfg"] = data_cfg(report.file)
    if weights is not None:
        load_checkpoint(model, report, weights, mapping, num_classes)
    return model


def build_text(text: str, overrides: Mapping[str, Any] | None = None, seed: int = 0, weights=None, *,
               name: str = "<spec>", mapping: str | os.PathLike | None = None):
    """`build` for a spec given as YAML text."""
    from .budget import check_build_memory
    from .pipeline import check_text as check_yaml

    text, name = _text_argument("build_text", text), _name_argument("build_text", name)
    args = _build_arguments("build_text", overrides, seed, weights, mapping)
    report = check_yaml(text, args.pop("overrides"), name)
    check_build_memory(report, runs_model=False)
    return _lowered(report, **args)


def list_models(pattern: str = "*") -> list[str]:
    """The names of the shipped specs that match the shell-style `pattern` (fnmatch), sorted, as
    timm.list_models: list_models("swin*") == ["swin_b", "swin_s", "swin_t", "swinv2_t"]."""
    from .models import list_models as shipped

    return shipped(pattern)


def create_model(name_or_path: str | os.PathLike, weights=None, num_classes: int | None = None, **overrides):
    """A model by name, as timm.create_model: the shipped spec `name_or_path` (or the spec file
    at that path) built with `overrides` as its params (like --set), and `weights` (a checkpoint
    file or state dict, as for build) loaded. `num_classes` follows timm: N > 0 builds a
    classifier for N classes (the spec's `classes` param) and loads every weight but the
    classifier, which keeps its initialisation and is named on the `archspec` logger; 0 removes
    the classifier (the model gives pooled features, reset_classifier(0)); None keeps the
    spec's. With num_classes given, a checkpoint without a classifier (timm's num_classes=0
    saves one) loads as well. For a seed or a mapping file, use archspec.build.

    timm's keywords (img_size, in_chans, drop_path_rate, drop_rate, global_pool) set the spec's
    params where the spec declares them (its `timm_args:` key, archspec/models.py): a keyword
    a spec does not declare, or that is no param of it, is a TypeError; pretrained=True a
    ValueError (no hub here: pass weights=). timm's model names go too ("vit_tiny_patch16_224"
    is vit_ti16, as `archspec models` lists them)."""
    from .budget import check_build_memory
    from .models import check_classifier, classes_override, timm_overrides
    from .pipeline import check_file

    path = _path_argument("create_model", name_or_path)
    args = _build_arguments("create_model", timm_overrides("create_model", path, overrides), 0, weights, None)
    report = check_file(path, classes_override("create_model", path, dict(args.pop("overrides")), num_classes) or None)
    check_build_memory(report, runs_model=False)
    model = _lowered(report, **args, num_classes=num_classes)
    check_classifier("create_model", model, path, num_classes)
    return model


def from_pretrained(folder: str | os.PathLike, seed: int = 0):
    """The model a model folder holds (what `model.save_pretrained(DIR)` or `archspec build SPEC
    -o DIR` wrote): the spec beside config.json built with the params recorded there, and
    model.safetensors loaded strictly, in eval mode as Hugging Face's from_pretrained gives it
    (`.train()` to train); a folder whose weights do not fit the spec is a SpecError naming the
    tensor and the spec's node (archspec/pretrained.py)."""
    from .pretrained import from_pretrained as load_folder

    if isinstance(folder, os.PathLike):
        folder = os.fspath(folder)
    if not isinstance(folder, str):
        raise TypeError(f"archspec.from_pretrained: `folder` must be a path (str or os.PathLike), got "
                        f"{type(folder).__name__}")
    return load_folder(folder, _seed_argument("from_pretrained", seed))
