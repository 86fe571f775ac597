"""generate() (compiler/generate/): new tokens from a built decoder-only spec with a key/value
cache, token for token as Hugging Face's generate.

Small GPT-2 and Llama (Llama with grouped-query attention: 4 query heads, 2 key/value heads)
are built from the shipped specs with overrides, the Hugging Face reference of the same size
gets seeded noise on every parameter, and its weights are loaded into ours through the
spec's mapping. Greedy decoding of 32 new tokens must give the same ids at batch 1 and for a
left-padded batch of 3 (Hugging Face's positions from the attention mask), and also the same
ids as our own model decoded without a cache (the whole sequence through forward each step).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import archspec
from archspec.compiler.generate import generate
from archspec.cli.main import main as cli_main
from archspec.compiler.modules.attention.common import takes_cache
from archspec.compiler.weights.load import load_weights
from archspec.core.errors import SpecError

from tests.conftest import ROOT, perturb_constants
from tests.parity.test_vocabulary import perturb_everything

NEW = 32
VOCAB = 500
GPT2_SMALL = {"dim": 64, "depth": 2, "heads": 4, "vocab": VOCAB}
LLAMA_SMALL = {"dim": 64, "hidden": 96, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": VOCAB, "context": 256}


noisy = perturb_everything  # seeded noise on every parameter (references zero-initialise many)


def gpt2_reference():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel._from_config(config, attn_implementation="eager")


def llama_reference():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=256,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LlamaForCausalLM._from_config(config, attn_implementation="eager")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: one intra-op thread is faster, and far steadier on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


CASES = {"gpt2": (gpt2_reference, GPT2_SMALL), "llama": (llama_reference, LLAMA_SMALL)}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request):
    """(Hugging Face's model, ours with its weights), both in eval."""
    reference, overrides = CASES[request.param]
    torch.manual_seed(0)
    ref = noisy(reference().eval())
    ours = archspec.build(str(ROOT / "specs" / f"{request.param}.yaml"), overrides).eval()
    load_weights(ours, ref.state_dict())
    return ref, ours


def prompt(batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@contextlib.contextmanager
def handed_caches(model):
    """{attention module: the KVCache generate hands it}, the latest call's: each cached layer's
    `cache` argument (the decode graph's cache.layer(path)), watched by hooks."""
    held = {}

    def watch(module, args, kwargs):
        if kwargs.get("cache") is not None:
            held[module] = kwargs["cache"]

    hooks = [m.register_forward_pre_hook(watch, with_kwargs=True) for m in model.modules()
             if takes_cache(m)]
    try:
        yield held
    finally:
        for hook in hooks:
            hook.remove()


def left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    """Three prompts of 9, 6 and 8 tokens, left-padded with id 0: (ids, attention_mask)."""
    ids = prompt(3, 9, seed=2)
    mask = torch.ones_like(ids)
    mask[0, :0], mask[1, :3], mask[2, :1] = 0, 0, 0
    return ids.masked_fill(mask == 0, 0), mask


def hf_greedy(ref, ids, mask=None, **kwargs):
    with torch.no_grad():
        return ref.generate(ids, attention_mask=mask if mask is not None else torch.ones_like(ids),
                            max_new_tokens=NEW, do_sample=False, pad_token_id=0, **kwargs)


def uncached_greedy(model, ids, new: int = NEW):
    """Greedy decoding without a cache: the whole sequence through forward at every step."""
    with torch.no_grad():
        for _ in range(new):
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


# -- token for token as Hugging Face ----------------------------------------------------------------


def test_greedy_equals_hugging_face_at_batch_1(pair):
    ref, ours = pair
    ids = prompt(1, 7, seed=1)
    out = generate(ours, ids, max_new_tokens=NEW)
    assert out.dtype == torch.long and out.shape == (1, 7 + NEW)
    assert torch.equal(out, hf_greedy(ref, ids))
    assert torch.equal(out, uncached_greedy(ours, ids))


def test_greedy_equals_hugging_face_on_a_left_padded_batch(pair):
    ref, ours = pair
    ids, mask = left_padded()
    out = generate(ours, ids, max_new_tokens=NEW, attention_mask=mask)
    assert torch.equal(out, hf_greedy(ref, ids, mask))
    start = int((mask[1] == 0).sum())  # the padded row alone, unpadded, decodes the same
    assert torch.equal(out[1:2, start:], uncached_greedy(ours, ids[1:2, start:]))


def test_eos_stops_a_sequence_and_pads_it_as_hugging_face(pair):
    ref, ours = pair
    ids, mask = left_padded()
    greedy = generate(ours, ids, max_new_tokens=NEW, attention_mask=mask)
    eos = int(greedy[1, ids.shape[1] + 4])  # what row 1 produces fifth
    out = generate(ours, ids, max_new_tokens=NEW, attention_mask=mask, eos_token_id=eos, pad_token_id=0)
    assert torch.equal(out, hf_greedy(ref, ids, mask, eos_token_id=eos))
    assert int(out[1, -1]) == 0  # padded after its end


def test_forward_is_unchanged_after_generate(pair):
    _, ours = pair
    ids = prompt(2, 10, seed=3)
    with torch.no_grad():
        before = ours(ids)
        generate(ours, ids, max_new_tokens=4)
        after = ours(ids)
    assert torch.equal(before, after)
    assert all("kv_cache" not in m.__dict__ and "positions" not in m.__dict__ for m in ours.modules())


def test_the_cache_holds_only_the_key_value_heads():
    """Llama's grouped-query attention caches its 2 key/value heads, not its 4 query heads."""
    ours = archspec.build(str(ROOT / "specs" / "llama.yaml"), LLAMA_SMALL).eval()
    seen = []

    with handed_caches(ours) as held:
        class Watch:
            def put(self, tokens):
                seen.extend(tuple(c.keys.shape) for c in held.values() if c.keys is not None)

            def end(self):
                pass

        generate(ours, prompt(2, 5, seed=4), max_new_tokens=3, streamer=Watch())
    assert seen and set(seen) == {(2, 2, 5 + 3, 16)}  # [B, kv_heads, prompt + new, head_dim]


# -- sampling ---------------------------------------------------------------------------------------


def test_warpers_equal_hugging_faces():
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    from archspec.compiler.generate.sampling import Sampling

    scores = torch.randn(4, 50, generator=torch.Generator().manual_seed(5))
    ids = torch.zeros(4, 1, dtype=torch.long)
    expected = TopPLogitsWarper(0.8)(ids, TopKLogitsWarper(10)(ids, TemperatureLogitsWarper(0.7)(ids, scores)))
    assert torch.equal(Sampling(True, temperature=0.7, top_k=10, top_p=0.8).warp(scores), expected)


def test_sampling_is_seeded_and_top_k_1_is_greedy(pair):
    _, ours = pair
    ids = prompt(2, 6, seed=6)

    def sample(seed, **kw):
        return generate(ours, ids, max_new_tokens=8, do_sample=True, generator=torch.Generator().manual_seed(seed), **kw)

    assert torch.equal(sample(1, temperature=0.9, top_p=0.9), sample(1, temperature=0.9, top_p=0.9))
    assert torch.equal(sample(2, top_k=1), generate(ours, ids, max_new_tokens=8))


# -- a sliding window --------------------------------------------------------------------------------


def sliding_llama(window: int = 5):
    text = (ROOT / "specs" / "llama.yaml").read_text()
    text = text.replace("attention: {kind: causal,", f"attention: {{kind: sliding, window: {window},")
    assert "kind: sliding" in text
    return noisy(archspec.build_text(text, LLAMA_SMALL, name="sliding.yaml").eval())


@pytest.mark.parametrize("length", [3, 8])  # a prompt shorter and longer than the window
def test_sliding_window_decodes_as_forward_without_a_cache(length):
    ours = sliding_llama()
    ids = prompt(1, length, seed=7)
    assert torch.equal(generate(ours, ids, max_new_tokens=20), uncached_greedy(ours, ids, 20))


def test_check_counts_a_sliding_windows_ring_buffer():
    text = (ROOT / "specs" / "llama.yaml").read_text().replace("attention: {kind: causal,",
                                                                "attention: {kind: sliding, window: 100,")
    cache = archspec.check_text(text, name="sliding.yaml").to_json()["kv_cache"]
    assert cache["bytes_at_max_length"]["fp32"] == 4 * 2 * 2 * 64 * 4 * 100  # the window, not 2048 tokens


def test_sliding_window_keeps_a_ring_buffer_of_the_window_only():
    ours, shapes = sliding_llama(), []

    with handed_caches(ours) as held:
        class Watch:
            def put(self, tokens):
                shapes.extend(tuple(c.keys.shape) for c in held.values())

            def end(self):
                pass

        ids, mask = left_padded()
        out = generate(ours, ids, max_new_tokens=12, attention_mask=mask, streamer=Watch())
    assert set(shapes) == {(3, 2, 5, 16)}  # [B, kv_heads, window, head_dim], not prompt + new
    start = int((mask[1] == 0).sum())  # a left-padded row decodes as alone
    assert torch.equal(out[1:2, start:], uncached_greedy(ours, ids[1:2, start:], 12))


# -- refusals, in words ------------------------------------------------------------------------------


def test_a_spec_without_causal_attention_is_refused():
    bert = archspec.build(str(ROOT / "specs" / "bert_base.yaml"), {"dim": 32, "depth": 1, "heads": 2,
                                                                  "ffn": 64, "vocab": 100})
    with pytest.raises(SpecError, match="cannot generate"):
        generate(bert, prompt(1, 4, seed=8) % 100)


TYPED_CAUSAL_LM = """name: typed_lm
inputs:
  input_ids: {shape: [B, 8], dtype: int64}
  token_type_ids: {shape: [B, 8], dtype: int64}
graph:
  - {id: embed, from: [input_ids, token_type_ids], embed: {vocab: 50, dim: 16, types: 2, max_len: 8}}
  - {id: attn, attention: {kind: causal, heads: 2}}
  - {id: head, head: {kind: lm, tie: embed}}
"""


def test_a_causal_lm_with_token_types_is_refused_in_words_and_builds(tmp_path):
    """The RoFormer trial's causal LM with token_type_ids was taken for an encoder-decoder: generate
    asked for a decoder start token, then failed inside ("a bug in archspec"), and the default
    build stopped with exit 3 writing encoder.pt2."""
    model = archspec.build_text(TYPED_CAUSAL_LM, seed=0)
    with pytest.raises(SpecError, match="'embed': it reads 'input_ids' and 'token_type_ids' together"):
        generate(model, torch.tensor([[1, 2, 3]]))
    (tmp_path / "typed.yaml").write_text(TYPED_CAUSAL_LM)
    assert cli_main(["build", str(tmp_path / "typed.yaml"), "-o", str(tmp_path / "out")]) == 0
    assert not (tmp_path / "out" / "encoder.pt2").exists()


def test_ids_outside_the_vocabulary_and_too_many_tokens_are_refused(pair):
    _, ours = pair
    with pytest.raises(ValueError, match=f"token id {VOCAB} is outside the vocabulary"):
        generate(ours, torch.tensor([[1, VOCAB]]), max_new_tokens=2)
    with pytest.raises(ValueError, match="beyond .* longest sequence") as refused:
        generate(ours, torch.tensor([[1, 2]]), max_new_tokens=5000)
    said = str(refused.value)  # where the length is declared, and what to do (the SmolLM3 and ERNIE trials)
    assert "(declared at " in said and "ask for fewer new tokens" in said and "`--set context=5002`" in said


# -- archspec generate ---------------------------------------------------------------------------------


def cli(capsys, *args):
    from archspec.cli.main import main

    code = main(["generate", *args])
    out, err = capsys.readouterr()
    return code, out, err


GPT2_SETS = [a for k, v in GPT2_SMALL.items() for a in ("--set", f"{k}={v}")]


def test_cli_prints_the_new_ids_of_generate(capsys):
    code, out, _ = cli(capsys, "gpt2", *GPT2_SETS, "--ids", "5,6,7", "--max-new-tokens", "6")
    assert code == 0
    model = archspec.build(str(ROOT / "specs" / "gpt2.yaml"), GPT2_SMALL, seed=0).eval()
    expected = generate(model, torch.tensor([[5, 6, 7]]), max_new_tokens=6)[0, 3:].tolist()
    assert [int(t) for t in out.split()] == expected
    assert out == " ".join(map(str, expected)) + "\n"  # one space between ids, none trailing


def test_cli_generates_with_an_encoder_decoder(capsys):
    code, out, _ = cli(capsys, "transformer_base", "--set", "layers=1", "--set", "dim=32", "--set", "heads=2",
                       "--ids", "5,6,7", "--max-new-tokens", "4", "--decoder-start", "1")
    assert code == 0 and len(out.split()) == 4


def test_cli_continues_an_encoder_decoders_target_prompt(capsys):
    """--decoder-ids: the target's first ids, the start token put before them (Hugging Face's rule);
    the new ids printed are those of generate(decoder_input_ids=...)."""
    sets = ["--set", "layers=1", "--set", "dim=32", "--set", "heads=2"]
    code, out, _ = cli(capsys, "transformer_base", *sets, "--ids", "5,6,7", "--max-new-tokens", "4",
                       "--decoder-start", "1", "--decoder-ids", "9,12")
    assert code == 0
    model = archspec.build(str(ROOT / "specs" / "transformer_base.yaml"), {"layers": 1, "dim": 32, "heads": 2},
                           seed=0).eval()
    full = generate(model, torch.tensor([[5, 6, 7]]), max_new_tokens=4, decoder_start_token_id=1,
                    decoder_input_ids=torch.tensor([[9, 12]]))
    assert full[0, :3].tolist() == [1, 9, 12] and [int(t) for t in out.split()] == full[0, 3:].tolist()
    code, _, err = cli(capsys, "gpt2", *GPT2_SETS, "--ids", "1", "--decoder-ids", "2")
    assert code == 2 and "--decoder-ids is for encoder-decoder specs" in err
    with pytest.raises(ValueError, match="decoder_input_ids has 2 sequences and the source 1"):
        model.generate(torch.tensor([[5, 6, 7]]), decoder_start_token_id=1, decoder_input_ids=torch.ones(2, 1).long())


@pytest.mark.parametrize("args, code, words", [
    (["bert_base", "--set", "depth=1", "--ids", "1,2"], 1, "cannot generate: none of its outputs is an lm head"),
    (["vit_ti16", "--set", "depth=1", "--ids", "1,2"], 1, "cannot generate: none of its outputs is an lm head"),
    (["gpt2", *GPT2_SETS, "--ids", f"1,{VOCAB}"], 2, f"token id {VOCAB} is outside the vocabulary of gpt2"),
    (["gpt2", *GPT2_SETS, "--ids", "1,2", "--max-new-tokens", "1023"], 2, "beyond gpt2's longest sequence, 1024"),
    (["gpt2", *GPT2_SETS, "--ids", "1,two"], 2, "--ids takes comma-separated token ids"),
    (["gpt2", *GPT2_SETS, "--ids", "1,\u00b2"], 2, "--ids takes comma-separated token ids"),  # a digit int() refuses
    (["gpt2", *GPT2_SETS, "--ids", "9" * 5000], 2, "--ids takes comma-separated token ids"),
    (["gpt2", *GPT2_SETS, "--ids", "1", "--do-sample", "--top-p", "1.5"], 2, "--top-p must be in (0, 1]"),
    (["gpt2", *GPT2_SETS, "--ids", "1", "--decoder-start", "0"], 2, "--decoder-start is for encoder-decoder"),
    (["transformer_base", "--set", "layers=1", "--set", "dim=32", "--set", "heads=2", "--ids", "1"], 2,
     "give the target's first id with --decoder-start"),
])
def test_cli_refuses_in_words(capsys, args, code, words):
    got, out, err = cli(capsys, *args)
    assert got == code and words in err and "Traceback" not in err, err


# -- archspec check: the cache's size -----------------------------------------------------------------


def test_check_reports_the_cache_per_token_and_at_the_longest_sequence():
    gpt2 = archspec.check(str(ROOT / "specs" / "gpt2.yaml")).to_json()["kv_cache"]
    per_token = 12 * 2 * 768  # layers x (key + value) x 12 heads of 64
    assert gpt2["bytes_per_token"] == {"fp32": per_token * 4, "bf16": per_token * 2}
    assert gpt2["bytes_at_max_length"] == {"fp32": per_token * 4 * 1024, "bf16": per_token * 2 * 1024}
    llama = archspec.check(str(ROOT / "specs" / "llama.yaml")).to_json()["kv_cache"]
    assert [layer["kv_heads"] for layer in llama["layers"]] == [2] * 4  # the key/value heads, not the 8 query heads
    assert llama["layers"][0]["bytes_per_token"] == {"fp32": 2 * 2 * 64 * 4, "bf16": 2 * 2 * 64 * 2}
    assert "KV cache (generate, 12 layers): 72.00 KiB per token, 72.00 MiB at 1,024 tokens (fp32)" in \
        archspec.check(str(ROOT / "specs" / "gpt2.yaml")).table()
    mistral = archspec.check(str(ROOT / "specs" / "mistral.yaml")).table()  # sliding layers: the Cohere2 trial
    assert "up to 1.00 KiB per token (a sliding layer keeps its window), 8.00 KiB at 128 tokens (fp32)" in mistral


def test_check_reports_no_cache_for_specs_that_cannot_generate():
    for name in ("vit_ti16", "bert_base", "clip_vit_b32"):
        report = archspec.check(str(ROOT / "specs" / f"{name}.yaml"))
        assert report.to_json()["kv_cache"] is None and "KV cache" not in report.table()


AUDIO_SOURCE = """
archspec: 1
name: audio_seq2seq
dims:
  T: [1, 16]
inputs:
  features: [B, 8, 32]                   # [B, mels, frames]: no token ids
  decoder_input_ids: {shape: [B, T], dtype: int64}
graph:
  - {id: frames, from: features, rearrange: {pattern: "b c n -> b n c", as: tokens}}
  - {id: conv, conv: {dim: 1, out: 16, kernel: 3, stride: 2, padding: 1}}
  - {id: encoder, attention: {kind: global, heads: 2}}
  - {id: embed, from: decoder_input_ids, embed: {vocab: 50, dim: 16, pos: learned, max_len: 16}}
  - {id: self_attn, attention: {kind: causal, heads: 2}}
  - {id: cross_attn, from: [self_attn, encoder], attention: {kind: cross, heads: 2}}
  - {id: head, head: {kind: lm, tie: embed}}
"""


def test_a_source_of_audio_features_generates_in_python(tmp_path, capsys):
    """Whisper as a user wrote it: check reports its caches, build exports model.pt2 alone and says
    why (the encoder and decoder programs take token sources for now), generate takes the features as
    input_ids in Python (tests/parity/test_whisper.py against Hugging Face's) and the command line,
    which feeds token ids, refuses in words (a usage error, exit 2)."""
    from archspec.cli.main import main

    report = archspec.check_text(AUDIO_SOURCE)
    assert report.to_json()["kv_cache"]["cross_layers"] is not None and "KV cache" in report.table()
    spec = tmp_path / "audio.yaml"
    spec.write_text(AUDIO_SOURCE)
    assert main(["build", str(spec), "-o", str(tmp_path / "out")]) == 0
    assert not (tmp_path / "out" / "decoder_step.pt2").exists() and (tmp_path / "out" / "model.pt2").exists()
    built = capsys.readouterr()
    assert "note: no encoder or decoder programs: they take a source of token ids for now" in built.out + built.err
    assert main(["generate", str(spec), "--ids", "1,2", "--decoder-start", "1"]) == 2  # a usage error
    err = capsys.readouterr().err
    assert "source 'features' is [B, 8, 32], not token ids" in err and "Traceback" not in err
    model = archspec.build_text(AUDIO_SOURCE).eval()
    features = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(0))
    out = generate(model, features, decoder_start_token_id=1, max_new_tokens=4)
    assert out.shape == (2, 5) and out.dtype == torch.long and out[:, 0].eq(1).all()
    with torch.no_grad():  # the first new token is the argmax of the forward's logits after the start token
        first = model(features, torch.ones(2, 1, dtype=torch.long)).argmax(-1)[:, -1]
    assert torch.equal(out[:, 1], first)


def test_check_reports_the_decoders_cache_of_an_encoder_decoder():
    cache = archspec.check(str(ROOT / "specs" / "transformer_base.yaml")).to_json()["kv_cache"]
    assert [layer["path"] for layer in cache["layers"]] == [f"decoder.layers.{i}.self_attn" for i in range(6)]
    assert cache["bytes_per_token"]["fp32"] == 6 * 2 * 512 * 4
    source = cache["cross_layers"]  # the source's keys and values, kept by each cross attention
    assert [layer["path"] for layer in source["layers"]] == [f"decoder.layers.{i}.cross_attn" for i in range(6)]
    assert source["bytes_per_token"]["fp32"] == 6 * 2 * 512 * 4 and source["max_length"] == 256
    assert "the source's keys and values for 6 cross attention layers: 24.00 KiB per source token" in \
        archspec.check(str(ROOT / "specs" / "transformer_base.yaml")).table()
    assert archspec.check(str(ROOT / "specs" / "gpt2.yaml")).to_json()["kv_cache"]["cross_layers"] is None


def test_checks_cache_size_is_what_generate_allocates():
    ours = archspec.build(str(ROOT / "specs" / "llama.yaml"), LLAMA_SMALL).eval()
    with handed_caches(ours) as held:
        generate(ours, prompt(1, 5, seed=9), max_new_tokens=3)
    assert len(held) == 2  # both layers
    allocated = sum(c.keys.nbytes + c.values.nbytes for c in held.values()) // (5 + 3)  # per slot, at batch 1
    reported = archspec.check(str(ROOT / "specs" / "llama.yaml"), LLAMA_SMALL).to_json()["kv_cache"]
    assert allocated == reported["bytes_per_token"]["fp32"]


# -- the 2017 Transformer: encoder-decoder ----------------------------------------------------------


def transformer_pair():
    """torch.nn.Transformer (small, no dropout; noise on its constant norms and biases, as
    test_parity: noise on every weight makes its greedy output one repeated token) and our
    transformer_base of its size with its weights (the shared table is ours: nn.Transformer has none)."""
    torch.manual_seed(0)
    ref = perturb_constants(nn.Transformer(d_model=64, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                                           dim_feedforward=128, dropout=0.0, batch_first=True).eval())
    ours = archspec.build(str(ROOT / "specs" / "transformer_base.yaml"),
                          {"dim": 64, "heads": 4, "ffn": 128, "layers": 2, "vocab": VOCAB}).eval()
    load_weights(ours, ref.state_dict())
    return ref, ours


def paper_embedding(table, ids):
    """table[ids] * sqrt(d) + the sinusoids (Vaswani et al. 3.4, 3.5), written out here."""
    d = table.shape[1]
    pos = torch.arange(ids.shape[1], dtype=torch.float64)[:, None]
    angle = pos / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).float()
    return table[ids] * d ** 0.5 + pe


def reference_greedy(ref, table, src, start: int, new: int):
    """Greedy decoding of nn.Transformer by a plain loop: the whole target through it each step."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tgt = torch.full((src.shape[0], 1), start, dtype=torch.long)
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
            for _ in range(new):
                mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
                out = ref(paper_embedding(table, src), paper_embedding(table, tgt), tgt_mask=mask, tgt_is_causal=True)
                tgt = torch.cat([tgt, F.linear(out[:, -1], table).argmax(-1, keepdim=True)], dim=1)
    finally:
        torch.backends.mha.set_fastpath_enabled(before)
    return tgt


def test_transformer_greedy_equals_torch_transformer_decoded_by_a_loop():
    ref, ours = transformer_pair()
    table = ours.src_embed.tokens.weight.detach()
    for batch in (1, 3):
        src = prompt(batch, 11, seed=10 + batch)
        out = generate(ours, src, max_new_tokens=NEW, decoder_start_token_id=1)
        assert out.shape == (batch, 1 + NEW)
        assert torch.equal(out, reference_greedy(ref, table, src, 1, NEW))


def test_transformer_needs_a_decoder_start_and_unpadded_sources():
    _, ours = transformer_pair()
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        generate(ours, prompt(1, 5, seed=11), max_new_tokens=2)
    with pytest.raises(ValueError, match="cannot be padded"):
        generate(ours, prompt(2, 5, seed=11), max_new_tokens=2, decoder_start_token_id=1,
                 attention_mask=torch.tensor([[0, 1, 1, 1, 1], [1] * 5]))


# -- the decode step as a program: the cache as inputs and outputs -----------------------------------------


def decode_with_step(step_fn, prefill, ids, mask, new: int):
    """Greedy decoding with an explicit cache: the prefill (eager DecodeStep, no past), then
    `step_fn` (the exported decode step) once per token, the cache passed back in."""
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    empty = [torch.zeros(shape) for shape in prefill.cache_shapes(ids.shape[0], 0)]
    with torch.no_grad():
        logits, *cache = prefill(ids, mask, positions, *empty)
        for i in range(new):
            chosen = logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, chosen], dim=1)
            if i + 1 == new:
                return ids
            mask, positions = torch.cat([mask, torch.ones_like(chosen)], dim=1), positions[:, -1:] + 1
            logits, *cache = step_fn(chosen, mask, positions, *[torch.as_tensor(c) for c in cache])


def test_exported_decode_step_decodes_as_generate():
    from archspec.compiler.generate.step import DecodeStep, export_decode_step

    ours = noisy(archspec.build(str(ROOT / "specs" / "llama.yaml"), {**LLAMA_SMALL, "layers": 1}).eval())
    ids, mask = left_padded()
    program = export_decode_step(ours).module()  # batch and cache length dynamic: one program for both
    expected = generate(ours, ids, max_new_tokens=8, attention_mask=mask)
    assert torch.equal(decode_with_step(program, DecodeStep(ours), ids, mask, 8), expected)
    assert torch.equal(decode_with_step(program, DecodeStep(ours), ids[:1], mask[:1], 8), expected[:1])
    names = DecodeStep(ours).names()
    assert names[0][:5] == ["input_ids", "attention_mask", "position_ids", "past_key_values.0.key",
                            "past_key_values.0.value"]
    assert names[1][:3] == ["logits", "present.0.key", "present.0.value"]


@pytest.mark.slow
def test_onnx_decode_step_decodes_as_generate(tmp_path):
    import onnxruntime

    from archspec.compiler.generate.step import DecodeStep, export_decode_step_onnx

    ours = noisy(archspec.build(str(ROOT / "specs" / "gpt2.yaml"), GPT2_SMALL).eval())
    path = str(tmp_path / "decode_step.onnx")
    inputs, _ = export_decode_step_onnx(ours, path)
    session = onnxruntime.InferenceSession(path)

    def step(*args):
        return session.run(None, {name: a.numpy() for name, a in zip(inputs, args)})

    ids, mask = left_padded()

    def run(*args):
        logits, *cache = step(*args)
        return (torch.as_tensor(logits), *cache)

    got = decode_with_step(run, DecodeStep(ours), ids, mask, 8)
    assert torch.equal(got, generate(ours, ids, max_new_tokens=8, attention_mask=mask))


# -- logits plus a bias after the lm head (BART's final_logits_bias) ----------------------------------

BIASED_LM = """
name: biased
params: {bias_node: final_logits_bias}
dims: {L: [1, 32]}
inputs:
  ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 50, dim: 32, max_len: 32}}
  - {id: attn, attention: {kind: causal, heads: 4}}
  - {id: mlp, mlp: {ratio: 2}}
  - {id: head, head: {kind: lm, tie: embed}}
  - {id: final_logits_bias, param: {shape: [50], init: zeros, learned: false}}
  - {id: mixed, from: mlp, linear: {dim: 50}}
  - {id: logits, from: [head, "${bias_node}"], add: {}}
outputs: [logits]
"""


def test_an_lm_heads_logits_plus_a_param_generate_with_the_bias():
    from archspec.primitives.kv_cache import generates

    torch.manual_seed(0)
    model = perturb_everything(archspec.build_text(BIASED_LM)).eval()
    with torch.no_grad():
        model.final_logits_bias.value.copy_(3 * torch.randn(1, 50))  # a bias that changes the argmax
    prompt = torch.randint(0, 50, (2, 5))
    out = model.generate(prompt, max_new_tokens=6)
    ids = prompt
    with torch.no_grad():
        for _ in range(6):  # greedy by hand over the whole forward, bias included
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ids)
    assert generates(archspec.check_text(BIASED_LM).graph)
    assert not generates(archspec.check_text(BIASED_LM.replace("bias_node: final_logits_bias",
                                                              "bias_node: mixed")).graph)  # a computed term


def test_inputs_given_by_name_are_checked_as_given_in_order():
    """model(input_ids=..., attention_mask=...): the Pegasus trial's 70-token source, given by name
    to a spec of 64, met a torch error deep in the model; in order it was a ValueError naming the
    input and the spec's line."""
    model = archspec.build_text(TYPED_CAUSAL_LM, seed=0)
    ids = torch.randint(0, 50, (1, 9))
    with pytest.raises(ValueError, match=r"input 'input_ids' is \[1, 9\]; the spec declares \[B, 8\]"):
        model(input_ids=ids, token_type_ids=torch.zeros_like(ids))
    with pytest.raises(ValueError, match="input 'token_type_ids' has B = 2, and input 'input_ids' has B = 1"):
        model(ids[:, :8], token_type_ids=torch.zeros(2, 8, dtype=torch.long))
    out = model(input_ids=ids[:, :8], token_type_ids=torch.zeros(1, 8, dtype=torch.long))
    assert out.shape == (1, 8, 50)
