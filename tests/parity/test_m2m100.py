"""M2M100 (Hugging Face's M2M100ForConditionalGeneration, the family of NLLB-200) at a tiny
config: fairseq's sinusoids numbered from the ids (`sincos_layout: fairseq`, `pos_pad_id`), the
embeddings scaled by sqrt(d_model), pre-norm layers, a shared table and a tied head. Written from
the docs by the M2M100 user trial (no workaround node); it found greedy `generate` numbering a
padding token the model itself produced (forced_bos_token_id = pad) as a real position, where
Hugging Face's cached steps and archspec's own forward give it the zero padding row: 6 of 8 rows'
tokens differed. Now a padding token takes the padding row in a cached step too.

Against the reference (eager attention, every parameter perturbed by seeded noise, loaded through
the mapping below): counts, logits over left- and right-padded sources, greedy and beam tokens,
and greedy tokens with the padding id in the target.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")

SPEC = """\
# M2M100 (Fan et al. 2020) / NLLB-200 network family, tiny config, as HF
# M2M100ForConditionalGeneration(M2M100Config(vocab_size=100, d_model=32, encoder_layers=2,
# decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
# decoder_ffn_dim=64, max_position_embeddings=64, activation_function=relu, scale_embedding=True,
# pad_token_id=1, decoder_start_token_id=2)).
archspec: 1
name: m2m100
doc: >
  Pre-norm encoder-decoder; fairseq sinusoidal positions numbered from the ids (padding skipped),
  token embeddings scaled by sqrt(d_model), final LayerNorm on each stack, shared table, tied head.

params:
  vocab: 100
  dim: 32
  heads: 4
  ffn: 64
  layers: 2
  decoder_layers: 2
  context: 64
  pad: 1
  eps: 1.0e-5
  dropout: 0.0
  attention_dropout: 0.0
  activation_dropout: 0.0

dims:
  S: [1, context]
  T: [1, context]

inputs:
  input_ids: {shape: [B, S], dtype: int64}
  attention_mask: {shape: [B, S], dtype: int64}
  decoder_input_ids: {shape: [B, T], dtype: int64}

targets:
  labels: {shape: [B, T], dtype: int64}

blocks:
  encoder_layer:
    inputs: [x, mask]
    graph:
      - id: attn                # self_attn + self_attn_layer_norm (pre)
        from: [x, mask]
        attention: {kind: global, heads: "${heads}", padding_mask: true, norm: pre, norm_eps: "${eps}",
                    attn_drop: "${attention_dropout}", proj_drop: "${dropout}"}
      - id: ffn                 # final_layer_norm, fc1, relu, fc2
        mlp: {hidden: "${ffn}", act: relu, norm: pre, norm_eps: "${eps}", dropout: "${dropout}",
              hidden_dropout: "${activation_dropout}"}

  decoder_layer:
    inputs: [x, memory, mask]
    graph:
      - id: self_attn
        from: x
        attention: {kind: causal, heads: "${heads}", norm: pre, norm_eps: "${eps}",
                    attn_drop: "${attention_dropout}", proj_drop: "${dropout}"}
      - id: cross_attn
        from: [self_attn, memory, mask]
        attention: {kind: cross, heads: "${heads}", padding_mask: true, norm: pre, norm_eps: "${eps}",
                    attn_drop: "${attention_dropout}", proj_drop: "${dropout}"}
      - id: ffn
        mlp: {hidden: "${ffn}", act: relu, norm: pre, norm_eps: "${eps}", dropout: "${dropout}",
              hidden_dropout: "${activation_dropout}"}

graph:
  - id: embed                   # shared (scaled) + encoder.embed_positions (fairseq sinusoids)
    from: input_ids
    embed: {vocab: "${vocab}", dim: "${dim}", pos: sincos, sincos_layout: fairseq, pos_pad_id: "${pad}",
            max_len: "${context}", scale: true, pad_id: "${pad}", dropout: "${dropout}"}

  - id: encoder
    graph:
      - id: layers
        repeat: ${layers}
        from: [embed, attention_mask]
        encoder_layer: {}
      - id: layer_norm
        norm: {eps: "${eps}"}

  - id: decoder_embed
    from: decoder_input_ids
    embed: {tie: embed, pos: sincos, sincos_layout: fairseq, pos_pad_id: "${pad}", max_len: "${context}",
            scale: true, dropout: "${dropout}"}

  - id: decoder
    graph:
      - id: layers
        repeat: ${decoder_layers}
        from: [decoder_embed, encoder, attention_mask]
        decoder_layer: {}
      - id: layer_norm
        norm: {eps: "${eps}"}

  - id: head
    head: {kind: lm, tie: embed}

outputs: {logits: head, encoder_last_hidden_state: encoder, decoder_last_hidden_state: decoder}

objectives:
  - id: lm
    from: [head, labels]
    loss: {kind: cross_entropy}

mappings: [hf_m2m100.yaml]
"""

MAPPING = r"""
# Hugging Face transformers M2M100ForConditionalGeneration (or M2M100Model) -> m2m100.yaml
archspec: 1
name: hf m2m100
doc: q/k/v fused into qkv (self-attention) or kv (encoder_attn); pre-norm LayerNorms as the sub-layers' norms.
identify: ['^(model\.)?shared\.weight$', '^(model\.)?decoder\.layers\.0\.encoder_attn\.k_proj\.weight$']
rules:
  - drop: ['^(model\.)?(encoder|decoder)\.embed_tokens\.weight$', '^lm_head\.weight$',
           '^(model\.)?(encoder|decoder)\.embed_positions\.weights$']
  - fuse:
      match: '^(model\.)?(encoder|decoder)\.layers\.(\d+)\.self_attn\.{part}\.(weight|bias)$'
      parts: [q_proj, k_proj, v_proj]
      into: qkv
  - fuse:
      match: '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn\.{part}\.(weight|bias)$'
      parts: [k_proj, v_proj]
      into: kv
  - rename:
      '^(model\.)?shared\.': embed.tokens.
      '^(model\.)?(encoder|decoder)\.layer_norm\.': '\2.layer_norm.'
      '^(model\.)?encoder\.layers\.(\d+)\.self_attn\.qkv\.': 'encoder.layers.\2.attn.qkv.'
      '^(model\.)?encoder\.layers\.(\d+)\.self_attn\.out_proj\.': 'encoder.layers.\2.attn.proj.'
      '^(model\.)?encoder\.layers\.(\d+)\.self_attn_layer_norm\.': 'encoder.layers.\2.attn.norm.'
      '^(model\.)?decoder\.layers\.(\d+)\.self_attn\.qkv\.': 'decoder.layers.\2.self_attn.qkv.'
      '^(model\.)?decoder\.layers\.(\d+)\.self_attn\.out_proj\.': 'decoder.layers.\2.self_attn.proj.'
      '^(model\.)?decoder\.layers\.(\d+)\.self_attn_layer_norm\.': 'decoder.layers.\2.self_attn.norm.'
      '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn\.q_proj\.': 'decoder.layers.\2.cross_attn.q.'
      '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn\.kv\.': 'decoder.layers.\2.cross_attn.kv.'
      '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn\.out_proj\.': 'decoder.layers.\2.cross_attn.proj.'
      '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.': 'decoder.layers.\2.cross_attn.norm.'
      '^(model\.)?(encoder|decoder)\.layers\.(\d+)\.final_layer_norm\.': '\2.layers.\3.ffn.norm.'
      '^(model\.)?(encoder|decoder)\.layers\.(\d+)\.(fc1|fc2)\.': '\2.layers.\3.ffn.\4.'
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    config = M2M100Config(vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                          decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                          max_position_embeddings=64, pad_token_id=1, decoder_start_token_id=2, bos_token_id=0,
                          eos_token_id=2, scale_embedding=True, activation_function="relu", dropout=0.0,
                          attention_dropout=0.0, activation_dropout=0.0, attn_implementation="eager")
    torch.manual_seed(0)
    ref = M2M100ForConditionalGeneration(config).eval()
    perturb_everything(ref, seed=1, scale=0.3)
    folder = tmp_path_factory.mktemp("m2m100")
    (folder / "m2m100.yaml").write_text(SPEC)
    (folder / "hf_m2m100.yaml").write_text(MAPPING)
    torch.save(ref.state_dict(), folder / "ref.pt")
    return ref, archspec.build(str(folder / "m2m100.yaml"), weights=str(folder / "ref.pt")).eval()


def sources():
    """Four sources of 10 ids, the second right-padded by 3, the third left-padded by 4 (pad 1)."""
    ids = torch.randint(3, 100, (4, 10), generator=torch.Generator().manual_seed(5))
    ids[1, -3:] = 1
    ids[2, :4] = 1
    return ids, (ids != 1).long()


def test_counts_and_logits_over_padded_sources(pair):
    ref, ours = pair
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    ids, mask = sources()
    target = torch.tensor([[2, 5, 6, 7]] * 4)
    with torch.no_grad():
        theirs = ref(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
        mine = ours(ids, mask, target).logits
    assert (theirs - mine).abs().max() < 1e-4 * theirs.abs().max()


@pytest.mark.parametrize("beams", [1, 3])
def test_tokens_as_hugging_faces_generate(pair, beams):
    ref, ours = pair
    ids, mask = sources()
    options = dict(decoder_start_token_id=2, eos_token_id=2, pad_token_id=1, max_new_tokens=12, num_beams=beams)
    theirs = ref.generate(input_ids=ids, attention_mask=mask, do_sample=False, **options)
    assert torch.equal(ours.generate(ids, attention_mask=mask, **options), theirs)


def test_a_padding_token_in_the_target_takes_the_padding_row_as_hugging_faces_cached_steps(pair):
    ref, ours = pair
    ids, mask = sources()
    options = dict(decoder_start_token_id=2, eos_token_id=2, pad_token_id=1, forced_bos_token_id=1,
                   max_new_tokens=10)
    theirs = ref.generate(input_ids=ids, attention_mask=mask, do_sample=False, **options)
    mine = ours.generate(ids, attention_mask=mask, **options)
    assert torch.equal(mine, theirs) and mine[:, 1].eq(1).all()
