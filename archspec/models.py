"""Models by name: the shipped specs as timm's models are, by name (floor 6, the face).

    archspec.list_models("swin*")                  ['swin_b', 'swin_s', 'swin_t']
    archspec.check("swin_t")                       the shipped specs/swin_t.yaml
    archspec.create_model("vit_ti16", weights="vit_tiny.pth", num_classes=10)
    archspec check swin_t                          the same on the command line
    archspec models [PATTERN]                      name, params, input and paper of each

A name is a shipped spec's file name without `.yaml` (core/shipped.py says where they are).
What a command or function is given is a path first: a name is looked up among the shipped
specs only when no such file exists (and the command line says which spec it used). A name
that is neither is an error naming the closest shipped names.

This module holds what the API (archspec/__init__.py) and the command line share: resolving a
name, the error for an unknown one, a shipped spec's description (`archspec models`), the
`num_classes` override of create_model and loading a checkpoint with a word on the classifier.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

from .core.errors import UsageError
from .core.shipped import (closest_names, header_comment, looks_like_a_name, shipped_folder, shipped_names,
                           shipped_spec)
from .language.param_types import TIMM_KEYWORDS as PARAM_KEYWORDS

LOG = logging.getLogger("archspec")
CLASSES = "classes"  # the param a shipped classifier's class count is (`classes: ${classes}`)


# -- names ---------------------------------------------------------------------------------------
def resolve_spec(text: str) -> tuple[str, bool] | None:
    """(path, shipped) for what `text` names: the file at that path when there is one, else the
    shipped spec of that name (shipped=True); None when it is neither. A folder is not a spec
    file: a shipped name wins over a folder of the same name. The reference model's timm name
    (`archspec models`' last column: vit_tiny_patch16_224) is the shipped spec's too."""
    if os.path.exists(text) and not os.path.isdir(text):
        return text, False
    shipped = shipped_spec(text)
    if shipped is None and looks_like_a_name(text) and not os.path.exists(text):
        alias = reference_names().get(text)  # timm's name for it: vit_tiny_patch16_224 is vit_ti16
        shipped = shipped_spec(alias) if alias is not None else example_spec(text)
    if shipped is not None:
        return shipped, True
    return (text, False) if os.path.exists(text) else None


def example_spec(name: str) -> str | None:
    """The path of the example spec (specs/examples/) called `name`, when there is one: examples
    go by name too (`archspec check tiny_lm`), after the shipped specs."""
    if not looks_like_a_name(name) or name.startswith("."):
        return None
    path = os.path.join(shipped_folder(), "examples", name + ".yaml")
    return path if os.path.isfile(path) else None


def not_found(text: str, lister: str) -> str:
    """The one-line error for `text`, neither a file nor a shipped spec's name; `lister` says
    what lists the shipped names (`archspec models`, `archspec.list_models()`)."""
    if not looks_like_a_name(text):
        stem = os.path.splitext(os.path.basename(text))[0]
        if text.endswith((".yaml", ".yml")) and shipped_spec(stem) is not None:
            return f"no such file: {text}; the shipped spec of that name is given by its name alone: {stem}"
        return f"no such file: {text}"
    close = closest_names(text)
    hint = f"did you mean {alternatives(close)}? " if close else ""
    return f"no such file or shipped spec: {text}; {hint}{lister} lists the shipped specs"


def alternatives(names: list[str]) -> str:
    """`a`, `a or b`, `a, b or c`."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def shipped_line(text: str, path: str) -> str:
    """What a command says when `text` was taken for the shipped spec at `path`."""
    what = "example" if os.path.basename(os.path.dirname(path)) == "examples" else "shipped spec"
    return f"{text}: the {what} {path}"


def list_models(pattern: str = "*") -> list[str]:
    """The names of the shipped specs matching the shell-style `pattern` (fnmatch), sorted."""
    if not isinstance(pattern, str):
        raise TypeError(f"archspec.list_models: `pattern` must be a str such as 'swin*', got {type(pattern).__name__}")
    return shipped_names(pattern)


# -- describing a shipped spec (`archspec models`) ------------------------------------------------
@dataclass(frozen=True)
class ModelInfo:
    """A shipped spec as `archspec models` lists it."""

    name: str
    path: str
    params: int | None  # None: the spec does not check (error says why)
    inputs: str
    paper: str | None
    same_as: str | None  # the reference implementation it is the same network as
    error: str | None = None

    def record(self) -> dict:
        return {"name": self.name, "path": self.path, "params": self.params, "inputs": self.inputs,
                "paper": self.paper, "same_as": self.same_as, "error": self.error}


def describe(name: str) -> ModelInfo:
    """The shipped spec `name` checked (params, inputs) and its header comment's references."""
    from .core.errors import SpecError
    from .pipeline import check_file

    path = shipped_spec(name)
    paper, same_as = references(header_comment(path))
    parent = extended_spec(path)
    if paper is None and parent is not None:  # a sibling made small (vit_ti16 of vit_b16): its parent's paper
        paper = references(header_comment(parent))[0]
    try:
        report = check_file(path)
    except SpecError as exc:
        return ModelInfo(name, path, None, "", paper, same_as, exc.diagnostics[0].message)
    inputs = ", ".join(f"{k} {t.describe()}" for k, t in report.inputs.items())
    return ModelInfo(name, path, report.params, inputs, paper, same_as)


def extended_spec(path: str) -> str | None:
    """The spec file a shipped spec extends (its top-level `extends:`), when it is one beside it."""
    with open(path, encoding="utf-8") as f:
        found = re.search(r"^extends:\s*([\w.-]+\.yaml)\s*$", f.read(), re.M)
    parent = os.path.join(os.path.dirname(path), found.group(1)) if found else None
    return parent if parent is not None and os.path.isfile(parent) else None


PAPER = re.compile(r"\(([^()]*?(?: et al\.| and [A-Z][\w-]*),[^()]*?\d{4})\)")  # 'Liu et al.,' or 'Wang and Komatsuzaki,'
WITH = re.compile(r"\s+(with [^:;()]*?)(?=[:;(]|\.\s|\.$|$)")
SAME_AS = re.compile(r"(timm's|transformers') ([A-Za-z_][\w.]*)|(torch\.nn\.[A-Za-z]\w*)|(microsoft/\w+)")


def references(header: str) -> tuple[str | None, str | None]:
    """(paper, reference implementation) as a shipped spec's header comment states them:
    `(Liu et al., ICCV 2021)` and `timm's swin_tiny_patch4_window7_224`; None where it does not."""
    paper, same = PAPER.search(header), SAME_AS.search(header)
    same_as = None
    if same is not None:
        owner = {"timm's": "timm", "transformers'": "transformers"}.get(same.group(1))
        same_as = f"{owner} {same.group(2)}" if owner else same.group(3) or same.group(4)
        resized = WITH.match(header, same.end())  # a sibling made small: the reference resized
        same_as += f" {resized.group(1).strip()}" if resized and "=" in resized.group(1) else ""
    return (citation(paper.group(1)) if paper else None), same_as


def citation(text: str) -> str:
    """`Liu et al., ICCV 2021` out of the parenthesis that holds it (quoted titles and the
    parts before or after a `;` that cite no one left out)."""
    cited = next(part for part in text.split(";") if "et al." in part or " and " in part)
    cited = re.sub(r'"[^"]*",\s*', "", cited)
    return " ".join(cited.split())


# -- create_model ---------------------------------------------------------------------------------
def classes_override(function: str, path: str, overrides: dict, num_classes) -> dict:
    """`overrides` with timm's `num_classes` as the spec's `classes` param (N > 0; 0 keeps the
    spec's classes and create_model removes the classifier after loading). A TypeError for a
    num_classes that is not a whole number, a UsageError for one below 0, for both num_classes
    and `classes`, or for a spec without a `classes` param."""
    if num_classes is None:
        return overrides
    if isinstance(num_classes, bool) or not isinstance(num_classes, int):
        raise TypeError(f"archspec.{function}: `num_classes` must be an int, got {type(num_classes).__name__}")
    if num_classes < 0:
        raise UsageError(f"archspec.{function}: `num_classes` must be 0 (no classifier: pooled features) or more, "
                         f"got {num_classes}")
    if CLASSES in overrides:
        raise UsageError(f"archspec.{function}: give num_classes or {CLASSES}=, not both")
    names = spec_param_names(path)
    if CLASSES not in names:
        raise UsageError(f"archspec.{function}: `num_classes` sets the spec's `{CLASSES}` param, and {path} has none "
                         f"(its params: {', '.join(names) or 'none'}); it has no classifier to size")
    return {**overrides, CLASSES: num_classes} if num_classes > 0 else overrides


def spec_param_names(path: str) -> list[str]:
    """The params a spec file declares (those it extends included)."""
    from .language.compose import compose
    from .language.loader import load_file

    params = compose(load_file(path)).data.get("params")
    return list(params) if isinstance(params, dict) else []


def check_classifier(function: str, model, path: str, num_classes) -> None:
    """With num_classes given: the built model's classifier has that many classes (0: the
    classifier is removed, as timm's reset_classifier(0)). A model without a classifier head
    (a head written from other words: LeViT's BatchNorm and linear) takes N > 0 through its
    `classes` param alone, and a UsageError for 0."""
    if num_classes is None:
        return
    if model.facts.head is None and num_classes > 0:  # the `classes` param was set (classes_override): its word
        return  # (the EfficientViT trial: levit_128s's BatchNorm-and-linear head refused num_classes=10)
    if model.facts.head is None:
        raise UsageError(f"archspec.{function}: `num_classes=0` removes a classifier head (a head of kind classify "
                         f"or distilled that the model returns), and {path} has none: its `{CLASSES}` param sets "
                         "its classes (num_classes > 0)")
    if num_classes == 0:
        model.reset_classifier(0)
    elif model.num_classes != num_classes:
        raise UsageError(f"archspec.{function}: {path}'s classifier does not read its `{CLASSES}` param "
                         f"({model.num_classes} classes after {CLASSES}={num_classes}); set its head's classes")


def load_checkpoint(model, report, weights, mapping=None, num_classes: int | None = None):
    """Load `weights` into `model` (compiler/weights/load.py); when the classifier was left at
    its initialisation (another number of classes than the checkpoint's), or the load warns
    (learned tensors dropped, the mapping file given not used), say so on the `archspec` logger
    (a line each on stderr unless logging is set up otherwise); what loaded, at INFO. With create_model's
    `num_classes` given, a checkpoint without a classifier loads too (timm's way): N > 0 leaves
    the classifier new and says so; 0 removes it afterwards (nothing to say). The Fit."""
    from .compiler.weights.load import load_weights

    fit = load_weights(model, weights, report.graph, [mapping] if mapping is not None else [],
                       classifier_may_be_absent=num_classes is not None)
    note = [fit.classifier_note] if fit.classifier_note and num_classes != 0 else []
    LOG.info("archspec: weights: %s", fit.summary())  # what `archspec build --weights` prints (the Starcoder2 trial)
    for said in note + fit.warnings:
        LOG.warning("archspec: weights: %s", said)
    return fit


# -- timm's keywords and model names (create_model) -------------------------------------------------
# timm.create_model's keywords that archspec.create_model takes where a spec declares them, in its
# `timm_args:` key (archspec/language/param_types.py; inherited key by key through `extends:`):
#     timm_args: {img_size: img, num_classes: classes, drop_path_rate: drop_path, in_chans: {fixed: 3}}
# a string value names the param the keyword sets; {fixed: VALUE} says the spec is built for that
# value only, with no param for it (in_chans: {fixed: 3}: three channels; the keyword is accepted
# at that value alone, any other is a ValueError).
TIMM_KEYWORDS = PARAM_KEYWORDS + ("pretrained",)


def composed_section(path: str, key: str) -> dict:
    """A top-level mapping of a spec file, those of the specs it extends laid under it."""
    from .language.compose import compose
    from .language.loader import load_file

    found = compose(load_file(path)).data.get(key)
    return found if isinstance(found, dict) else {}


def timm_args(path: str) -> dict:
    """{timm keyword: the param it sets (str) or {"fixed": the value the spec is built for}}."""
    return composed_section(path, "timm_args")


def check_param_values(function: str, path: str, values: dict) -> None:
    """A ValueError for a value a param's `param_types:` entry does not allow (with a did-you-mean)."""
    from .language.param_types import value_problem
    from .language.schema import ParamType

    declared = composed_section(path, "param_types")
    for name, value in values.items():
        if isinstance(declared.get(name), dict) and not (isinstance(value, str) and "${" in value):
            try:
                kind = ParamType.model_validate(declared[name])
            except ValueError:
                continue  # the spec's own error, reported when it is checked
            problem = value_problem(name, value, kind)
            if problem is not None:
                raise ValueError(f"archspec.{function}: {name}={value!r}: {problem[0]}"
                                 + (f" ({problem[1]})" if problem[1] else ""))


def data_cfg(path: str) -> dict:
    """What a spec file's `pretrained_cfg:` key declares of timm's data config (mean, std,
    interpolation, crop_pct: its reference model's), mean and std as tuples as timm gives them;
    the model's pretrained_cfg (compiler/model.py) adds the input size and timm's defaults."""
    cfg = composed_section(path, "pretrained_cfg")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items()}


def reference_names() -> dict[str, str]:
    """{timm model name: shipped spec name} for the shipped specs whose header says they are the
    same network as a timm model (`archspec models`' last column), not a resized one (`with ...`)."""
    names = {}
    for name in shipped_names():
        same_as = references(header_comment(shipped_spec(name)))[1]
        if same_as and re.fullmatch(r"timm [a-z][a-z0-9_.]*", same_as):  # a model's name, not a class's
            names.setdefault(same_as[len("timm "):], name)
    return names


def timm_overrides(function: str, path: str, overrides: dict) -> dict:
    """`overrides` (create_model's keywords but num_classes and weights) as the spec's params: a
    spec param by its own name, or one of timm's keywords that the spec declares (timm_args).
    A TypeError for a keyword that is neither, a ValueError for a value the spec cannot take."""
    table, params = timm_args(path), spec_param_names(path)
    spec = os.path.splitext(os.path.basename(path))[0]
    out = {}
    for key, value in overrides.items():
        if key == "pretrained":
            if value is True:
                raise ValueError(f"archspec.{function}: pretrained=True: archspec has no model hub and downloads no "
                                 f"weights; pass a checkpoint you have (a timm or Hugging Face state dict, or its file) "
                                 f"as weights=..., e.g. timm.create_model(name, pretrained=True).state_dict()")
            if value is not False and value is not None:
                raise TypeError(f"archspec.{function}: `pretrained` must be False (no hub here), got {value!r}")
            continue
        if key in TIMM_KEYWORDS and key not in params:
            if key not in table:
                takes = ", ".join(k for k in TIMM_KEYWORDS if k in table or k in ("num_classes", "pretrained"))
                raise TypeError(f"archspec.{function}: timm's keyword `{key}` does not apply to {spec}: its spec "
                                f"declares no param for it (of timm's keywords it takes {takes}; its own params: "
                                f"{', '.join(params) or 'none'})")
            target = table[key]
            value = _timm_value(function, spec, key, value)
            if isinstance(target, dict) and set(target) == {"fixed"}:
                if value != target["fixed"]:
                    raise ValueError(f"archspec.{function}: {key}={value!r}: {spec} is built for {key}="
                                     f"{target['fixed']!r} only (its spec has no param for it)")
                continue
            if not isinstance(target, str):
                raise TypeError(f"archspec.{function}: {spec}'s timm_args line maps `{key}` to {target!r}; "
                                f"a param's name or {{fixed: VALUE}} was expected")
            if target not in params:
                raise TypeError(f"archspec.{function}: timm's keyword `{key}` is declared to set `{target}`, which "
                                f"{spec} has no param of (its params: {', '.join(params) or 'none'})")
            key = target
        elif key not in params:
            raise TypeError(f"archspec.{function}() got an unexpected keyword argument '{key}': {spec} has no param "
                            f"of that name (its params: {', '.join(params) or 'none'}) and it is not one of timm's "
                            f"keywords that the spec declares ({', '.join(table) or 'none'})")
        if key in out:
            raise TypeError(f"archspec.{function}: the param `{key}` is given twice (by its name and by timm's keyword)")
        out[key] = value
    check_param_values(function, path, out)
    return out


def _timm_value(function: str, spec: str, key: str, value):
    """timm's spelling of a value as a spec param takes it: img_size (h, w) with h == w as one int."""
    if key == "img_size" and isinstance(value, (tuple, list)):
        if len(value) != 2 or value[0] != value[1]:
            raise ValueError(f"archspec.{function}: img_size={tuple(value)}: {spec} takes square images only; "
                             f"give one int")
        value = value[0]
    return value
