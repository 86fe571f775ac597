"""Reading a checkpoint safely: a state dict given as a mapping, or a file read with
torch.load(weights_only=True) (.pt, .pth, .bin) or safetensors (.safetensors). A state dict
wrapped in a container (`state_dict`, `model`, ...) or saved from DataParallel (`module.`
prefixes) is unwrapped.

Every way a file can be wrong is a SpecError that names the file and the problem: missing,
not a regular file (a FIFO is never opened), empty, unreadable, not a checkpoint (a broken
zip or pickle, a malformed .safetensors header), something other than a mapping (a bare
tensor, a list), names that are not strings, values that are not tensors, What the tensors must be to load into a
model (floating point where the model has floats, finite) is load.py's to check, once the
checkpoint's names are mapped onto the model's: a reference checkpoint may hold tensors its
mapping drops (integer position ids, boolean masks).
"""

from __future__ import annotations

import os
import stat
from typing import Mapping

import torch

from archspec.core.errors import error

CONTAINERS = ("state_dict", "model", "module", "model_state")
MAX_LISTED = 8
SAFE_LOAD_HINT = "archspec reads checkpoints with weights_only=True: tensors and plain containers only"


def source_name(source) -> str:
    """How messages name a checkpoint: its path, or 'the state dict' given in memory."""
    return "the state dict" if isinstance(source, Mapping) else os.fspath(source)


def read_state_dict(source) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors by name; a SpecError naming the file for anything else."""
    name = source_name(source)
    state = dict(source) if isinstance(source, Mapping) else _read_file(os.fspath(source))
    state = _unwrapped(state)
    _check_names(state, name)
    _check_tensors(state, name)
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def _unwrapped(state: dict) -> dict:
    for container in CONTAINERS:
        if isinstance(state.get(container), Mapping):
            state = dict(state[container])
    return state


def _check_names(state: dict, name: str) -> None:
    bad = [k for k in state if not isinstance(k, str)]
    if bad:
        shown = ", ".join(f"{k!r} ({type(k).__name__})" for k in bad[:MAX_LISTED])
        raise error(f"weights: {name}: {len(bad)} key(s) are not names: {shown}",
                    hint="a state dict maps str names (e.g. 'blocks.0.attn.qkv.weight') to tensors")


def _check_tensors(state: dict, name: str) -> None:
    not_tensors = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if not_tensors:
        raise error(f"weights: {name}: not a state dict of tensors ({listing(not_tensors)} "
                    f"{'is not a tensor' if len(not_tensors) == 1 else 'are not tensors'})", hint=SAFE_LOAD_HINT)


def listing(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def _read_file(path: str) -> dict:
    _check_regular_file(path)
    if path.endswith(".safetensors"):
        state = _read_safetensors(path)
    else:
        state = _read_torch(path)
    if not isinstance(state, Mapping):
        raise error(f"weights: {path} holds a {type(state).__name__}, not a state dict",
                    hint="a checkpoint holds a mapping of tensor names to tensors (model.state_dict())")
    return dict(state)


def _check_regular_file(path: str) -> None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise error(f"weights: no such file {path}") from None
    except (OSError, ValueError) as exc:
        raise error(f"weights: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise error(f"weights: {path} is a directory, not a checkpoint file")
    if not stat.S_ISREG(info.st_mode):
        raise error(f"weights: {path} is not a regular file (a pipe, socket or device), not a checkpoint file")
    if info.st_size == 0:
        raise error(f"weights: {path} is empty (0 bytes), not a checkpoint")
    if not os.access(path, os.R_OK):
        raise error(f"weights: cannot read {path}: permission denied")


def _read_torch(path: str):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except MemoryError:
        raise error(f"weights: {path}: not enough memory to read it") from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix
        raise error(f"weights: cannot read {path} safely: {_first_line(exc)}", hint=SAFE_LOAD_HINT) from None


def _read_safetensors(path: str) -> dict:
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise error("weights: reading .safetensors needs the safetensors package",
                    hint="pip install safetensors") from None
    try:
        return load_file(path)
    except MemoryError:
        raise error(f"weights: {path}: not enough memory to read it") from None
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error type for every malformed file
        raise error(f"weights: {path} is not a valid .safetensors file: {_first_line(exc)}",
                    hint="the file may be truncated or not a safetensors file at all") from None


def _first_line(exc: BaseException) -> str:
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return (text or type(exc).__name__)[:300]


__all__ = ["read_state_dict", "source_name", "listing"]
