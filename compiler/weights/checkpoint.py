"""Reading a checkpoint safely: a state dict given as a mapping, or a file read with
torch.load(weights_only=True) (.pt, .pth, .bin) or safetensors (.safetensors). A state dict
wrapped in a container (`state_dict`, `model`, ...) or saved from DataParallel (`module.`
prefixes) is unwrapped.

Every way a file can be wrong is a SpecError that names the file and the problem: missing,
not a regular file (a FIFO is never opened), empty, unreadable, not a checkpoint (a broken
zip or pickle, a malformed .safetensors header), something other than a mapping (a bare
tensor, a list), names that are not strings, values that are not tensors. What the tensors
must be to load into a model (floating point where the model has floats, finite) is load.py's
to check, once the checkpoint's names are mapped onto the model's: a reference checkpoint may
hold tensors its mapping drops (integer position ids, boolean masks).

Memory, judged before anything is read (`_check_unpacked_size`): a checkpoint is read whole, so
the bytes it unpacks to must fit the memory a build may use (archspec/core/memory.py:
ARCHSPEC_MAX_BUILD_BYTES, else the memory available). A .pt saved by torch.save is a zip whose
entries torch stores uncompressed, but torch.load also inflates deflated entries: a 1 MB zip of
zeros can declare 1 GiB. So the zip's central directory is read first (zipfile; no entry is
inflated) and the checkpoint is refused when
  - the entries' declared unpacked sizes add up to more than the budget (torch allocates each
    entry at its declared size, and never writes more: a stream that inflates past it is an error);
  - an entry declares more than MAX_RATIO times its compressed size and more than RATIO_FLOOR
    bytes: real weights do not compress like that (deflate manages about 1.1:1 on float32), zeros do;
  - an entry's declared sizes cannot be true: its data reaches past the end of the file, or a
    stored (uncompressed) entry declares an unpacked size other than its stored size.
A zip that zipfile cannot read is refused too (torch's reader could otherwise see entries these
checks did not). Other files are not compressed: a legacy (non-zip) pickle's storages are read
from the file (torch allocates a storage at its declared size but touches only the bytes the
file holds, and a short file is an error), and safetensors checks that its header's tensor
extents tile the file exactly; for both, the file's size is what must fit the budget.
"""

from __future__ import annotations

import os
import zipfile
from typing import Mapping

import torch

from archspec.core.errors import error
from archspec.core.files import SpecialFile, file_problem, open_regular
from archspec.core.memory import MAX_BUILD_BYTES, available_bytes, human

CONTAINERS = ("state_dict", "model", "module", "model_state")
MAX_LISTED = 8
SAFE_LOAD_HINT = "archspec reads checkpoints with weights_only=True: tensors and plain containers only"
ZIP_MAGIC = b"PK\x03\x04"  # what torch.load looks for to read a file as a zip archive
MAX_RATIO = 100  # an entry may unpack to at most this many times its compressed size ...
RATIO_FLOOR = 16 << 20  # ... once it unpacks to more than this (small buffers of zeros are fine)


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
    not_dense = [f"{k} ({'quantized' if v.is_quantized else str(v.layout).replace('torch.', '')})"
                 for k, v in state.items() if v.layout != torch.strided or v.is_quantized]
    if not_dense:
        raise error(f"weights: {name}: {listing(not_dense)} {'is' if len(not_dense) == 1 else 'are'} not stored "
                    f"as dense tensors", hint="save the weights dense: {k: v.to_dense() for k, v in state.items()}")


def listing(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def _read_file(path: str) -> dict:
    _check_regular_file(path)
    _check_unpacked_size(path)
    if path.endswith(".safetensors"):
        state = _read_safetensors(path)
    else:
        state = _read_torch(path)
    if not isinstance(state, Mapping):
        raise error(f"weights: {path} holds a {type(state).__name__}, not a state dict",
                    hint="a checkpoint holds a mapping of tensor names to tensors (model.state_dict())")
    return dict(state)


def _check_regular_file(path: str) -> None:
    problem = file_problem(path)
    if problem is not None:
        kind, words = problem
        if kind == "missing":
            raise error(f"weights: no such file {path}")
        raise error(f"weights: {path} {words}" + (", not a checkpoint file" if kind == "folder" else ""))
    if os.path.getsize(path) == 0:
        raise error(f"weights: {path} is empty (0 bytes), not a checkpoint")


def _check_unpacked_size(path: str) -> None:
    """A SpecError, before anything is inflated or loaded, when the checkpoint would unpack to more
    memory than a build may use, or its archive declares what cannot be true or unpacks like a zip
    bomb (module docstring)."""
    entries = _zip_entries(path) if _is_zip(path) else None
    if entries is None:
        unpacked, what = os.path.getsize(path), "reading it takes"
    else:
        unpacked, what = sum(entry.file_size for entry in entries), "its archive's entries declare"
    have = available_bytes()
    if have is not None and unpacked > have:
        raise error(f"weights: {path}: {what} {human(unpacked)} ({unpacked:,} bytes) once unpacked, more than "
                    f"the {human(have)} of memory a build may use",
                    hint=f"use a checkpoint made for this model, or set {MAX_BUILD_BYTES} to allow more")
    for entry in entries or ():
        _check_ratio(path, entry)


def _is_zip(path: str) -> bool:
    """Whether torch.load would read `path` as a zip archive (it starts with a zip entry)."""
    if path.endswith(".safetensors"):
        return False
    try:
        with open_regular(path) as f:
            return f.read(len(ZIP_MAGIC)) == ZIP_MAGIC
    except SpecialFile as exc:
        raise error(f"weights: {path} is not a regular file ({exc})") from None
    except OSError as exc:
        raise error(f"weights: cannot read {path}: {exc.strerror or exc}") from None


def _zip_entries(path: str) -> list[zipfile.ZipInfo]:
    """The archive's entries as its central directory declares them, each checked to be possible;
    nothing is inflated."""
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise error(f"weights: cannot read {path} safely: it starts as a zip archive (what torch.save writes) but "
                    f"its directory cannot be read ({_first_line(exc)})",
                    hint="the file may be truncated or not a checkpoint") from None
    size = os.path.getsize(path)
    for entry in entries:
        _check_declared_sizes(path, entry, size)
    return entries


def _check_declared_sizes(path: str, entry: zipfile.ZipInfo, size: int) -> None:
    """An archive entry whose declared sizes cannot be true."""
    name, unpacked, stored = entry.filename, entry.file_size, entry.compress_size
    if entry.header_offset + stored > size:
        raise error(f"weights: {path}: archive entry {name!r} declares {stored:,} bytes of data that reach "
                    f"past the end of the file ({size:,} bytes)", hint="the file is truncated or was altered")
    if entry.compress_type == zipfile.ZIP_STORED and unpacked != stored:
        raise error(f"weights: {path}: archive entry {name!r} is stored uncompressed yet declares {unpacked:,} "
                    f"bytes unpacked from {stored:,}", hint="the file was altered; save it again with torch.save")


def _check_ratio(path: str, entry: zipfile.ZipInfo) -> None:
    """An archive entry that unpacks like a zip bomb (far more than real weights would)."""
    unpacked, stored = entry.file_size, entry.compress_size
    if unpacked > RATIO_FLOOR and unpacked > MAX_RATIO * max(stored, 1):
        raise error(f"weights: {path}: archive entry {entry.filename!r} declares {human(unpacked)} "
                    f"({unpacked:,} bytes) unpacked from {human(stored)} compressed (over {MAX_RATIO}:1): tensors "
                    "of weights do not compress like that, so it is refused as a zip bomb",
                    hint="torch.save stores tensors uncompressed: save the state dict again with torch.save")


def _read_torch(path: str):
    try:
        with open_regular(path) as f:
            return torch.load(f, map_location="cpu", weights_only=True)
    except SpecialFile as exc:
        raise error(f"weights: {path} is not a regular file ({exc})") from None
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
    from ..safetensors_file import file_metadata, with_aliases

    try:
        return with_aliases(load_file(path), file_metadata(path))  # tied names put back (safetensors_file.py)
    except MemoryError:
        raise error(f"weights: {path}: not enough memory to read it") from None
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error type for every malformed file
        raise error(f"weights: {path} is not a valid .safetensors file: {_first_line(exc)}",
                    hint="the file may be truncated or not a safetensors file at all") from None


def _first_line(exc: BaseException) -> str:
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return (text or type(exc).__name__)[:300]


__all__ = ["read_state_dict", "source_name", "listing"]
