"""Whisper (Hugging Face's WhisperForConditionalGeneration) at a tiny config, and generate over a
source that is no token ids: audio features [B, mels, frames] given as input_ids. The Whisper
user trial wrote this spec from the docs (exact in forward, loss and gradients), but generate
refused it (a source of audio features was not supported) and its encoder's positions, a frozen
parameter in Hugging Face's model, could not be counted. Now the source may be any tensor its
input declares, and the positions are `param: {frozen: true}`.

Against the reference (eager attention, every learned parameter perturbed by seeded noise, loaded
through the mapping below): parameter counts (total and trainable), the encoder's output and the
logits, greedy and beam-search tokens against its generate; a wrong source is a ValueError in
words. Weights are drawn wide (std 0.5) so that the tokens vary.
"""

from __future__ import annotations

import pytest
import torch

import archspec

transformers = pytest.importorskip("transformers")

SPEC = """\
# OpenAI Whisper as Hugging Face transformers' WhisperForConditionalGeneration, a tiny config:
# d_model 64, 2+2 layers, 4 heads, ffn 256, num_mel_bins 16, max_source_positions 32 (mel length 64),
# max_target_positions 32, vocab 100.
archspec: 1
name: whisper_tiny
params:
  vocab: 100
  dim: 64
  heads: 4
  ffn: 256
  layers: 2
  decoder_layers: 2
  mels: 16
  source: 32                    # max_source_positions (the encoder's tokens after conv2)
  target: 32                    # max_target_positions
  pad: 1                        # pad_token_id: the token table's padding_idx
  eps: 1.0e-5

dims:
  T: [1, target]

inputs:
  input_features: [B, "${mels}", "${2 * source}"]                 # log-mel [B, mels, frames], channels first
  decoder_input_ids: {shape: [B, T], dtype: int64}

targets:
  labels: {shape: [B, T], dtype: int64}

blocks:
  encoder_layer:
    graph:
      - id: attn                # self_attn_layer_norm + self_attn (k_proj without bias)
        attention: {kind: global, heads: "${heads}", qkv_bias: qv, norm_eps: "${eps}"}
      - id: mlp                 # final_layer_norm + fc1, gelu, fc2
        mlp: {hidden: "${ffn}", act: gelu, norm_eps: "${eps}"}

  decoder_layer:
    inputs: [x, memory]
    graph:
      - id: self_attn
        attention: {kind: causal, heads: "${heads}", qkv_bias: qv, norm_eps: "${eps}"}
      - id: cross_attn          # encoder_attn_layer_norm + encoder_attn
        from: [self_attn, memory]
        attention: {kind: cross, heads: "${heads}", qkv_bias: qv, norm_eps: "${eps}"}
      - id: mlp
        mlp: {hidden: "${ffn}", act: gelu, norm_eps: "${eps}"}


graph:
  - id: encoder
    graph:
      - {id: frames, rearrange: {pattern: "b c n -> b n c", as: tokens}}       # [B, 64, 16]
      - {id: conv1, conv: {dim: 1, out: "${dim}", kernel: 3, padding: 1}}
      - {id: act1, activation: {fn: gelu}}
      - {id: conv2, conv: {dim: 1, out: "${dim}", kernel: 3, stride: 2, padding: 1}}
      - {id: act2, activation: {fn: gelu}}
      - {id: embed_positions, param: {shape: ["${source}", "${dim}"], frozen: true}}   # HF's fixed sinusoids
      - {id: embedded, from: [act2, embed_positions], add: {}}
      - id: layers
        repeat: ${layers}
        encoder_layer: {}
      - id: layer_norm
        norm: {eps: "${eps}"}

  - id: decoder_embed           # embed_tokens (padding_idx pad) + learned embed_positions
    from: decoder_input_ids
    embed: {vocab: "${vocab}", dim: "${dim}", pos: learned, max_len: "${target}", pad_id: "${pad}"}

  - id: decoder
    graph:
      - id: layers
        repeat: ${decoder_layers}
        from: [decoder_embed, encoder]
        decoder_layer: {}
      - id: layer_norm
        norm: {eps: "${eps}"}

  - id: head                    # proj_out, tied to embed_tokens
    head: {kind: lm, tie: decoder_embed}

outputs: {logits: head, encoder_last_hidden_state: encoder}

mappings: [hf_whisper.yaml]

objectives:
  - id: lm
    from: [head, labels]
    loss: {kind: cross_entropy}
"""

MAPPING = r"""
archspec: 1
name: hf whisper
doc: >
  WhisperForConditionalGeneration / WhisperModel -> whisper_tiny.yaml. q, k, v weights fused into qkv
  (self-attention) or k, v into kv (encoder_attn); q_proj.bias and v_proj.bias are the qv biases
  (k_proj has none). The encoder's embed_positions (fixed sinusoids) is a frozen param.
identify: ['^(model\.)?encoder\.conv1\.weight$', '^(model\.)?decoder\.layers\.0\.encoder_attn\.k_proj\.weight$']
rules:
  - drop: ['^proj_out\.weight$']
  - fuse:
      match: '^(model\.)?(encoder|decoder)\.layers\.(\d+)\.self_attn\.{part}\.weight$'
      parts: [q_proj, k_proj, v_proj]
      into: qkv
  - fuse:
      match: '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn\.{part}\.weight$'
      parts: [k_proj, v_proj]
      into: kv
  - rename:
      '^(model\.)?encoder\.(conv1|conv2)\.': 'encoder.\2.conv.'
      '^(model\.)?encoder\.layer_norm\.': encoder.layer_norm.
      '^(model\.)?encoder\.embed_positions\.weight$': encoder.embed_positions.value
      '^(model\.)?decoder\.layer_norm\.': decoder.layer_norm.
      '^(model\.)?decoder\.embed_tokens\.': decoder_embed.tokens.
      '^(model\.)?decoder\.embed_positions\.': decoder_embed.pos.
      '^(model\.)?encoder\.layers\.(\d+)\.self_attn\.qkv\.': 'encoder.layers.\2.attn.qkv.'
      '^(model\.)?encoder\.layers\.(\d+)\.self_attn\.q_proj\.bias$': 'encoder.layers.\2.attn.q_bias'
      '^(model\.)?encoder\.layers\.(\d+)\.self_attn\.v_proj\.bias$': 'encoder.layers.\2.attn.v_bias'
      '^(model\.)?encoder\.layers\.(\d+)\.self_attn\.out_proj\.': 'encoder.layers.\2.attn.proj.'
      '^(model\.)?encoder\.layers\.(\d+)\.self_attn_layer_norm\.': 'encoder.layers.\2.attn.norm.'
      '^(model\.)?decoder\.layers\.(\d+)\.self_attn\.qkv\.': 'decoder.layers.\2.self_attn.qkv.'
      '^(model\.)?decoder\.layers\.(\d+)\.self_attn\.q_proj\.bias$': 'decoder.layers.\2.self_attn.q_bias'
      '^(model\.)?decoder\.layers\.(\d+)\.self_attn\.v_proj\.bias$': 'decoder.layers.\2.self_attn.v_bias'
      '^(model\.)?decoder\.layers\.(\d+)\.self_attn\.out_proj\.': 'decoder.layers.\2.self_attn.proj.'
      '^(model\.)?decoder\.layers\.(\d+)\.self_attn_layer_norm\.': 'decoder.layers.\2.self_attn.norm.'
      '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn\.q_proj\.weight$': 'decoder.layers.\2.cross_attn.q.weight'
      '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn\.q_proj\.bias$': 'decoder.layers.\2.cross_attn.q_bias'
      '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn\.v_proj\.bias$': 'decoder.layers.\2.cross_attn.v_bias'
      '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn\.kv\.': 'decoder.layers.\2.cross_attn.kv.'
      '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn\.out_proj\.': 'decoder.layers.\2.cross_attn.proj.'
      '^(model\.)?decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.': 'decoder.layers.\2.cross_attn.norm.'
      '^(model\.)?(encoder|decoder)\.layers\.(\d+)\.final_layer_norm\.': '\2.layers.\3.mlp.norm.'
      '^(model\.)?(encoder|decoder)\.layers\.(\d+)\.(fc1|fc2)\.': '\2.layers.\3.mlp.\4.'
  - reshape: {match: '^encoder\.embed_positions\.value$', shape: [1, '*']}
"""

START = 3  # decoder_start_token_id


def reference():
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(vocab_size=100, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, num_mel_bins=16,
                           max_source_positions=32, max_target_positions=32, pad_token_id=1, bos_token_id=2,
                           eos_token_id=2, decoder_start_token_id=START, suppress_tokens=None,
                           begin_suppress_tokens=None, attn_implementation="eager")
    torch.manual_seed(0)
    ref = WhisperForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if not p.requires_grad:  # the encoder's fixed sinusoids
                continue
            scale = 0.5 if p.dim() > 1 else 0.3
            p.copy_(scale * torch.randn(p.shape, generator=generator) + (1.0 if "layer_norm.weight" in name else 0.0))
    return ref


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whisper")
    (folder / "whisper_tiny.yaml").write_text(SPEC)
    (folder / "hf_whisper.yaml").write_text(MAPPING)
    ref = reference()
    torch.save(ref.state_dict(), folder / "ref.pt")
    return ref, archspec.build(str(folder / "whisper_tiny.yaml"), weights=str(folder / "ref.pt")).eval()


def features(batch=3):
    return torch.randn(batch, 16, 64, generator=torch.Generator().manual_seed(0))


def test_parameter_counts_total_and_trainable(pair):
    ref, ours = pair
    for count in (lambda m: sum(p.numel() for p in m.parameters()),
                  lambda m: sum(p.numel() for p in m.parameters() if p.requires_grad)):
        assert count(ours) == count(ref)
    assert sum(p.numel() for p in ours.parameters() if not p.requires_grad) == 32 * 64  # the frozen positions


def test_encoder_and_logits_as_hugging_faces(pair):
    ref, ours = pair
    x, target = features(), torch.tensor([[START, 5, 6, 7]] * 3)
    with torch.no_grad():
        theirs = ref(input_features=x, decoder_input_ids=target)
        mine = ours(x, target)
    assert (mine.logits - theirs.logits).abs().max() < 1e-4 * theirs.logits.abs().max()
    assert (mine.encoder_last_hidden_state - theirs.encoder_last_hidden_state).abs().max() < 1e-4


@pytest.mark.parametrize("beams", [1, 3])
def test_generate_over_audio_features_as_hugging_faces(pair, beams):
    ref, ours = pair
    x = features()
    theirs = ref.generate(input_features=x, decoder_input_ids=torch.full((3, 1), START), max_new_tokens=12,
                          num_beams=beams, do_sample=False)
    mine = ours.generate(x, decoder_start_token_id=START, max_new_tokens=12, num_beams=beams)
    assert torch.equal(mine[:, 1:], theirs) and mine[:, 0].eq(START).all()
    assert len(set(theirs.flatten().tolist())) > 3  # tokens that vary: the check can fail


def test_a_wrong_source_is_refused_in_words(pair):
    _, ours = pair
    with pytest.raises(ValueError, match=r"input 'input_features' is \[3, 16, 60\]; the spec declares \[B, 16, 64\]"):
        ours.generate(torch.randn(3, 16, 60), decoder_start_token_id=START, max_new_tokens=2)
    with pytest.raises(ValueError, match="source 'input_features' is \\[B, 16, 64\\], not token ids: give it as "
                                         "input_ids, a float tensor"):
        ours.generate(torch.ones(3, 16, 64, dtype=torch.long), decoder_start_token_id=START, max_new_tokens=2)
