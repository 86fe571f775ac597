"""Hugging Face's block_sequence_ids overlay (PaliGemma's prefix, Gemma 3's images, GIT's image
tokens: a token sees the tokens of its own block both ways, the rest causally) as the score part
`blockwise` on causal attention. The PaliGemma trial wrote it as a 4-7 step `mod` over global
attention: written out, never fused.

Against LlamaForCausalLM with every parameter perturbed, given the 4-D mask transformers' own
create_causal_mask builds from the same block ids (masking_utils.blockwise_overlay), with and
without padded keys; plain causal attention gives other logits, so the comparison can fail. The
part's mistakes are located errors."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")

SPEC = """\
archspec: 1
name: llama_blockwise
params: {vocab: 100, dim: 64, layers: 2, heads: 4, kv_heads: 2, context: 64}
dims:
  L: [1, context]
inputs:
  input_ids: {shape: [B, L], dtype: int64}
  block_ids: {shape: [B, L], dtype: int64}
  attention_mask: {shape: [B, L], dtype: int64}
blocks:
  layer:
    inputs: [x, groups, mask]
    graph:
      - id: attn
        from: [x, FROM mask]
        attention: {kind: causal, heads: "${heads}", kv_heads: "${kv_heads}", rope_theta: 10000.0, qkv_bias: false,
                    proj_bias: false, norm_kind: rms, norm_eps: 1.0e-6, padding_mask: true, SCORES}
      - {id: mlp, mlp: {hidden: 128, act: silu, gated: true, bias: false, norm_kind: rms, norm_eps: 1.0e-6}}
graph:
  - {id: embed, from: input_ids, embed: {vocab: "${vocab}", dim: "${dim}", pos: none}}
  - {id: layers, repeat: "${layers}", from: [embed, block_ids, attention_mask], layer: {}}
  - {id: norm, norm: {kind: rms, eps: 1.0e-6}}
  - {id: head, head: {kind: lm, vocab: "${vocab}"}}
mappings: [hf_llama]
"""
BLOCKWISE = "scores: [{blockwise: {ids: groups}}]"
LENGTH = 16


def blockwise_spec() -> str:
    return SPEC.replace("SCORES", BLOCKWISE).replace("FROM ", "groups, ")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=100, max_position_embeddings=64, rms_norm_eps=1e-6,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False,
                         attn_implementation="eager", eos_token_id=None, bos_token_id=None)
    torch.manual_seed(0)
    ref = LlamaForCausalLM(config).eval()
    perturb_everything(ref, seed=1, scale=0.1)
    folder = tmp_path_factory.mktemp("blockwise")
    torch.save(ref.state_dict(), folder / "ref.pt")
    (folder / "blockwise.yaml").write_text(blockwise_spec())
    (folder / "causal.yaml").write_text(SPEC.replace(", SCORES", "").replace("FROM ", ""))  # the groups unread
    return ref, folder


def inputs(padded: bool):
    """Two rows of ids, block ids and padding: a prefix of 6 (PaliGemma's image and prompt), and
    two images of 3 and 4 tokens amid text; the second row's last 4 tokens padded where asked."""
    ids = torch.randint(0, 100, (2, LENGTH), generator=torch.Generator().manual_seed(2))
    groups = torch.full((2, LENGTH), -1, dtype=torch.long)
    groups[0, :6] = 0
    groups[1, 2:5], groups[1, 7:11] = 0, 1
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    if padded:
        mask[1, -4:] = 0
    return ids, groups, mask


def hugging_faces(ref, ids, groups, mask):
    """The reference's logits under the 4-D mask transformers builds from the block ids."""
    from transformers.masking_utils import create_causal_mask

    embeds = ref.model.embed_tokens(ids)
    full = create_causal_mask(config=ref.config, inputs_embeds=embeds, attention_mask=mask, cache=None,
                              position_ids=torch.arange(ids.shape[1])[None], block_sequence_ids=groups)
    return ref(ids, attention_mask=full).logits


@pytest.mark.parametrize("padded", [False, True])
def test_logits_as_hugging_faces_block_overlay(pair, padded):
    ref, folder = pair
    model = archspec.build(str(folder / "blockwise.yaml"), weights=str(folder / "ref.pt")).eval()
    causal = archspec.build(str(folder / "causal.yaml"), weights=str(folder / "ref.pt")).eval()
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    ids, groups, mask = inputs(padded)
    with torch.no_grad():
        theirs = hugging_faces(ref, ids, groups, mask)
        assert (theirs - model(ids, groups, mask)).abs().max() < 1e-5
        assert (theirs - causal(ids, groups, mask)).abs().max() > 1e-3  # the blocks matter
        compiled = torch.compile(model)
        assert (theirs - compiled(ids, groups, mask)).abs().max() < 1e-5


def test_exported_program_takes_other_blocks(pair, tmp_path):
    """The overlay is read from the input at run time, not fixed at export."""
    ref, folder = pair
    model = archspec.build(str(folder / "blockwise.yaml"), weights=str(folder / "ref.pt")).eval()
    ids, groups, mask = inputs(False)
    program = torch.export.export(model, (ids, groups, mask))
    other = groups.roll(3, dims=1)
    with torch.no_grad():
        assert (program.module()(ids, other, mask) - hugging_faces(ref, ids, other, mask)).abs().max() < 1e-5


@pytest.mark.parametrize("change,words", [
    ("block_ids: {shape: [B, L], dtype: float32}", "must be int64 [B, L]"),
    ("block_ids: {shape: [B, L, 2], dtype: int64}", "must be int64 [B, L]"),
])
def test_mistakes_are_located_errors(change, words):
    text = blockwise_spec().replace("block_ids: {shape: [B, L], dtype: int64}", change)
    with pytest.raises(SpecError) as info:
        archspec.check_text(text)
    assert words in info.value.diagnostics[0].message and info.value.diagnostics[0].loc is not None


def test_cross_attention_is_refused():
    with pytest.raises(SpecError, match="cross attention's keys are another sequence's"):
        archspec.check_text("""\
archspec: 1
name: cross_blocks
inputs:
  x: {shape: [B, 8, 32]}
  memory: {shape: [B, 8, 32]}
  groups: {shape: [B, 8], dtype: int64}
graph:
  - {id: attn, from: [x, memory, groups], attention: {kind: cross, heads: 2, scores: [{blockwise: {ids: groups}}]}}
""")


GLOBAL_BLOCKS = """\
archspec: 1
name: global_blocks
dims: {L: [1, 64]}
inputs:
  x: [B, L, 32]
  ids: {shape: [B, L], dtype: int64}
graph:
  - {id: attn, from: [x, ids], attention: {kind: global, heads: 2, scores: [PARTS]}}
"""


def test_on_attention_that_hides_nothing_it_is_refused():
    """The Pixtral trial: on global attention blockwise built and changed nothing (0.0 from plain
    global attention, 1.5e-2 from the block-diagonal attention it reached for)."""
    with pytest.raises(SpecError) as info:
        archspec.check_text(GLOBAL_BLOCKS.replace("PARTS", "{blockwise: {ids: ids}}"))
    problem = info.value.diagnostics[0]
    assert "global attention hides no key here: it would change nothing" in problem.message
    assert problem.loc is not None and "`mod` score part" in str(problem.hint)


def test_beside_a_local_window_it_shows_the_blocks_keys_outside_the_window():
    """No block (-1): the local window alone; one block over the whole row: every key, global attention's."""
    model = archspec.build_text(GLOBAL_BLOCKS.replace("PARTS", "{local_window: {window: 2}}, {blockwise: {ids: ids}}"))
    window = archspec.build_text("""\
archspec: 1
name: window_only
inputs: {x: [B, 8, 32]}
graph:
  - {id: attn, attention: {kind: global, heads: 2, scores: [{local_window: {window: 2}}]}}
""")
    every = archspec.build_text("name: every\ninputs: {x: [B, 8, 32]}\ngraph:\n  - {id: attn, attention: {kind: global, heads: 2}}\n")
    window.load_state_dict(model.state_dict())
    every.load_state_dict(model.state_dict())
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        assert (model.eval()(x, torch.full((2, 8), -1)) - window.eval()(x)).abs().max() < 1e-6
        assert (model(x, torch.zeros(2, 8, dtype=torch.long)) - every.eval()(x)).abs().max() < 1e-6
        assert (window(x) - every(x)).abs().max() > 1e-3


def test_generate_refuses_in_words(pair):
    ref, folder = pair
    model = archspec.build(str(folder / "blockwise.yaml"), weights=str(folder / "ref.pt")).eval()
    with pytest.raises(SpecError, match="cannot generate"):
        model.generate(torch.randint(0, 100, (1, 4)), max_new_tokens=2)
