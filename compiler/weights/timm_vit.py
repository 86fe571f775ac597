"""timm VisionTransformer (vit_*_patch16_224) -> archspec naming of specs/vit_*.yaml."""

from __future__ import annotations

from . import ReferenceMapping, register_mapping, rename

RULES = [
    (r"^cls_token$", "patch_embed.cls_token"),
    (r"^pos_embed$", "patch_embed.pos_embed"),
    (r"^blocks\.(\d+)\.norm1\.", r"blocks.\1.attn.norm."),
    (r"^blocks\.(\d+)\.norm2\.", r"blocks.\1.mlp.norm."),
    (r"^head\.(weight|bias)$", r"head.fc.\1"),
]


def convert(state: dict) -> dict:
    if "cls_token" not in state:
        raise KeyError("cls_token")
    return rename(state, RULES)


MAPPING = register_mapping(ReferenceMapping("timm vit", convert))
