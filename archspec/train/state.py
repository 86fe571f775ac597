"""A training run's state on disk: what --save writes and --resume reads back.

The file is {"model": the model's state dict, "optimizer": the optimizer's state with parameters
named as the model names them, "step": the steps taken}, and "ema" (the weights' moving average,
checked as the model's tensors) where --ema ran; --save DIR/ adds "epoch" and "metric". It is
written whole or not at all: into a temporary file beside the target, then put in place with
os.replace, so a full disk leaves the old file (if any) as it was and no half-written one.

It is read with torch.load(weights_only=True), so it can hold tensors and plain containers only,
never code. Before anything is loaded it is checked against this run's model and optimizer: the
three keys; the model's tensors by name, shape (the first that differs is named with both
shapes, as when the file was saved with other --set sizes), floating point where the model's
are, and finite; the optimizer's per-parameter state for parameters of this model, with the
entries this optimizer keeps (AdamW: step, exp_avg, exp_avg_sq), each floating, finite, of its
parameter's shape (or a scalar), the step and exp_avg_sq not negative; the step reached,
a whole number from 0 to MAX_STEPS. The file's hyperparameters are not taken: the run's --lr,
--weight-decay and the optimizer's defaults are. Every fault is a SpecError naming the file.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Mapping

import torch

from ..core.errors import UsageError, error
from ..core.files import SpecialFile, new_file_mode, open_regular
from .options import MAX_STEPS

KEYS = ("model", "optimizer", "step")
SAVED_BY = "a file that `archspec train --save` wrote"
SAFE_LOAD_HINT = "resume files are read with weights_only=True: tensors and plain containers only"
STATE_ENTRIES = {  # optimizer -> (entries every parameter's state has, entries it may have)
    "adamw": ({"step", "exp_avg", "exp_avg_sq"}, {"step", "exp_avg", "exp_avg_sq"}),
    "sgd": (set(), {"momentum_buffer"}),
}
NOT_NEGATIVE = ("step", "exp_avg_sq")
GROUP_NAMES = ("params", "param_names")  # what a parameter group holds besides its hyperparameters
MAX_LISTED = 4


@dataclass
class Expected:
    """What this run's model and optimizer are: tensors by name (shape, dtype), the parameter
    names of each optimizer group, the groups' hyperparameters, the optimizer's name."""

    tensors: dict[str, tuple[tuple, torch.dtype]]
    parameters: dict[str, tuple]
    groups: list[dict]
    optimizer: str


@dataclass
class Resumed:
    model: dict
    optimizer: dict
    step: int
    ema: dict | None = None  # the weights' moving average, where --ema saved one


# -- writing ----------------------------------------------------------------------------------------


def write_whole(path: str, payload: dict, flag: str) -> None:
    """torch.save(payload) to `path`, whole or not at all; a UsageError when the system refuses."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".partial")
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write into {folder}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(handle, "wb") as f:
            os.fchmod(f.fileno(), new_file_mode())
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        remove_quietly(temporary)
        raise UsageError(f"{flag} {path}: could not write it: {exc.strerror or exc}; nothing was written "
                         f"(a file already there is as it was)") from None
    except BaseException:
        remove_quietly(temporary)
        raise


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# -- reading ----------------------------------------------------------------------------------------


def read_resume(path: str, expected: Expected) -> Resumed:
    """The file's state, checked against `expected`; a SpecError naming the file and the fault."""
    saved = load(path)
    check_layout(saved, path)
    check_model(saved["model"], expected, path)
    optimizer = checked_optimizer(saved["optimizer"], expected, path)
    ema = saved.get("ema")
    if ema is not None:
        if not isinstance(ema, Mapping):
            raise fault(path, f"its 'ema' is a {type(ema).__name__}, not a mapping of names to tensors")
        check_model(ema, expected, path)
    return Resumed(dict(saved["model"]), optimizer, checked_step(saved["step"], path),
                   dict(ema) if ema is not None else None)


def load(path: str):
    if os.path.getsize(path) == 0:
        raise error(f"--resume {path} is empty (0 bytes), not {SAVED_BY}")
    try:
        with open_regular(path) as f:
            return torch.load(f, map_location="cpu", weights_only=True)
    except SpecialFile as exc:
        raise error(f"--resume {path} is not a regular file ({exc}), not {SAVED_BY}") from None
    except MemoryError:
        raise error(f"--resume {path}: not enough memory to read it") from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix
        raise error(f"--resume {path}: cannot read it safely: {first_line(exc)}",
                    hint=f"{SAFE_LOAD_HINT}; give {SAVED_BY}") from None


def first_line(exc: BaseException) -> str:
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return (text or type(exc).__name__)[:300]


def fault(path: str, message: str, hint: str | None = None):
    return error(f"--resume {path}: {message}", hint=hint or f"give {SAVED_BY} for this spec and --set sizes")


def check_layout(saved, path: str) -> None:
    if not isinstance(saved, Mapping):
        raise fault(path, f"holds a {type(saved).__name__}, not the mapping of {', '.join(KEYS)} that --save writes")
    missing = [key for key in KEYS if key not in saved]
    if missing:
        raise fault(path, f"lacks {', '.join(repr(k) for k in missing)} (a resume file maps "
                          f"{', '.join(KEYS)})")
    for key in ("model", "optimizer"):
        if not isinstance(saved[key], Mapping):
            raise fault(path, f"its {key!r} is a {type(saved[key]).__name__}, not a mapping of names to tensors")


def listing(names) -> str:
    names = [str(n) for n in names]
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def shape_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


# -- the model ---------------------------------------------------------------------------------------


def check_model(state: Mapping, expected: Expected, path: str) -> None:
    names = set(expected.tensors)
    missing = [n for n in expected.tensors if n not in state]
    extra = [n for n in state if n not in names]
    if missing or extra:
        parts = [f"lacks {len(missing)} of this model's tensors ({listing(missing)})"] * bool(missing) + \
                [f"has {len(extra)} this model lacks ({listing(extra)})"] * bool(extra)
        raise fault(path, f"its model state {' and '.join(parts)}",
                    hint="was it saved from another spec or with other --set sizes? Resume with the same ones")
    for name, (shape, dtype) in expected.tensors.items():
        check_tensor(state[name], f"model tensor {name}", shape, dtype, path)


def check_tensor(value, what: str, shape: tuple | None, dtype: torch.dtype, path: str) -> None:
    """A tensor of `shape` (None: any shape), floating where `dtype` is (else exactly `dtype`), finite."""
    if not isinstance(value, torch.Tensor):
        raise fault(path, f"{what} is a {type(value).__name__}, not a tensor")
    if value.layout != torch.strided:
        raise fault(path, f"{what} is stored as a {str(value.layout).replace('torch.', '')} tensor, not a dense one")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise fault(path, f"{what} is {shape_text(value.shape)} in the file and {shape_text(shape)} in this model",
                    hint="was it saved with other --set sizes? Resume with the sizes it was saved with")
    floating = dtype.is_floating_point
    if (value.is_floating_point() != floating) or value.is_complex() or (not floating and value.dtype != dtype):
        kind = "floating-point" if floating else str(dtype).replace("torch.", "")
        raise fault(path, f"{what} holds {str(value.dtype).replace('torch.', '')} values where this model has "
                          f"{kind} ones; it is not cast")
    if floating and not bool(torch.isfinite(value.to(dtype)).all()):  # in the model's dtype: 1e300 is inf
        raise fault(path, f"{what} holds NaN or infinite values",
                    hint="a run that diverged saved it; resume from an earlier file or start afresh")


# -- the optimizer -------------------------------------------------------------------------------------


def checked_optimizer(state: Mapping, expected: Expected, path: str) -> dict:
    """The optimizer state to load: the file's per-parameter state (checked) with this run's groups."""
    per_parameter, groups = state.get("state"), state.get("param_groups")
    if not isinstance(per_parameter, Mapping) or not isinstance(groups, (list, tuple)):
        raise fault(path, "its optimizer state is not the mapping of 'state' and 'param_groups' --save writes")
    check_groups(groups, expected, path)
    for name, entries in per_parameter.items():
        check_parameter_state(name, entries, expected, path)
    ours = [{**group, "params": list(group["params"])} for group in expected.groups]
    return {"state": {name: dict(entries) for name, entries in per_parameter.items()}, "param_groups": ours}


def check_groups(groups, expected: Expected, path: str) -> None:
    if len(groups) != len(expected.groups):
        raise fault(path, f"its optimizer has {len(groups)} parameter group(s); this run's has "
                          f"{len(expected.groups)}")
    for index, (theirs, ours) in enumerate(zip(groups, expected.groups)):
        if not isinstance(theirs, Mapping):
            raise fault(path, f"its optimizer's parameter group {index} is a {type(theirs).__name__}, not a mapping")
        settings = {k for k in theirs if k not in GROUP_NAMES}
        if settings != {k for k in ours if k not in GROUP_NAMES}:
            raise fault(path, f"its optimizer state was written by another optimizer than this run's "
                              f"{expected.optimizer} (its settings: {listing(sorted(map(str, settings)))})",
                        hint="resume with the --optimizer the file was saved with")
        if list(theirs.get("params", ())) != list(ours["params"]):
            raise fault(path, f"its optimizer's parameter group {index} holds other parameters than this model's")


def check_parameter_state(name, entries, expected: Expected, path: str) -> None:
    if name not in expected.parameters:
        raise fault(path, f"its optimizer state names a parameter this model lacks: {name!r}")
    if not isinstance(entries, Mapping):
        raise fault(path, f"its optimizer state for {name} is a {type(entries).__name__}, not a mapping")
    required, allowed = STATE_ENTRIES[expected.optimizer]
    keys = set(entries)
    if not required <= keys <= allowed:
        raise fault(path, f"its optimizer state for {name} holds {listing(sorted(map(str, keys)))}; "
                          f"{expected.optimizer} keeps {listing(sorted(allowed))}",
                    hint="resume with the --optimizer the file was saved with")
    shape = expected.parameters[name]
    for key, value in entries.items():
        what = f"optimizer state {key} of {name}"
        scalar = isinstance(value, torch.Tensor) and value.dim() == 0
        check_tensor(value, what, None if scalar else shape, torch.float32, path)
        if key in NOT_NEGATIVE and bool((value < 0).any()):
            raise fault(path, f"{what} is negative")


def checked_step(step, path: str) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEPS:
        raise fault(path, f"its step is {step!r}; the step a run reached is a whole number from 0 to {MAX_STEPS:,}")
    return step
