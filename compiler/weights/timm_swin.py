"""timm SwinTransformer and SwinTransformerV2 -> archspec naming of specs/swin*.yaml."""

from __future__ import annotations

from . import ReferenceMapping, drop, register_mapping, rename

BLOCK = r"^layers\.(\d+)\.blocks\.(\d+)\."
RULES = [
    (r"^layers\.(\d+)\.downsample\.", r"stages.\1.downsample."),
    (BLOCK + r"norm1\.", r"stages.\1.blocks.\2.attn.norm."),
    (BLOCK + r"norm2\.", r"stages.\1.blocks.\2.mlp.norm."),
    (BLOCK + r"attn\.relative_position_bias_table$", r"stages.\1.blocks.\2.attn.position_bias.table"),
    (BLOCK + r"attn\.cpb_mlp\.", r"stages.\1.blocks.\2.attn.position_bias.mlp."),
    (BLOCK, r"stages.\1.blocks.\2."),
]
# buffers that older checkpoints saved: archspec rebuilds them from shapes
BUFFERS = [r"relative_position_index$", r"relative_coords_table$", r"attn_mask$", r"\.k_bias$"]


def convert(state: dict) -> dict:
    if not any(k.startswith("layers.0.blocks.0.") for k in state):
        raise KeyError("layers.0.blocks.0")
    return rename(drop(state, BUFFERS), RULES)


MAPPING = register_mapping(ReferenceMapping("timm swin", convert))
