"""embed `scale: rounded`: sqrt(dim) as a float32 number rounded to the table's dtype before it
multiplies, as Hugging Face's Gemma family (`embed_scale.to(weight.dtype)`). The VaultGemma
trial: with `scale: true` a third of the bf16 embeddings at dim 72 were one ulp off (x 8.485
where Gemma multiplies by 8.5). Equal to Gemma3TextScaledWordEmbedding in bf16, fp32 and fp64."""

from __future__ import annotations

import pytest
import torch

import archspec

SPEC = """name: e
inputs: {ids: {shape: [B, 16], dtype: int64}}
graph:
  - {id: embed, embed: {vocab: 32, dim: 72, pos: none, scale: SCALE}}
"""


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_it_is_gemmas_scaled_embedding_in_every_dtype(dtype):
    pytest.importorskip("transformers")
    from transformers.models.gemma3.modeling_gemma3 import Gemma3TextScaledWordEmbedding

    ids = torch.randint(0, 32, (2, 16), generator=torch.Generator().manual_seed(0))
    outs = {}
    for scale in ("rounded", "true"):
        model = archspec.build_text(SPEC.replace("SCALE", scale), seed=0)
        reference = Gemma3TextScaledWordEmbedding(32, 72, 0, embed_scale=72 ** 0.5)
        with torch.no_grad():
            reference.weight.copy_(model.embed.tokens.weight)
            outs[scale] = model.to(dtype)(ids), reference.to(dtype)(ids)
    ours, gemma = outs["rounded"]
    assert torch.equal(ours, gemma)
    if dtype == torch.bfloat16:  # sqrt(72) unrounded: one ulp apart on many values
        plain, gemma = outs["true"]
        assert (plain != gemma).float().mean() > 0.1
