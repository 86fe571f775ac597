"""Weights written as safetensors, the default format wherever archspec writes weights (a build's
model.safetensors, save_pretrained's folder); .pt files are still read (checkpoint.py).

safetensors stores each tensor once and refuses two names for one storage, which a model with
tied weights has (GPT-2's output layer is its embedding, `share: true` copies). Such a name is
written once, under the first name, and the others are recorded in the file's metadata as
"alias:NAME" -> first name (what safetensors' own save_model does, under a prefix), so that
reading the file gives the whole state dict back (`with_aliases`).
"""

from __future__ import annotations

import os

import torch

from archspec.core.files import new_file_mode

ALIAS = "alias:"  # metadata key prefix: "alias:lm_head.weight" -> "embed.weight"


def write_safetensors(state: dict, path: str, metadata: dict | None = None) -> None:
    """`state` (names -> tensors) into the safetensors file at `path`, each storage once."""
    from safetensors.torch import save_file

    kept, aliases = {}, {}
    first = {}  # (storage pointer, offset, shape, stride, dtype) -> the first name holding that view
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
               tuple(tensor.stride()), tensor.dtype)
        if key in first and tensor.numel() > 0:
            aliases[ALIAS + name] = first[key]
            continue
        first[key] = name
        kept[name] = tensor.detach().contiguous().clone() if _overlaps(tensor, kept) else tensor.detach().contiguous()
    save_file(kept, path, metadata={**(metadata or {}), **aliases})
    os.chmod(path, new_file_mode())  # safetensors writes 0600; a model folder's files are readable as any other


def _overlaps(tensor: torch.Tensor, kept: dict) -> bool:
    """Whether `tensor` shares storage with a kept tensor as another view (safetensors refuses it)."""
    ptr = tensor.untyped_storage().data_ptr()
    return tensor.numel() > 0 and any(t.untyped_storage().data_ptr() == ptr for t in kept.values())


def with_aliases(state: dict, metadata: dict | None) -> dict:
    """The state dict read from a safetensors file with its aliased names put back."""
    for key, first in (metadata or {}).items():
        if key.startswith(ALIAS) and first in state:
            state[key[len(ALIAS):]] = state[first]
    return state


def file_metadata(path: str) -> dict:
    """The metadata header of a safetensors file ({} when it has none)."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        return dict(f.metadata() or {})
