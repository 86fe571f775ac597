"""Hugging Face transformers CLIPModel -> archspec naming of specs/clip_*.yaml.

The image tower is `visual`, the text tower `textual`, the logits `logits`. HF projects
queries, keys and values with three Linears; archspec's self-attention has one `qkv`
Linear with rows [q; k; v], so they are concatenated. HF keeps the class embedding as a
vector and the position table as an nn.Embedding; archspec's patchify holds them as
[1, 1, C] and [1, N, C] parameters.
"""

from __future__ import annotations

from . import ReferenceMapping, drop, fuse, register_mapping, rename

LAYER = r"^(vision|text)_model\.encoder\.layers\.(\d+)\."
TOWER = {"vision": "visual", "text": "textual"}
RULES = [
    (r"^logit_scale$", "logits.logit_scale"),
    (r"^text_model\.embeddings\.token_embedding\.", "textual.embed.tokens."),
    (r"^text_model\.embeddings\.position_embedding\.", "textual.embed.pos."),
    (r"^text_model\.final_layer_norm\.", "textual.final_norm."),
    (r"^text_projection\.", "textual.features.proj."),
    (r"^vision_model\.embeddings\.class_embedding$", "visual.patch_embed.cls_token"),
    (r"^vision_model\.embeddings\.patch_embedding\.", "visual.patch_embed.proj."),
    (r"^vision_model\.embeddings\.position_embedding\.weight$", "visual.patch_embed.pos_embed"),
    (r"^vision_model\.pre_layrnorm\.", "visual.pre_norm."),
    (r"^vision_model\.post_layernorm\.", "visual.features.norm."),
    (r"^visual_projection\.", "visual.features.proj."),
    (LAYER + r"self_attn\.qkv\.", r"\1.blocks.\2.attn.qkv."),
    (LAYER + r"self_attn\.out_proj\.", r"\1.blocks.\2.attn.proj."),
    (LAYER + r"layer_norm1\.", r"\1.blocks.\2.attn.norm."),
    (LAYER + r"layer_norm2\.", r"\1.blocks.\2.mlp.norm."),
    (LAYER + r"mlp\.", r"\1.blocks.\2.mlp."),
]


def convert(state: dict) -> dict:
    if "text_model.embeddings.token_embedding.weight" not in state:
        raise KeyError("text_model.embeddings.token_embedding.weight")
    state = drop(state, [r"\.position_ids$"])
    for what in ("weight", "bias"):
        state = fuse(state, r"(.*\.self_attn)\.{}\." + what, ("q_proj", "k_proj", "v_proj"), "qkv")
    out = {}
    for key, value in rename(state, RULES).items():
        tower, _, rest = key.partition(".")
        key = f"{TOWER[tower]}.{rest}" if tower in TOWER else key
        if key == "visual.patch_embed.cls_token":
            value = value.reshape(1, 1, -1)  # [C] -> [1, 1, C]
        elif key == "visual.patch_embed.pos_embed":
            value = value.unsqueeze(0)  # [N, C] -> [1, N, C]
        out[key] = value
    return out


MAPPING = register_mapping(ReferenceMapping("hf clip", convert))
