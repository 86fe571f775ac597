"""The inputs and the comparison of the ONNX Runtime check (onnx.py) for a spec that reads a
key-padding mask: each mask right-padded (1 for a sequence's first n tokens, n from the whole
length down to 1), and the outputs compared at the real tokens only.

Where every key of a query row is hidden (a padded row whose local window or causal past holds
only padding) the row's output is no one's: torch gives the average of the values there (as
Hugging Face's eager attention), ONNX Runtime's fused Attention gives 0. A real token always
sees itself, and through every layer only real keys, so its output is defined and compared;
a random 0/1 mask made such rows at random and the check failed, or passed by chance."""

from __future__ import annotations

import torch

from archspec.core.ir import Graph
from archspec.primitives.infer import GraphContext

MASK_BOUND = 2  # an attention's padding-mask slot holds 0 or 1 (its Op.value_range)


def padding_masks(graph: Graph) -> list[int]:
    """The indices of the inputs some attention reads as its key-padding mask."""
    found = []
    for index, node in enumerate(graph.inputs()):
        if node.type.dtype == "int64" and any(reads_as_mask(graph, reader, node.name)
                                              for reader in graph.readers(node.name)):
            found.append(index)
    return found


def reads_as_mask(graph: Graph, reader: str, name: str) -> bool:
    node = graph.node(reader)
    if node.op.primitive != "attention":
        return False
    return any(source == name and node.op.value_range(node.params, slot, GraphContext(graph, node)) == MASK_BOUND
               for slot, source in enumerate(node.inputs))


def right_padded(args: tuple, masks: list[int]) -> tuple:
    """`args` with each mask input made right-padded: row b keeps its first L - b * L // B tokens."""
    args = list(args)
    for index in masks:
        batch, length = args[index].shape
        kept = [max(1, length - b * length // batch) for b in range(batch)]
        args[index] = (torch.arange(length)[None, :] < torch.tensor(kept)[:, None]).long()  # [B, L] of 1s then 0s
    return tuple(args)


def gap_at_real_tokens(outs, expected, args: tuple, masks: list[int]) -> float:
    """max |out - expected| over the outputs; an output whose dim 1 is a mask's length is compared
    at that mask's real tokens only. NaN if any compared difference is NaN."""
    by_length = {args[i].shape[1]: args[i].bool() for i in masks}
    gaps = []
    for out, want in zip(outs, expected):
        diff = (out.float() - want.float()).abs()
        keep = by_length.get(diff.shape[1]) if diff.dim() >= 2 else None
        if keep is not None and keep.shape[0] == diff.shape[0]:
            diff = diff[keep]  # [B, L, ...] -> [real tokens, ...]
        gaps.append(diff.max() if diff.numel() else torch.tensor(0.0))
    return float(torch.stack(gaps).max()) if gaps else 0.0
