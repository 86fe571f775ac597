"""torch.nn.Transformer -> archspec naming of specs/transformer_*.yaml.

nn.MultiheadAttention packs the query, key and value projections into one in_proj
(rows [q; k; v]). For self-attention that is archspec's `qkv` as it is; for the decoder's
cross-attention archspec has `q` (queries from the decoder) and `kv` (keys and values from
the encoder output), so in_proj is split after its first third.

nn.Transformer has no embeddings and no output layer: the token table (shared by
src_embed, tgt_embed and the tied lm head) is not in its state dict, and keeps its
initial values (`keep`).
"""

from __future__ import annotations

import re

import torch

from . import ReferenceMapping, register_mapping, rename

ENC = r"^encoder\.layers\.(\d+)\."
DEC = r"^decoder\.layers\.(\d+)\."
RULES = [
    (ENC + r"self_attn\.in_proj_(weight|bias)$", r"encoder.layers.\1.attn.qkv.\2"),
    (ENC + r"self_attn\.out_proj\.", r"encoder.layers.\1.attn.proj."),
    (ENC + r"norm1\.", r"encoder.layers.\1.attn.norm."),
    (ENC + r"linear1\.", r"encoder.layers.\1.mlp.fc1."),
    (ENC + r"linear2\.", r"encoder.layers.\1.mlp.fc2."),
    (ENC + r"norm2\.", r"encoder.layers.\1.mlp.norm."),
    (DEC + r"self_attn\.in_proj_(weight|bias)$", r"decoder.layers.\1.self_attn.qkv.\2"),
    (DEC + r"self_attn\.out_proj\.", r"decoder.layers.\1.self_attn.proj."),
    (DEC + r"norm1\.", r"decoder.layers.\1.self_attn.norm."),
    (DEC + r"multihead_attn\.out_proj\.", r"decoder.layers.\1.cross_attn.proj."),
    (DEC + r"norm2\.", r"decoder.layers.\1.cross_attn.norm."),
    (DEC + r"linear1\.", r"decoder.layers.\1.mlp.fc1."),
    (DEC + r"linear2\.", r"decoder.layers.\1.mlp.fc2."),
    (DEC + r"norm3\.", r"decoder.layers.\1.mlp.norm."),
]
CROSS_IN_PROJ = re.compile(r"^decoder\.layers\.(\d+)\.multihead_attn\.in_proj_(weight|bias)$")


def split_cross_attention(state: dict) -> dict:
    """multihead_attn.in_proj_* [3E, ...] -> cross_attn.q.* [E, ...] and cross_attn.kv.* [2E, ...]."""
    out = {}
    for key, value in state.items():
        found = CROSS_IN_PROJ.match(key)
        if found is None:
            out[key] = value
            continue
        layer, what = found.groups()
        width = value.shape[0] // 3
        q, kv = torch.split(value, [width, 2 * width])  # rows [q; k; v] -> [q], [k; v]
        out[f"decoder.layers.{layer}.cross_attn.q.{what}"] = q
        out[f"decoder.layers.{layer}.cross_attn.kv.{what}"] = kv
    return out


def convert(state: dict) -> dict:
    if "encoder.layers.0.self_attn.in_proj_weight" not in state:
        raise KeyError("encoder.layers.0.self_attn.in_proj_weight")
    return rename(split_cross_attention(state), RULES)


MAPPING = register_mapping(ReferenceMapping(
    "torch nn.Transformer", convert,
    keep=(r"^src_embed\.", r"^tgt_embed\.", r"^head\."),
    doc="nn.Transformer has no embeddings or output layer: the shared token table keeps its initial values."))
