"""An einsum or a rearrange that keeps each token's values apart decodes with the KV cache: the
Llama 4 trial's mixture of experts written as `einsum: b l c, b l e -> b l e c` and `rearrange:
b l (e f) -> b l e f` was refused ("may sum over the tokens"), and generate ran the whole
sequence each step. The check now reads the inputs' types: tokenwise where every token axis (the
symbolic length) is one name that the output keeps, not last (the ops after it are tokenwise
along the last axis only). Patterns that do move values between tokens are still refused."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.generate import generate
from archspec.primitives.kv_cache import decoding

SPEC = """
name: tensor_ops_decoder
params: {vocab: 64, dim: 32, experts: 4}
dims: {L: [1, 64]}
inputs: {input_ids: {shape: [B, L], dtype: int64}}
graph:
  - {id: embed, embed: {vocab: "${vocab}", dim: "${dim}", pos: none}}
  - {id: attn, attention: {kind: causal, heads: 2, rope_theta: 10000.0}}
  - {id: scores, linear: {dim: "${experts}"}}
  - {id: outer, from: [attn, scores], einsum: {eq: "b l c, b l e -> b l e c"}}
  - {id: flat, rearrange: {pattern: "b l e c -> b l (e c)", as: tokens}}
  - {id: back, linear: {dim: "${dim}"}}
  - {id: head, head: {kind: lm, vocab: "${vocab}"}}
"""


def refusal(text: str):
    return decoding(archspec.check_text(text).graph)[0]


def test_a_tokenwise_einsum_and_rearrange_decode_with_the_cache_as_the_forward():
    assert refusal(SPEC) is None
    torch.manual_seed(0)
    model = archspec.build_text(SPEC).eval()
    ids = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    expected = ids
    for _ in range(6):  # greedy by hand, the whole sequence through forward each step
        with torch.no_grad():
            expected = torch.cat([expected, model(expected)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(generate(model, ids, max_new_tokens=6), expected)


CASE = """
name: one_node
dims: {L: [1, 64]}
inputs: {x: [B, L, 32], scores: [B, L, 4]}
graph:
  - NODE
outputs: [outer]
"""


def decode_of_node(node: str):
    from archspec.primitives.decoding import decode_of

    graph = archspec.check_text(CASE.replace("NODE", node)).graph
    return decode_of(next(n for n in graph.nodes() if n.name == "outer"))


@pytest.mark.parametrize("node", [
    '{id: outer, from: [x, scores], einsum: {eq: "b l c, b l e -> b l e c"}}',
    '{id: outer, from: x, rearrange: {pattern: "b l (h d) -> b l h d", sizes: {h: 4}}}',
    '{id: outer, from: x, rearrange: {pattern: "b l (h d) -> b h l d", sizes: {h: 4}}}',   # heads split: l kept
])
def test_what_keeps_the_tokens_apart_is_tokenwise(node):
    from archspec.primitives.decoding import Tokenwise

    assert isinstance(decode_of_node(node), Tokenwise)


@pytest.mark.parametrize("node, why", [
    ('{id: outer, from: [x, x], einsum: {eq: "b l c, b m c -> b l m"}}', "may sum over the tokens"),
    ('{id: outer, from: [x, scores], einsum: {eq: "b l c, b l e -> b e c l"}}', "may sum over the tokens"),
    ('{id: outer, from: [x, scores], einsum: {eq: "b l c, b l e -> b e c"}}', "may sum over the tokens"),
    ('{id: outer, from: x, rearrange: {pattern: "b l c -> b c l"}}', "may move values between tokens"),
    ('{id: outer, from: [x, scores], einsum: {eq: "b l c, b l e -> b c e"}}', "may sum over the tokens"),
])
def test_what_mixes_the_tokens_is_still_refused(node, why):
    from archspec.primitives.decoding import Mixes

    found = decode_of_node(node)
    assert isinstance(found, Mixes) and why in found.why, found


@pytest.mark.parametrize("kind,causal", [("global", False), ("causal", True)])
def test_without_a_cache_a_spec_whose_tokens_see_later_ones_is_said_to_be_no_causal_model(kind, causal, caplog):
    """Without a cache nothing said a token's logits ignore the tokens after it: the FNet trial's
    bidirectional encoder generated tokens without a word. The first step compares the logits of
    the sequence less its last token with the whole's and says so; the same spec with causal
    attention (here made to decode without a cache by a rearrange over the tokens) says nothing.
    Both generate, as Hugging Face's generate with use_cache=False."""
    text = SPEC.replace("kind: causal", f"kind: {kind}").replace(
        "  - {id: scores", "  - {id: mixed, rearrange: {pattern: \"b l c -> b l c\", as: tokens}}\n  - {id: scores")
    torch.manual_seed(0)
    model = archspec.build_text(text).eval()
    ids = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(1))
    with caplog.at_level("WARNING", logger="archspec"):
        assert generate(model, ids, max_new_tokens=3).shape == (1, 8)
    said = "is not causal: one more token changed the logits of the tokens before it" in caplog.text
    assert said != causal
