"""Hugging Face transformers PvtForImageClassification (PVT v1) -> archspec naming of
specs/pvt_v1_*.yaml.

HF projects keys and values with two Linears (`key`, `value`); archspec's spatial-reduction
attention has one `kv` Linear whose output rows are [keys; values], so the two are
concatenated. Stage i's patch embedding and blocks live under `stages.i`.
"""

from __future__ import annotations

from . import ReferenceMapping, drop, fuse, register_mapping, rename

ENC = r"^pvt\.encoder\."
EMBED = ENC + r"patch_embeddings\.(\d+)\."
BLOCK = ENC + r"block\.(\d+)\.(\d+)\."
RULES = [
    (EMBED + r"position_embeddings$", r"stages.\1.patch_embed.pos_embed"),
    (EMBED + r"cls_token$", r"stages.\1.patch_embed.cls_token"),
    (EMBED + r"projection\.", r"stages.\1.patch_embed.proj."),
    (EMBED + r"layer_norm\.", r"stages.\1.patch_embed.norm."),
    (BLOCK + r"layer_norm_1\.", r"stages.\1.blocks.\2.attn.norm."),
    (BLOCK + r"attention\.self\.query\.", r"stages.\1.blocks.\2.attn.q."),
    (BLOCK + r"attention\.self\.kv\.", r"stages.\1.blocks.\2.attn.kv."),
    (BLOCK + r"attention\.self\.sequence_reduction\.", r"stages.\1.blocks.\2.attn.sr."),
    (BLOCK + r"attention\.self\.layer_norm\.", r"stages.\1.blocks.\2.attn.sr_norm."),
    (BLOCK + r"attention\.output\.dense\.", r"stages.\1.blocks.\2.attn.proj."),
    (BLOCK + r"layer_norm_2\.", r"stages.\1.blocks.\2.mlp.norm."),
    (BLOCK + r"mlp\.dense1\.", r"stages.\1.blocks.\2.mlp.fc1."),
    (BLOCK + r"mlp\.dense2\.", r"stages.\1.blocks.\2.mlp.fc2."),
    (ENC + r"layer_norm\.", "norm."),
    (r"^classifier\.", "head.fc."),
]


def convert(state: dict) -> dict:
    if not any(k.startswith("pvt.encoder.") for k in state):
        raise KeyError("pvt.encoder")
    state = drop(state, [r"\.position_ids$"])
    for what in ("weight", "bias"):
        state = fuse(state, r"(.*\.attention\.self)\.{}\." + what, ("key", "value"), "kv")
    return rename(state, RULES)


MAPPING = register_mapping(ReferenceMapping("hf pvt", convert))
