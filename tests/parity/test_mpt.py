"""MPT (Hugging Face's MptForCausalLM) in native words: ALiBi attention, no biases, LayerNorms
without a bias inside the sub-layers (`norm_bias: false`) and the q, k, v projection clamped
(`clip_qkv`). The MPT user trial wrote each bias-free sub-layer as a norm node, the sub-layer
without its norm and an add (6 nodes a block for 2), and clip_qkv as the whole attention from
tensor ops (17 nodes a layer, no fused kernel, no generate).

Against MptForCausalLM at a tiny config (eager attention, every parameter perturbed by seeded
noise, loaded through the mapping below): parameter counts, logits (left-padded too, the real
tokens), greedy and beam tokens against its generate; without the clamp, or with the norms' biases, the
network differs (another output, another count), so the comparisons can fail.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything
from archspec.core.errors import SpecError

transformers = pytest.importorskip("transformers")

SPEC = """\
archspec: 1
name: mpt_tiny
params: {vocab: 100, dim: 64, layers: 2, heads: 4, context: 64, clip: 0.3, norm_bias: false}
dims:
  L: [1, context]
inputs:
  input_ids: {shape: [B, L], dtype: int64}
  attention_mask: {shape: [B, L], dtype: int64}
blocks:
  mpt_block:
    inputs: [x, mask]
    graph:
      - id: attn
        from: [x, mask]
        attention: {kind: alibi, heads: "${heads}", qkv_bias: false, proj_bias: false, padding_mask: true,
                    norm_bias: "${norm_bias}", clip_qkv: "${clip}"}
      - {id: ffn, mlp: {ratio: 4, act: gelu, bias: false, norm_bias: "${norm_bias}"}}
graph:
  - {id: wte, from: input_ids, embed: {vocab: "${vocab}", dim: "${dim}", pos: none}}
  - {id: blocks, repeat: "${layers}", from: [wte, attention_mask], mpt_block: {}}
  - {id: norm_f, norm: {bias: false}}
  - {id: head, head: {kind: lm, tie: wte}}
mappings: [hf_mpt.yaml]
"""

MAPPING = r"""
archspec: 1
name: hf mpt
rules:
  - drop: ['^lm_head\.weight$']
  - rename: {'^transformer\.': ''}
  - rename:
      '^wte\.weight$': wte.tokens.weight
      '^blocks\.(\d+)\.norm_1\.': 'blocks.\1.attn.norm.'
      '^blocks\.(\d+)\.attn\.Wqkv\.': 'blocks.\1.attn.qkv.'
      '^blocks\.(\d+)\.attn\.out_proj\.': 'blocks.\1.attn.proj.'
      '^blocks\.(\d+)\.norm_2\.': 'blocks.\1.ffn.norm.'
      '^blocks\.(\d+)\.ffn\.up_proj\.': 'blocks.\1.ffn.fc1.'
      '^blocks\.(\d+)\.ffn\.down_proj\.': 'blocks.\1.ffn.fc2.'
"""


def reference(clip):
    from transformers import MptConfig, MptForCausalLM

    torch.manual_seed(0)
    config = MptConfig(d_model=64, n_heads=4, n_layers=2, vocab_size=100, max_seq_len=64, expansion_ratio=4,
                       no_bias=True, attn_config={"alibi": True, "clip_qkv": clip}, attn_implementation="eager",
                       pad_token_id=0)
    ref = MptForCausalLM(config).eval()
    perturb_everything(ref, seed=1, scale=0.1)
    return ref


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("mpt")
    (path / "spec.yaml").write_text(SPEC)
    (path / "hf_mpt.yaml").write_text(MAPPING)
    return path


def ours(folder, ref, **overrides):
    torch.save(ref.state_dict(), folder / "ref.pt")
    return archspec.build(str(folder / "spec.yaml"), overrides, weights=str(folder / "ref.pt")).eval()


def logits(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
    return out.logits if hasattr(out, "logits") else out


IDS = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [0, 0, 0, 12, 13, 14, 15]])
MASK = torch.tensor([[1] * 7, [0, 0, 0, 1, 1, 1, 1]])


@pytest.mark.parametrize("clip", [None, 0.3])
def test_logits_and_counts_as_hugging_faces(folder, clip):
    ref = reference(clip)
    model = ours(folder, ref, clip=clip)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    assert archspec.check(str(folder / "spec.yaml"), {"clip": clip}).params == sum(p.numel() for p in ref.parameters())
    theirs, mine = logits(ref, IDS, MASK), logits(model, IDS, MASK)
    real = MASK.bool()
    assert (theirs[real] - mine[real]).abs().max() < 1e-5


def test_the_clamp_and_the_biases_matter(folder):
    ref = reference(0.3)
    unclamped = ours(folder, ref, clip=None)
    assert (logits(ref, IDS, MASK) - logits(unclamped, IDS, MASK))[MASK.bool()].abs().max() > 0.01
    with_bias = archspec.check(str(folder / "spec.yaml"), {"norm_bias": True}).params
    assert with_bias == sum(p.numel() for p in ref.parameters()) + 2 * 2 * 64  # a bias on each block's 2 norms


def test_greedy_tokens_as_hugging_faces_generate(folder):
    ref = reference(0.3)
    model = ours(folder, ref)
    prompt, mask = IDS[:, :5], MASK[:, :5]
    theirs = ref.generate(input_ids=prompt, attention_mask=mask, max_new_tokens=8, do_sample=False)
    mine = model.generate(prompt, attention_mask=mask, max_new_tokens=8)
    assert torch.equal(theirs, mine)


def test_beams_as_hugging_faces_for_a_spec_that_takes_a_mask(folder):
    """Beam search runs forward over whole sequences: a spec that takes an attention_mask gets ones
    (the OLMo trial's crash: forward() missing 'attention_mask')."""
    ref = reference(0.3)
    model = ours(folder, ref)
    prompt = IDS[:1, :5]
    theirs = ref.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, num_beams=3,
                          do_sample=False)
    assert torch.equal(model.generate(prompt, max_new_tokens=8, num_beams=3), theirs)


@pytest.mark.parametrize("right, wrong, message", [
    ('bias: false, norm_bias: "${norm_bias}"}', 'bias: false, norm_bias: "${norm_bias}", norm_kind: rms}',
     "norm_bias: false takes the LayerNorm's bias away, but an RMSNorm has no bias"),
    ('bias: false, norm_bias: "${norm_bias}"}', 'bias: false, norm_bias: "${norm_bias}", norm: none}',
     "norm_bias is given but norm: none leaves no norm"),
    ('clip_qkv: "${clip}"', "clip_qkv: -1.0", "clip_qkv"),
])
def test_options_that_cannot_be_are_located_errors(right, wrong, message):
    assert SPEC.count(right) == 1
    with pytest.raises(SpecError, match=message) as error:
        archspec.check_text(SPEC.replace(right, wrong))
    assert ":" in str(error.value).splitlines()[0]  # located: <spec>:line:col
