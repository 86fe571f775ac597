"""A causal conv decodes with a state of its last inputs (DECODE RecentInputs), as Hugging
Face's LFM2 (Lfm2ForCausalLM) keeps its short conv's state: the LFM2 user trial's spec
generated the right tokens without any cache (one causal conv made the whole model run every
token's whole sequence again), so it took no compile, no padded prompt and no decode programs.

Against the reference at a tiny config (every parameter perturbed by seeded noise): the
decoder keeps a cache (no whole-sequence fallback), greedy tokens equal to its generate on
plain and left-padded prompts, eager and compiled; the exported prefill and decode step carry
the conv state (`past_conv.i` -> `present_conv.i`) and match the eager step; `check` reports
the state's size. A spec whose conv is not causal still decodes without a cache."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.generate import generate
from archspec.compiler.generate.cache import DecodeState
from archspec.compiler.generate.driver import decoder_of

from tests.parity.test_vocabulary import perturb_everything

pytest.importorskip("transformers.models.lfm2")

SPEC = """\
archspec: 1
name: lfm2_tiny
params: {vocab: 128, dim: 64, hidden: 128, layers: 4, heads: 4, kv_heads: 2, full_attn: [1, 3], kernel: 3,
         causal: true, theta: 1000000.0, eps: 1.0e-5, context: 128}
dims:
  L: [1, context]
inputs:
  input_ids: {shape: [B, L], dtype: int64}
blocks:
  short_conv:
    params: {dim: ~}
    inputs: [x]
    graph:
      - {id: norm, from: x, norm: {kind: rms, eps: "${eps}"}}
      - {id: in_proj, linear: {dim: "${3 * dim}", bias: false}}
      - {id: b, from: in_proj, slice: {along: channels, start: 0, stop: "${dim}"}}
      - {id: c, from: in_proj, slice: {along: channels, start: "${dim}", stop: "${2 * dim}"}}
      - {id: xs, from: in_proj, slice: {along: channels, start: "${2 * dim}"}}
      - {id: bx, from: [b, xs], multiply: {}}
      - id: conv
        conv: {dim: 1, kernel: "${kernel}", causal: "${causal}", padding: "${0 if causal else 'same'}",
               groups: depthwise, bias: false}
      - {id: y, from: [c, conv], multiply: {}}
      - {id: out_proj, linear: {dim: "${dim}", bias: false}}
      - {id: out, from: [x, out_proj], add: {}}
graph:
  - {id: embed, embed: {vocab: "${vocab}", dim: "${dim}", pos: none}}
  - id: layers
    repeat: ${layers}
    graph:
      - id: attn
        if: ${i in full_attn}
        attention: {kind: causal, heads: "${heads}", kv_heads: "${kv_heads}", rope_theta: "${theta}",
                    qkv_bias: false, proj_bias: false, norm_kind: rms, norm_eps: "${eps}",
                    qk_norm: rms, qk_norm_eps: "${eps}"}
      - id: conv
        if: ${i not in full_attn}
        short_conv: {dim: "${dim}"}
      - {id: mlp, mlp: {hidden: "${hidden}", act: silu, gated: true, bias: false, norm_kind: rms,
                        norm_eps: "${eps}"}}
  - {id: norm, norm: {kind: rms, eps: "${eps}"}}
  - {id: head, head: {kind: lm, tie: embed}}
outputs: [head]
"""

# The same with Hugging Face's padding: the mask zeroes a padded token's input to the conv
# (`padding_mask: true`), and the attention hides padded keys, in forward as in generate.
SPEC_MASKED = """\
archspec: 1
name: lfm2_tiny
params: {vocab: 128, dim: 64, hidden: 128, layers: 4, heads: 4, kv_heads: 2, full_attn: [1, 3], kernel: 3,
         causal: true, theta: 1000000.0, eps: 1.0e-5, context: 128}
dims:
  L: [1, context]
inputs:
  input_ids: {shape: [B, L], dtype: int64}
  attention_mask: {shape: [B, L], dtype: int64}
blocks:
  short_conv:
    params: {dim: ~}
    inputs: [x, mask]
    graph:
      - {id: norm, from: x, norm: {kind: rms, eps: "${eps}"}}
      - {id: in_proj, linear: {dim: "${3 * dim}", bias: false}}
      - {id: b, from: in_proj, slice: {along: channels, start: 0, stop: "${dim}"}}
      - {id: c, from: in_proj, slice: {along: channels, start: "${dim}", stop: "${2 * dim}"}}
      - {id: xs, from: in_proj, slice: {along: channels, start: "${2 * dim}"}}
      - {id: bx, from: [b, xs], multiply: {}}
      - id: conv
        from: [bx, mask]
        conv: {dim: 1, kernel: "${kernel}", causal: "${causal}", padding: "${0 if causal else 'same'}",
               groups: depthwise, bias: false, padding_mask: true}
      - {id: y, from: [c, conv], multiply: {}}
      - {id: out_proj, linear: {dim: "${dim}", bias: false}}
      - {id: out, from: [x, out_proj], add: {}}
  layer:
    params: {attention: ~}
    inputs: [x, mask]
    graph:
      - id: attn
        if: ${attention}
        from: [x, mask]
        attention: {kind: causal, padding_mask: true, heads: "${heads}", kv_heads: "${kv_heads}",
                    rope_theta: "${theta}", qkv_bias: false, proj_bias: false, norm_kind: rms, norm_eps: "${eps}",
                    qk_norm: rms, qk_norm_eps: "${eps}"}
      - id: conv
        if: ${not attention}
        from: [attn, mask]
        short_conv: {dim: "${dim}"}
      - {id: mlp, mlp: {hidden: "${hidden}", act: silu, gated: true, bias: false, norm_kind: rms,
                        norm_eps: "${eps}"}}
graph:
  - {id: embed, from: input_ids, embed: {vocab: "${vocab}", dim: "${dim}", pos: none}}
  - id: layers
    repeat: ${layers}
    from: [embed, attention_mask]
    layer: {attention: "${i in full_attn}"}
  - {id: norm, norm: {kind: rms, eps: "${eps}"}}
  - {id: head, head: {kind: lm, tie: embed}}
outputs: [head]
"""

MAPPING = r"""
name: hf lfm2
identify: ['^model\.embed_tokens\.weight$', '^model\.layers\.\d+\.conv\.in_proj\.weight$']
rules:
  - drop: ['rotary_emb\.', '^lm_head\.weight$']
  - fuse: {match: '^model\.layers\.(\d+)\.self_attn\.{part}\.weight$', parts: [q_proj, k_proj, v_proj], into: qkv}
  - fuse: {match: '^model\.layers\.(\d+)\.feed_forward\.{part}\.weight$', parts: [w1, w3], into: fc1}
  - rename:
      '^model\.embed_tokens\.': embed.tokens.
      '^model\.layers\.(\d+)\.self_attn\.qkv\.': 'layers.\1.attn.qkv.'
      '^model\.layers\.(\d+)\.self_attn\.out_proj\.': 'layers.\1.attn.proj.'
      '^model\.layers\.(\d+)\.self_attn\.q_layernorm\.': 'layers.\1.attn.q_norm.'
      '^model\.layers\.(\d+)\.self_attn\.k_layernorm\.': 'layers.\1.attn.k_norm.'
      '^model\.layers\.(\d+)\.operator_norm\.': 'layers.\1.${"attn" if g1 in full_attn else "conv"}.norm.'
      '^model\.layers\.(\d+)\.conv\.conv\.': 'layers.\1.conv.conv.conv.'
      '^model\.layers\.(\d+)\.conv\.(in_proj|out_proj)\.': 'layers.\1.conv.\2.'
      '^model\.layers\.(\d+)\.feed_forward\.fc1\.': 'layers.\1.mlp.fc1.'
      '^model\.layers\.(\d+)\.feed_forward\.w2\.': 'layers.\1.mlp.fc2.'
      '^model\.layers\.(\d+)\.ffn_norm\.': 'layers.\1.mlp.norm.'
      '^model\.embedding_norm\.': norm.
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import Lfm2Config, Lfm2ForCausalLM

    config = Lfm2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, full_attn_idxs=[1, 3], conv_L_cache=3,
                        block_auto_adjust_ff_dim=False, max_position_embeddings=128, pad_token_id=0)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = perturb_everything(Lfm2ForCausalLM(config).eval(), seed=1, scale=0.5)  # tokens that vary
    folder = tmp_path_factory.mktemp("lfm2")
    (folder / "lfm2.yaml").write_text(SPEC)
    (folder / "hf_lfm2.yaml").write_text(MAPPING)
    torch.save({k: v.contiguous() for k, v in ref.state_dict().items()}, folder / "ref.pt")
    model = archspec.build(str(folder / "lfm2.yaml"), weights=str(folder / "ref.pt"),
                           mapping=str(folder / "hf_lfm2.yaml"))
    return ref, model.eval(), folder


def prompts(batch=2, length=9):
    return torch.randint(3, 128, (batch, length), generator=torch.Generator().manual_seed(5))


def test_the_causal_convs_keep_a_state_and_the_decoder_a_cache(pair):
    _, model, _ = pair
    decoder = decoder_of(model)
    assert decoder.whole_sequence is None
    assert decoder.recent_paths == ["layers.0.conv.conv", "layers.2.conv.conv"] and decoder.recent_counts == [2, 2]


def test_greedy_tokens_as_hugging_faces(pair):
    ref, model, _ = pair
    ids = prompts()
    with torch.no_grad():
        assert (ref(ids).logits - model(ids)).abs().max() < 1e-4
        expected = ref.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(generate(model, ids, max_new_tokens=20), expected)


def test_left_padded_prompts_as_hugging_faces(pair):
    """Hugging Face zeroes a padded token's state before the short conv; the cache does the same
    (the prefill's last logits 0.21 off without it, here the greedy tokens the same either way)."""
    ref, model, _ = pair
    ids = prompts(batch=3)
    mask = torch.ones_like(ids)
    mask[0, :3], mask[2, :1] = 0, 0
    ids = ids.masked_fill(mask == 0, 0)
    decoder = decoder_of(model)
    with torch.no_grad():
        expected = ref.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False, eos_token_id=None,
                                pad_token_id=0)
        prefill = decoder.logits(ids, decoder.new_cache(DecodeState(mask, ids.shape[1] + 1)))  # [B, vocab]
        assert (prefill - ref(ids, attention_mask=mask).logits[:, -1]).abs().max() < 1e-4
    assert torch.equal(generate(model, ids, attention_mask=mask, max_new_tokens=12), expected)


def test_the_compiled_step_gives_the_eager_tokens(pair):
    _, model, _ = pair
    ids = prompts(batch=1)
    assert torch.equal(generate(model, ids, max_new_tokens=10, compile=True), generate(model, ids, max_new_tokens=10))


def test_the_exported_steps_carry_the_conv_state(pair):
    from archspec.compiler.backends.decode_step import save_programs
    from archspec.compiler.generate.step import DecodeStep

    _, model, folder = pair
    names = DecodeStep(model).names()
    assert names[0][-2:] == ["past_conv.0", "past_conv.1"] and names[1][-2:] == ["present_conv.0", "present_conv.1"]
    gap = save_programs(model, str(folder / "prefill.pt2"), str(folder / "decode_step.pt2"))
    assert gap < 1e-5


def test_check_reports_the_state_and_a_conv_that_is_not_causal_decodes_without_a_cache(pair):
    _, _, folder = pair
    report = archspec.check(str(folder / "lfm2.yaml"))
    assert "the last inputs of 2 causal conv layers: 1.00 KiB at any length (fp32)" in report.table()
    same = archspec.check(str(folder / "lfm2.yaml"), {"causal": False})
    assert ("KV cache (generate): none, 'layers.0.conv.conv': a conv reads the tokens around each one "
            "(`causal: true` reads earlier ones only, and decodes)") in same.table()


def test_bench_generate_says_why_a_spec_without_a_cache_is_not_timed(pair, capsys):
    """The LFM2 trial: bench --generate said 'cannot generate' of a spec that generates (without a cache)."""
    from archspec.cli import EXIT_SPEC, main

    _, _, folder = pair
    assert main(["bench", str(folder / "lfm2.yaml"), "--generate", "--set", "causal=false", "--new-tokens", "12"]) \
        == EXIT_SPEC
    err = capsys.readouterr().err
    assert "lfm2_tiny decodes without one ('layers.0.conv.conv': a conv reads the tokens around each one" in err
    assert "`archspec generate` and model.generate decode it all the same" in err


@pytest.fixture(scope="module")
def masked(pair):
    _, _, folder = pair
    (folder / "lfm2_masked.yaml").write_text(SPEC_MASKED)
    return archspec.build(str(folder / "lfm2_masked.yaml"), weights=str(folder / "ref.pt"),
                          mapping=str(folder / "hf_lfm2.yaml")).eval()


def test_a_conv_that_reads_the_padding_mask_is_hugging_faces_forward_and_generates(pair, masked):
    """The new-words trial wrote Hugging Face's masking before the conv as three nodes: its
    forward was exact on padded input and it could not generate (the mask was a second input
    generate does not feed); forward without it parted from generate's on padded prompts."""
    ref, _, _ = pair
    ids = prompts(batch=3)
    mask = torch.ones_like(ids)
    mask[0, :3], mask[2, :1] = 0, 0
    ids = ids.masked_fill(mask == 0, 0)
    with torch.no_grad():
        ours, theirs = masked(ids, mask), ref(ids, attention_mask=mask).logits
        real = mask.bool()
        assert (ours[real] - theirs[real]).abs().max() < 1e-4
        expected = ref.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False, eos_token_id=None,
                                pad_token_id=0)
    decoder = decoder_of(masked)
    assert decoder.whole_sequence is None and masked.facts.padding_inputs == ("attention_mask",)
    assert torch.equal(generate(masked, ids, attention_mask=mask, max_new_tokens=12), expected)


def test_the_command_line_generates_through_a_mapping_file(pair, capsys):
    """`archspec generate` took no --map: the new-words trial added `mappings:` to its spec to load
    a checkpoint in Hugging Face's naming."""
    from archspec.cli import EXIT_OK, main

    _, model, folder = pair
    argv = ["generate", str(folder / "lfm2.yaml"), "--weights", str(folder / "ref.pt"), "--map",
            str(folder / "hf_lfm2.yaml"), "--ids", "5,6,7", "--max-new-tokens", "6"]
    assert main(argv) == EXIT_OK
    printed = [int(t) for t in capsys.readouterr().out.split()]
    assert printed[-6:] == generate(model, torch.tensor([[5, 6, 7]]), max_new_tokens=6)[0, 3:].tolist()
