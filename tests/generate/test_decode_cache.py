"""The decode state is handed to the model, not set on it (compiler/generate/cache.py's DecodeCache,
decode_graph.py): generate() calls the model's decode graph, a copy of its fx graph with one more
input, `cache`, which it hands as an argument to the modules that read it. While generate runs
(seen from a streamer, between steps) and after it, every module's attributes are the ones it had
before: nothing set, nothing removed, no forward swapped; the model's graph, code and weights are
unchanged. Two calls' caches are independent objects, so two decodings can be interleaved by hand.
"""

from __future__ import annotations

import torch

import archspec
from archspec.compiler.generate import generate
from archspec.compiler.generate.cache import DecodeState
from archspec.compiler.generate.driver import decoder_of

from tests.conftest import ROOT
from tests.generate.test_generate import one_thread  # noqa: F401  (the autouse fixture: one intra-op thread)
from tests.generate.test_generate import LLAMA_SMALL, VOCAB, noisy, prompt

T5_SMALL = {"vocab": 200, "dim": 32, "head_dim": 8, "heads": 4, "ffn": 64, "layers": 1, "decoder_layers": 2}
TRANSFORMER_SMALL = {"dim": 32, "heads": 4, "ffn": 64, "layers": 2, "vocab": VOCAB}


def attributes(model) -> dict:
    """Every module's attributes by path: each value's identity, and for a dict (its modules,
    parameters, buffers, hooks) each entry's."""
    def ids(value):
        return {k: id(v) for k, v in value.items()} if isinstance(value, dict) else id(value)

    return {path: {name: ids(value) for name, value in vars(m).items()} for path, m in model.named_modules()}


class Snapshots:
    """A streamer that takes the model's attributes at every put: between the decode steps."""

    def __init__(self, model):
        self.model, self.taken = model, []

    def put(self, tokens):
        self.taken.append(attributes(self.model))

    def end(self):
        pass


def check_generate_sets_nothing(model, ids, inputs, **kwargs):
    """generate(model, ids, **kwargs) leaves every module's attributes, the model's code and
    weights, and its forward on `inputs`, as they were."""
    generate(model, ids, max_new_tokens=2, **kwargs)  # the Decoder is found once and kept (model._decoder)
    before, code, weights = attributes(model), model.code, {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        out = model(*inputs)
    snapshots = Snapshots(model)
    generate(model, ids, max_new_tokens=5, streamer=snapshots, **kwargs)
    assert len(snapshots.taken) == 6  # the prompt, then each new token
    assert all(taken == before for taken in snapshots.taken)  # during generate
    assert attributes(model) == before and model.code == code  # after
    assert weights.keys() == model.state_dict().keys()
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    with torch.no_grad():
        assert torch.equal(model(*inputs), out)


def test_generate_sets_nothing_on_a_decoder_only_model():
    torch.manual_seed(0)
    model = noisy(archspec.build(str(ROOT / "specs" / "llama.yaml"), LLAMA_SMALL).eval())
    ids = prompt(2, 6, seed=1)
    check_generate_sets_nothing(model, ids, (ids,))


def test_generate_sets_nothing_on_an_encoder_decoder_model():
    """T5: cross attention (its projected memory), relative biases (the cache's slots), a source
    mask; its source-only nodes are computed once, read from the cache."""
    torch.manual_seed(0)
    model = noisy(archspec.build(str(ROOT / "specs" / "t5_small.yaml"), T5_SMALL).eval())
    source = torch.randint(1, 200, (2, 7), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(source)
    check_generate_sets_nothing(model, source, (source, mask, source[:, :3]), attention_mask=mask,
                                decoder_start_token_id=0)


def test_the_decode_graph_hands_the_cache_and_the_models_graph_does_not():
    torch.manual_seed(0)
    model = archspec.build(str(ROOT / "specs" / "transformer_base.yaml"), TRANSFORMER_SMALL).eval()
    decoding = decoder_of(model).decoding
    assert "cache" not in model.code
    assert "self.tgt_embed(tgt, positions = tgt_embed_positions)" in decoding.code
    assert "cache.source('encoder', encoder_module, src_embed_kept)" in decoding.code  # computed once
    layer = decoding.get_submodule("decoder.layers.0")
    assert "self.cross_attn(self_attn, memory, cache = cross_attn_cache)" in layer.code
    assert "cache" not in model.get_submodule("decoder.layers.0").code
    assert layer.get_submodule("cross_attn") is model.get_submodule("decoder.layers.0.cross_attn")  # the model's own
    assert decoding.state_dict().keys() <= model.state_dict().keys()


def greedy_steps(decoder, ids, new: int):
    """Greedy decoding through decoder.logits with a cache of its own: (the cache, a function
    taking one step, the tokens so far)."""
    cache = decoder.new_cache(DecodeState(torch.ones_like(ids), ids.shape[1] + new))
    tokens = [ids]

    def step():
        with torch.no_grad():
            logits = decoder.logits(tokens[-1], cache)
        tokens.append(logits.argmax(-1, keepdim=True))  # [B, 1]
        cache.state.advance()

    return step, tokens


def test_two_caches_decode_interleaved_as_each_alone():
    """The state is all in the cache object: two decodings stepped in turn give generate()'s tokens."""
    torch.manual_seed(0)
    model = noisy(archspec.build(str(ROOT / "specs" / "llama.yaml"), LLAMA_SMALL).eval())
    decoder = decoder_of(model)
    first, second = prompt(1, 5, seed=3), prompt(2, 8, seed=4)
    step_a, tokens_a = greedy_steps(decoder, first, 6)
    step_b, tokens_b = greedy_steps(decoder, second, 6)
    for _ in range(6):
        step_a()
        step_b()
    assert torch.equal(torch.cat(tokens_a, 1), generate(model, first, max_new_tokens=6))
    assert torch.equal(torch.cat(tokens_b, 1), generate(model, second, max_new_tokens=6))
