"""A decoder-only spec that takes an attention_mask beside its token ids (its causal attention
reads it as `padding_mask`, as Hugging Face's forward does) generates: generate() feeds the ids
alone and its own attention_mask marks the padding (the cache's mask hides the padded keys;
kv_cache.padding_inputs). Before, the mask was taken for an encoder-decoder's target ids and
generate refused with a wrong reason, or raised torch's error given a decoder_start_token_id.
And without an attention_mask, a pad_token_id found in the prompt marks the padding, as in
Hugging Face's generate (before, the padded tokens were attended to: other tokens, silently).

The reference is Hugging Face's Llama (test_generate.py's), greedy on a left-padded batch."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.weights.load import load_weights
from archspec.core.errors import SpecError

from tests.conftest import ROOT
from tests.generate.test_generate import LLAMA_SMALL, NEW, hf_greedy, left_padded, llama_reference, noisy

LAYER = """
blocks:
  layer:
    inputs: [x, mask]
    graph:
      - id: attn
        from: [x, mask]
        attention: {kind: causal, heads: "${heads}", kv_heads: "${kv_heads}", rope_theta: "${rope_theta}",
                    qkv_bias: false, proj_bias: false, norm_kind: rms, norm_eps: "${eps}", padding_mask: true}
      - id: mlp
        mlp: {hidden: "${hidden}", act: silu, gated: true, bias: false, norm_kind: rms, norm_eps: "${eps}"}
"""


def masked_llama(tmp_path, mask_reader: str = "", x: str = "embed") -> str:
    """specs/llama.yaml with an `attention_mask` input its attention reads as padding_mask
    (`mask_reader`: nodes before the layers, which read `x` and the mask)."""
    text = (ROOT / "specs" / "llama.yaml").read_text()
    text = text.replace("  input_ids: {shape: [B, L], dtype: int64}\n",
                        "  input_ids: {shape: [B, L], dtype: int64}\n  attention_mask: {shape: [B, L], dtype: int64}\n")
    start, end = text.index("  - id: layers\n"), text.index("  - id: norm\n")
    text = text[:start] + mask_reader + (f"  - id: layers\n    repeat: ${{layers}}\n    from: [{x}, attention_mask]\n"
                                         "    layer: {}\n\n") + text[end:]
    text = text.replace("\ngraph:\n", LAYER + "\ngraph:\n", 1).replace("mappings: [mappings/hf_llama.yaml]\n", "")
    path = tmp_path / "llama_masked.yaml"
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(Hugging Face's Llama, the masked spec with its weights, the plain spec with them)."""
    torch.manual_seed(0)
    ref = noisy(llama_reference().eval())
    plain = archspec.build(str(ROOT / "specs" / "llama.yaml"), LLAMA_SMALL).eval()
    load_weights(plain, ref.state_dict())
    ours = archspec.build(masked_llama(tmp_path_factory.mktemp("spec")), LLAMA_SMALL).eval()
    ours.load_state_dict(plain.state_dict())
    return ref, ours, plain


def test_the_mask_is_a_padding_input_and_the_forward_is_hugging_faces(models):
    ref, ours, _ = models
    assert ours.facts.padding_inputs == ("attention_mask",)
    ids, mask = left_padded()
    with torch.no_grad():
        expected, got = ref(ids, attention_mask=mask).logits, ours(ids, mask)
    kept = mask.bool()
    assert (got[kept] - expected[kept]).abs().max() < 1e-4  # the padded rows' logits are nobody's


@pytest.mark.parametrize("compile", [False, True])
def test_a_left_padded_batch_gives_hugging_faces_tokens(models, compile):
    ref, ours, _ = models
    ids, mask = left_padded()
    expected = hf_greedy(ref, ids, mask)
    got = ours.generate(ids, attention_mask=mask, max_new_tokens=NEW, pad_token_id=0, compile=compile)
    assert torch.equal(got, expected)


def test_a_mask_read_by_another_op_is_an_input_generate_cannot_feed(tmp_path):
    """The mask also read by a node that is no attention's key padding (an embedding of it): not
    a padding input, so generate, which cannot feed it, refuses the spec in words."""
    reader = ("  - id: kept\n    from: attention_mask\n    embed: {vocab: 2, dim: \"${dim}\", pos: none}\n"
              "  - {id: both, from: [embed, kept], add: {}}\n")  # a token-type-like embedding of the mask
    model = archspec.build(masked_llama(tmp_path, reader, x="both"), LLAMA_SMALL)
    assert model.facts.padding_inputs == ()
    with pytest.raises(SpecError, match="cannot generate.*takes 'attention_mask' for an encoder-decoder's target"):
        model.generate(torch.ones(1, 3, dtype=torch.long), max_new_tokens=2)


@pytest.mark.parametrize("spec", ["masked", "plain"])
def test_pad_token_id_marks_the_padding_without_an_attention_mask_as_hugging_face(models, spec):
    ref, masked, plain = models
    ours = masked if spec == "masked" else plain
    ids, _ = left_padded()  # padded with id 0
    with torch.no_grad():
        expected = ref.generate(ids, max_new_tokens=NEW, do_sample=False, pad_token_id=0)  # HF infers the mask
    assert torch.equal(ours.generate(ids, max_new_tokens=NEW, pad_token_id=0, compile=False), expected)
    unmasked = ours.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, compile=False)
    assert not torch.equal(unmasked, expected)  # the padding changes the tokens: the check above can fail


def test_a_pad_token_id_that_is_a_whole_sequence_asks_for_a_mask(models):
    _, _, plain = models
    ids = torch.tensor([[0, 0, 0], [5, 6, 7]])
    with pytest.raises(ValueError, match="pad_token_id 0 is every token of a sequence"):
        plain.generate(ids, max_new_tokens=2, pad_token_id=0)


def test_beam_search_refuses_a_prompt_the_pad_token_marks_as_padded(models):
    """Beam search takes prompts of one length: a padding it would ignore is refused, not decoded."""
    _, _, plain = models
    ids = torch.tensor([[0, 4, 5], [5, 6, 7]])
    with pytest.raises(ValueError, match="pad_token_id 0 occurs in input_ids.*num_beams > 1"):
        plain.generate(ids, max_new_tokens=2, pad_token_id=0, num_beams=2)
    plain.generate(ids, max_new_tokens=2, pad_token_id=0, num_beams=2, attention_mask=torch.ones_like(ids))


def test_the_build_writes_the_decoder_only_decode_programs(tmp_path):
    """`archspec build` of such a spec wrote an encoder-decoder's programs and failed (exit 3);
    it writes prefill.pt2 and decode_step.pt2, whose step takes no attention_mask input of the
    spec's (the decode step's own attention_mask marks the cache's padding)."""
    from archspec.cli import EXIT_OK, main

    spec = masked_llama(tmp_path)
    sizes = [f"--set={k}={v}" for k, v in {**LLAMA_SMALL, "layers": 1}.items()]
    assert main(["build", spec, *sizes, "-o", str(tmp_path / "out")]) == EXIT_OK
    assert (tmp_path / "out" / "decode_step.pt2").is_file() and not (tmp_path / "out" / "encoder.pt2").exists()


def test_an_encoder_decoders_source_is_not_masked_by_the_pad_token():
    """Hugging Face infers the mask for a decoder-only model only (generation/utils.py: `not
    is_encoder_decoder`): T5's source with pad ids and no attention_mask is attended whole."""
    t5 = archspec.build("t5_tiny", seed=1).eval()
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [4, 5, 6, 7, 8, 9]])  # pad id 0 in the first source
    common = dict(max_new_tokens=6, decoder_start_token_id=0, compile=False)
    whole = t5.generate(ids, attention_mask=torch.ones_like(ids), output_scores=True, return_dict_in_generate=True,
                        **common)
    got = t5.generate(ids, pad_token_id=0, output_scores=True, return_dict_in_generate=True, **common)
    masked = t5.generate(ids, attention_mask=(ids != 0).long(), output_scores=True, return_dict_in_generate=True,
                         **common)
    assert all(torch.equal(a, b) for a, b in zip(got.scores, whole.scores))
    assert not all(torch.equal(a, b) for a, b in zip(masked.scores, whole.scores))  # the mask would show
