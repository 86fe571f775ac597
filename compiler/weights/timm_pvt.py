"""timm PyramidVisionTransformerV2 (pvt_v2_b0 ... b5, b2_li) -> archspec naming of specs/pvt_v2_*.yaml.

timm's block norms are norm1/norm2 and the LayerNorm after the spatial reduction is
`attn.norm`; archspec keeps a sub-layer's norm at `<sub-layer>.norm`, so the reduction's
norm is `attn.sr_norm`. Everything else (patch_embed, stages.N.downsample, q/kv/proj/sr,
mlp.fc1/dwconv/fc2, stages.N.norm) has the same name.
"""

from __future__ import annotations

from . import ReferenceMapping, register_mapping, rename

BLOCK = r"^stages\.(\d+)\.blocks\.(\d+)\."
RULES = [
    (BLOCK + r"attn\.norm\.", r"stages.\1.blocks.\2.attn.sr_norm."),  # first: before norm1 takes `attn.norm`
    (BLOCK + r"norm1\.", r"stages.\1.blocks.\2.attn.norm."),
    (BLOCK + r"norm2\.", r"stages.\1.blocks.\2.mlp.norm."),
    (r"^head\.(weight|bias)$", r"head.fc.\1"),
]


def convert(state: dict) -> dict:
    if "stages.0.blocks.0.attn.q.weight" not in state:
        raise KeyError("stages.0.blocks.0.attn.q.weight")
    return rename(state, RULES)


MAPPING = register_mapping(ReferenceMapping("timm pvt_v2", convert))
