"""Compiled decode steps kept on disk: generate(compile=True) pays the compile (tens of
seconds) once per model, weights, batch and cache length on a machine, not once per process,
and generate()'s default (compile=None) runs its decode steps through a kept program when one
fits the call (eagerly otherwise); compile=False never reads one.

The folder is $ARCHSPEC_CACHE, else $XDG_CACHE_HOME/archspec, else ~/.cache/archspec, and the
programs lie in its decode-steps/; ARCHSPEC_CACHE=off keeps and reads nothing. A program holds
the weights it was made from (frozen, compiled.py), so it is found by everything that made it:

    the code       each .py file of archspec (the step, the modules, the kernels), torch's and
                   Python's versions
    the model      each module's path, class and constructor arguments (what the standalone
                   model.py is written from), the graph code of the model and its groups
    the machine    the CPU's model name and flags (its vector extensions)
    the weights    every parameter's and buffer's name, dtype, shape, device and bytes (BLAKE2b),
                   and each module's train or eval mode
    the call       batch, cache slots and torch's thread count

The first three name a folder, looked for first: the weights are hashed (about 1.3 s a GB
here) only where a folder for this code, model and machine exists, so a model never compiled
costs generate() a directory lookup. Not seen: a module changed by hand after the build (an
attribute set on it), and weights written through `.data` after the digest was taken (torch
counts no change there, and the digest is kept while weights_key stays); build the model again
instead. A program is written beside its place and renamed into it, so a killed process leaves
no half file and two that make the same one leave one of theirs. The folder keeps at most $ARCHSPEC_CACHE_GB (20 by default) of programs: past
that, those used longest ago are removed.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn as nn

from archspec.core.isa import read_isa

FOLDER = "decode-steps"
DEFAULT_GB = 20.0


def cache_root() -> Path | None:
    """The cache folder, or None when ARCHSPEC_CACHE=off."""
    chosen = os.environ.get("ARCHSPEC_CACHE")
    if chosen is not None:
        return None if chosen.strip().lower() in ("off", "0", "none", "") else Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "archspec"


def limit_bytes() -> int:
    try:
        gb = float(os.environ.get("ARCHSPEC_CACHE_GB", DEFAULT_GB))
    except ValueError:
        gb = DEFAULT_GB
    return int(max(gb, 0.0) * 1e9)


@lru_cache(maxsize=1)
def code_digest() -> str:
    """archspec's own code: every .py file under the package (its compiler and specs folders too), by path."""
    here = Path(__file__).resolve().parents[1]  # compiler/
    package = here.parent / "archspec"  # a checkout: archspec/compiler links to ../compiler
    if not package.is_dir():  # installed: this is archspec/compiler/
        package = here.parent
    digest = hashlib.blake2b(digest_size=16)
    for folder, dirs, files in os.walk(package, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = Path(folder) / name
            digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@lru_cache(maxsize=1)
def machine_text() -> str:
    isa = read_isa()
    flags = " ".join(sorted(isa.flags)) if isa.flags is not None else "unknown flags"
    return f"{isa.cpu}|{flags}|{platform.machine()}"


def model_text(model: nn.Module) -> str:
    """What the model computes, short of its weights: each module's path, class and constructor
    arguments, each graph module's code, and shared modules (one object under two paths)."""
    lines, seen = [], {}
    for path, module in model.named_modules(remove_duplicate=False):
        if id(module) in seen:
            lines.append(f"{path} is {seen[id(module)]}")
            continue
        seen[id(module)] = path
        cls = type(module)
        args = getattr(module, "_archspec_args", None)
        lines.append(f"{path}: {cls.__module__}.{cls.__qualname__}({args!r})")
        if isinstance(module, torch.fx.GraphModule):
            lines.append(module.code)
    return "\n".join(lines)


def weights_digest(model: nn.Module) -> str:
    """Every parameter's and buffer's name, dtype, shape, device and bytes, and which share a tensor."""
    digest = hashlib.blake2b(digest_size=16)
    first: dict[tuple, str] = {}
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    for name, tensor in named:
        where = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|{tensor.device}".encode())
        if where in first and tensor.numel():
            digest.update(f" is {first[where]}\n".encode())
            continue
        first[where] = name
        data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)  # its bytes
        digest.update(memoryview(data.numpy()))
    return digest.hexdigest()


class KeptSteps:
    """The kept programs of one model (model_text and the machine: `folder`), by weights, batch
    and cache slots. The weights' digest is kept while the model's weights_key stays the same."""

    def __init__(self, model: nn.Module, root: Path):
        key = hashlib.blake2b(digest_size=16)
        for part in (code_digest(), torch.__version__, sys.version, machine_text(), model_text(model)):
            key.update(part.encode() + b"\0")
        self.model, self.root = model, root / FOLDER
        self.folder = self.root / key.hexdigest()
        self.weights: tuple[object, str] | None = None  # (weights_key, digest)

    def path(self, batch: int, slots: int, threads: int, weights_key) -> Path:
        return self.folder / f"{self.digest(weights_key)}-t{threads}-b{batch}-s{slots}.pt2"

    def find(self, batch: int, slots: int, threads: int, weights_key) -> Path | None:
        """The kept program for this call, or None; a directory lookup when this model has none."""
        if not self.folder.is_dir():
            return None
        path = self.path(batch, slots, threads, weights_key)
        if not path.is_file():
            return None
        try:
            os.utime(path)  # used now: the last to be removed
        except OSError:  # a folder this user may read but not write
            pass
        return path

    def digest(self, weights_key) -> str:
        """The weights' digest and each module's train/eval mode (both in weights_key, whose change makes it again)."""
        if self.weights is None or self.weights[0] != weights_key:
            modes = "".join("t" if m.training else "e" for m in self.model.modules())
            self.weights = (weights_key, hashlib.blake2b(f"{weights_digest(self.model)}|{modes}".encode(),
                                                         digest_size=16).hexdigest())
        return self.weights[1]

    def keep(self, made: str, place: Path) -> Path:
        """Move the program file `made` into `place` (a rename within the folder), then trim the folder."""
        place.parent.mkdir(parents=True, exist_ok=True)
        partial = place.with_name(f".{place.name}.{os.getpid()}.partial")
        shutil.move(made, partial)  # a rename, or a copy from another file system
        os.replace(partial, place)
        trim(self.root, limit_bytes(), keep=place)
        return place


def trim(root: Path, limit: int, keep: Path) -> None:
    """Remove the programs used longest ago until the folder holds at most `limit` bytes (never `keep`)."""
    files = []
    for path in root.glob("*/*.pt2"):
        try:
            info = path.stat()
        except OSError:  # removed by another process meanwhile
            continue
        files.append((info.st_mtime, info.st_size, path))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files, key=lambda f: f[0]):
        if total <= limit:
            return
        if path == keep:
            continue
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
