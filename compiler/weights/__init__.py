"""Weight import: a state dict or checkpoint file in archspec's own naming or in a reference
implementation's naming (timm, Hugging Face transformers, torch.nn.Transformer), mapped
onto a built model. Anything that does not map (missing, unexpected or wrongly shaped
tensors) is an error that names the tensors.

Files are read safely: .pt/.pth/.bin with torch.load(weights_only=True), .safetensors with
safetensors. A mapping is a function from a reference state dict to one in our naming; the
loader tries our own naming and every registered mapping, and keeps the one that fits.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch

from archspec.diagnostics import error

MAPPINGS: dict[str, "ReferenceMapping"] = {}
MAX_LISTED = 8


@dataclass(frozen=True)
class ReferenceMapping:
    name: str  # "timm swin"
    convert: Callable[[dict], dict]  # reference state dict -> ours
    keep: tuple[str, ...] = ()  # regexes of our tensors this reference does not have (keep their init)
    doc: str = ""


def register_mapping(mapping: ReferenceMapping) -> ReferenceMapping:
    if mapping.name in MAPPINGS:
        raise RuntimeError(f"weight mapping {mapping.name!r} is registered twice")
    MAPPINGS[mapping.name] = mapping
    return mapping


# -- helpers for writing mappings ------------------------------------------------------------


def rename(state: dict, rules: list[tuple[str, str]]) -> dict:
    """Rename keys by the first matching (regex, replacement); keys no rule matches stay."""
    out = {}
    compiled = [(re.compile(a), b) for a, b in rules]
    for key, value in state.items():
        for pattern, replacement in compiled:
            new, count = pattern.subn(replacement, key, count=1)
            if count:
                key = new
                break
        out[key] = value
    return out


def fuse(state: dict, pattern: str, parts: tuple[str, ...], fused: str) -> dict:
    """Concatenate tensors named pattern.format(part) along dim 0 into pattern.format(fused).

    Example: fuse(sd, r"(.*)\\.{}\\.weight", ("q_proj", "k_proj", "v_proj"), "qkv").
    """
    regex = re.compile(pattern.replace("{}", f"({'|'.join(map(re.escape, parts))})") + r"\Z")
    groups: dict[str, dict[str, torch.Tensor]] = {}
    out = {}
    for key, value in state.items():
        match = regex.match(key)
        if match is None:
            out[key] = value
            continue
        part = match.group(match.lastindex)
        stem = key[: match.start(match.lastindex)] + "{}" + key[match.end(match.lastindex):]
        groups.setdefault(stem, {})[part] = value
    for stem, found in groups.items():
        if set(found) == set(parts):
            out[stem.format(fused)] = torch.cat([found[p] for p in parts], dim=0)
        else:  # incomplete: leave them, the loader will report them
            out.update({stem.format(p): v for p, v in found.items()})
    return out


def drop(state: dict, patterns: list[str]) -> dict:
    compiled = [re.compile(p) for p in patterns]
    return {k: v for k, v in state.items() if not any(p.search(k) for p in compiled)}


# -- reading -------------------------------------------------------------------------------------


def read_state_dict(source) -> dict[str, torch.Tensor]:
    if isinstance(source, Mapping):
        state = dict(source)
    else:
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise error(f"weights: no such file {path}")
        if path.endswith(".safetensors"):
            try:
                from safetensors.torch import load_file
            except ImportError:
                raise error("weights: reading .safetensors needs the safetensors package",
                            hint="pip install safetensors") from None
            state = load_file(path)
        else:
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix
                raise error(f"weights: cannot read {path} safely: {str(exc).splitlines()[0]}",
                            hint="archspec reads checkpoints with weights_only=True: tensors and plain "
                                 "containers only") from None
    for container in ("state_dict", "model", "module", "model_state"):
        if isinstance(state.get(container), Mapping):
            state = dict(state[container])
    if not all(isinstance(v, torch.Tensor) for v in state.values()):
        bad = [k for k, v in state.items() if not isinstance(v, torch.Tensor)][:MAX_LISTED]
        raise error(f"weights: not a state dict of tensors (e.g. {', '.join(map(str, bad))})")
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


# -- matching --------------------------------------------------------------------------------------


@dataclass
class Fit:
    naming: str
    state: dict
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    wrong_shape: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    @property
    def problems(self) -> int:
        return len(self.missing) + len(self.unexpected) + len(self.wrong_shape)

    def summary(self) -> str:
        text = f"{len(self.state)} tensors in {self.naming} naming"
        if self.kept:
            text += f"; kept initial values of {len(self.kept)} ({_listing(self.kept)})"
        return text


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def _fit(naming: str, state: dict, ours: dict[str, torch.Tensor], keep: tuple[str, ...]) -> Fit:
    fit = Fit(naming, state)
    kept = [re.compile(p) for p in keep]
    for key, value in ours.items():
        if key not in state:
            (fit.kept if any(p.search(key) for p in kept) else fit.missing).append(key)
        elif tuple(state[key].shape) != tuple(value.shape):
            fit.wrong_shape.append(f"{key} {tuple(state[key].shape)} (model has {tuple(value.shape)})")
    fit.unexpected = [k for k in state if k not in ours]
    return fit


def match(state: dict, model: torch.nn.Module) -> Fit:
    """The naming (ours, or a reference's) under which `state` fits `model` best."""
    from . import hf_clip, hf_pvt, timm_pvt, timm_swin, timm_vit, torch_transformer  # noqa: F401

    ours = model.state_dict()
    fits = [_fit("archspec", state, ours, ())]
    for mapping in MAPPINGS.values():
        try:
            converted = mapping.convert(state)
        except (KeyError, RuntimeError, ValueError):
            continue
        fits.append(_fit(mapping.name, converted, ours, mapping.keep))
    return min(fits, key=lambda f: (f.problems, f.naming != "archspec"))


def load_weights(model: torch.nn.Module, source, graph=None) -> Fit:
    state = read_state_dict(source)
    fit = match(state, model)
    if fit.problems:
        parts = []
        if fit.missing:
            parts.append(f"{len(fit.missing)} missing ({_listing(fit.missing)})")
        if fit.unexpected:
            parts.append(f"{len(fit.unexpected)} unexpected ({_listing(fit.unexpected)})")
        if fit.wrong_shape:
            parts.append(f"{len(fit.wrong_shape)} with the wrong shape ({_listing(fit.wrong_shape)})")
        known = ", ".join(["archspec"] + list(MAPPINGS))
        raise error(f"weights do not fit this model (closest naming: {fit.naming}): " + "; ".join(parts),
                    hint=f"namings tried: {known}; was the checkpoint made for this spec and its params?")
    with torch.no_grad():
        for key, value in model.state_dict().items():
            if key in fit.state:
                value.copy_(fit.state[key])
    return fit
