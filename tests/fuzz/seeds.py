"""The specs mutations start from: every shipped spec and example, the bad-spec corpus, and small
specs cheap enough to build (so that lowering meets the names and shapes `check` accepted)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "specs"
BAD = ROOT / "tests" / "bad_specs"

TINY = {
    "tiny_vit": """archspec: 1
name: tiny_vit
params:
  img: 32
  dim: 32
  depth: 2
  heads: 2
  dpr: ${linspace(0, 0.1, depth)}
inputs:
  image: [B, 3, img, img]
graph:
  - id: patch_embed
    patchify: {patch: 8, dim: "${dim}", cls_token: true, pos: learned}
  - id: blocks
    repeat: ${depth}
    graph:
      - id: attn
        attention: {kind: global, heads: "${heads}", drop_path: "${dpr[i]}"}
      - id: mlp
        mlp: {ratio: 2.0}
  - id: norm
    norm: {}
  - id: head
    head: {kind: classify, classes: 10, pool: cls}
""",
    "tiny_swin": """archspec: 1
name: tiny_swin
params:
  img: 32
  dims: [16, 32]
  depths: [2, 2]
  window: 2
inputs:
  image: [B, 3, img, img]
blocks:
  swin_block:
    params: {dim: ~, shifted: false}
    graph:
      - id: attn
        attention: {kind: "${'shifted' if shifted else 'window'}", heads: 2, window: "${window}"}
      - id: mlp
        mlp: {ratio: 2.0}
graph:
  - id: patch_embed
    patchify: {patch: 4, dim: "${dims[0]}", norm: true}
  - id: stages
    repeat: ${len(depths)}
    as: s
    graph:
      - id: downsample
        if: ${s > 0}
        merge: {kind: concat, dim: "${dims[s]}"}
      - id: blocks
        repeat: ${depths[s]}
        as: b
        swin_block: {dim: "${dims[s]}", shifted: "${b % 2 == 1}"}
  - id: norm
    norm: {}
  - id: head
    head: {kind: classify, classes: 10}
""",
    "tiny_pvt": """archspec: 1
name: tiny_pvt
params:
  dims: [16, 32]
  sr: [2, 1]
inputs:
  image: [B, 3, 32, 32]
graph:
  - id: stem
    patchify: {kernel: 7, stride: 4, padding: 3, dim: "${dims[0]}", norm: true}
  - id: stages
    repeat: 2
    as: s
    graph:
      - id: downsample
        if: ${s > 0}
        merge: {kind: conv, dim: "${dims[s]}"}
      - id: attn
        attention: {kind: sra, heads: 1, sr_ratio: "${sr[s]}"}
      - id: pooled
        attention: {kind: linear_sra, heads: 1, pool: 2}
      - id: mlp
        mlp: {ratio: 2.0, dwconv: true}
  - id: head
    head: {kind: classify, classes: 10}
""",
    "tiny_lm": """archspec: 1
name: tiny_lm
params:
  vocab: 64
  dim: 32
dims:
  L: [1, 16]
inputs:
  ids: {shape: [B, L], dtype: int64}
graph:
  - id: embed
    embed: {vocab: "${vocab}", dim: "${dim}", pos: learned, max_len: 16}
  - id: blocks
    repeat: 2
    graph:
      - id: attn
        attention: {kind: causal, heads: 2}
      - id: mlp
        mlp: {ratio: 2.0}
  - id: norm
    norm: {}
  - id: head
    head: {kind: lm, tie: embed}
""",
    "tiny_seq2seq": """archspec: 1
name: tiny_seq2seq
params:
  dim: 32
inputs:
  src: {shape: [B, 8], dtype: int64}
  tgt: {shape: [B, 6], dtype: int64}
blocks:
  decoder_layer:
    inputs: [x, memory]
    graph:
      - id: self_attn
        attention: {kind: causal, heads: 2, norm: post}
      - id: cross_attn
        from: [self_attn, memory]
        attention: {kind: cross, heads: 2, norm: post}
      - id: mlp
        mlp: {hidden: 64, act: relu, norm: post}
graph:
  - id: src_embed
    from: src
    embed: {vocab: 50, dim: "${dim}", pos: sincos, max_len: 8}
  - id: encoder
    graph:
      - id: layers
        repeat: 2
        graph:
          - attention: {kind: global, heads: 2, norm: post}
          - mlp: {hidden: 64, norm: post}
  - id: tgt_embed
    from: tgt
    embed: {tie: src_embed, pos: sincos, max_len: 8}
  - id: decoder
    repeat: 2
    from: [tgt_embed, encoder]
    decoder_layer: {}
  - id: logits
    head: {kind: lm, tie: src_embed}
outputs: [logits]
""",
}


@lru_cache(maxsize=None)
def shipped() -> dict[str, str]:
    """Every shipped spec and example, by file name (relative to specs/)."""
    files = sorted(SPECS.glob("*.yaml")) + sorted((SPECS / "examples").glob("*.yaml"))
    return {str(f.relative_to(SPECS)): f.read_text(encoding="utf-8") for f in files}


@lru_cache(maxsize=None)
def bad() -> dict[str, str]:
    return {f.name: f.read_text(encoding="utf-8") for f in sorted(BAD.glob("*.yaml"))}


@lru_cache(maxsize=None)
def all_seeds() -> dict[str, str]:
    return {**shipped(), **{f"bad/{k}": v for k, v in bad().items()}, **{f"tiny/{k}": v for k, v in TINY.items()}}


@lru_cache(maxsize=None)
def mappings() -> dict[str, str]:
    """The shipped weight mapping files, by file name (specs/mappings/)."""
    return {f.name: f.read_text(encoding="utf-8") for f in sorted((SPECS / "mappings").glob("*.yaml"))}


# tiny_vit's tensors as timm names them (specs/mappings/timm_vit.yaml maps them back)
TIMM_NAMES = [(r"^patch_embed\.cls_token$", "cls_token"), (r"^patch_embed\.pos_embed$", "pos_embed"),
              (r"^blocks\.(\d+)\.attn\.norm\.", r"blocks.\1.norm1."),
              (r"^blocks\.(\d+)\.mlp\.norm\.", r"blocks.\1.norm2."), (r"^head\.fc\.", "head.")]


def timm_name(name: str) -> str:
    import re

    for pattern, replacement in TIMM_NAMES:
        name, count = re.subn(pattern, replacement, name)
        if count:
            break
    return name
