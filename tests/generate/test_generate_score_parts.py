"""generate() with score parts: each part answers for itself whether it decodes over a key/value
cache (SCORE_DECODE, registered from the part's own rule file). Gemma 2's soft-capped scores on
sliding and full causal layers, with its final logit soft-cap after the lm head, decode token for
token as the forward without a cache (the whole sequence each step), on a left-padded batch, in
the compiled step (generate(compile=True)) and in the exported decode step; a part that cannot
decode yet is refused naming the node and the part."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.generate import generate
from archspec.core.errors import SpecError

from tests.generate.test_generate import decode_with_step, left_padded, one_thread, uncached_greedy  # noqa: F401
from tests.parity.test_vocabulary import perturb_everything

GEMMA_LIKE = """
name: gemma_like
params: {parts: []}
dims: {L: [1, 128]}
inputs:
  ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 500, dim: 64, pos: none}}
  - {id: local, attention: {kind: sliding, window: 5, heads: 4, kv_heads: 2, head_dim: 32, rope_theta: 10000.0,
                            norm_kind: rms, scores: "${parts}"}}
  - {id: mlp, mlp: {hidden: 96, act: gelu_tanh, gated: true, bias: false, norm_kind: rms}}
  - {id: full, attention: {kind: causal, heads: 4, kv_heads: 2, head_dim: 32, rope_theta: 10000.0,
                           norm_kind: rms, scores: "${parts}"}}
  - {id: norm, norm: {kind: rms}}
  - {id: head, head: {kind: lm, vocab: 500}}
  - {id: capped, from: head, scale: {factor: 0.1}}
  - {id: squashed, from: capped, activation: {fn: tanh}}
  - {id: logits, from: squashed, scale: {factor: 10.0}}
outputs: [logits]
"""


CAPPED = "[{softcap: {cap: 1.5}}]"


def gemma_like(parts: str = CAPPED):
    torch.manual_seed(0)
    model = perturb_everything(archspec.build_text(GEMMA_LIKE, {"parts": parts})).eval()
    with torch.no_grad():  # large scores (the cap bites) and attention that moves the residual stream
        for layer in (model.local, model.full):
            layer.qkv.weight.mul_(4)
            layer.proj.weight.mul_(3)
    return model


def test_softcapped_attention_generates_as_the_forward_without_a_cache():
    model = gemma_like()
    ids, mask = left_padded()
    out = generate(model, ids, max_new_tokens=16, attention_mask=mask)  # past the window: the ring
    for row in range(3):  # each left-padded row decodes as it would alone, through forward
        start = int((mask[row] == 0).sum())
        assert torch.equal(out[row:row + 1, start:], uncached_greedy(model, ids[row:row + 1, start:], 16))
    assert len(set(out[0, 9:].tolist())) > 3  # not one token repeated
    assert torch.equal(generate(model, ids, max_new_tokens=16, attention_mask=mask, compile=True), out)


def test_the_cap_matters_at_these_weights():
    ids = torch.randint(1, 500, (1, 7), generator=torch.Generator().manual_seed(3))
    capped, plain = gemma_like(), gemma_like("[]")
    assert not torch.equal(generate(capped, ids, max_new_tokens=16), generate(plain, ids, max_new_tokens=16))
    assert not torch.equal(generate(gemma_like("[{softcap: {cap: 3.0}}]"), ids, max_new_tokens=16),
                           generate(capped, ids, max_new_tokens=16))


def test_the_exported_decode_step_decodes_softcapped_attention_as_generate():
    from archspec.compiler.generate.step import DecodeStep, export_decode_step

    model = gemma_like()
    ids, mask = left_padded()
    program = export_decode_step(model).module()
    expected = generate(model, ids, max_new_tokens=8, attention_mask=mask)
    assert torch.equal(decode_with_step(program, DecodeStep(model), ids, mask, 8), expected)


def test_check_reports_the_cache_of_a_softcapped_spec():
    report = archspec.check_text(GEMMA_LIKE, {"parts": CAPPED})
    assert report.to_json()["kv_cache"] is not None
    assert [layer["path"] for layer in report.to_json()["kv_cache"]["layers"]] == ["local", "full"]


def test_a_part_that_cannot_decode_is_named_and_the_spec_generates_without_a_cache():
    from archspec.primitives.kv_cache import refusal

    graph = archspec.check_text(GEMMA_LIKE, {"parts": "[talking_heads]"}).graph
    node, why = refusal(graph)
    assert node == "local" and why.startswith("its score part talking_heads: talking heads mix the weights")
    model = archspec.build_text(GEMMA_LIKE, {"parts": "[talking_heads]"}, seed=0).eval()
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():  # no cache: the whole sequence through forward at each step
        expected = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
        expected = torch.cat([expected, model(expected)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(model.generate(ids, max_new_tokens=2), expected)


def test_talking_heads_on_causal_attention_does_read_later_tokens():
    """Why talking_heads refuses: its forward's output at token 0 changes with a later token."""
    model = gemma_like("[talking_heads]")
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        first = model(ids)[:, 0]
        changed = model(torch.tensor([[5, 6, 9]]))[:, 0]
    assert not torch.allclose(first, changed)


def test_every_score_part_answers_how_it_decodes():
    from archspec.primitives.ops.attention.scores.base import SCORE_DECODE, known_parts

    missing = [name for name, part in known_parts().items() if part not in SCORE_DECODE.registered()]
    assert not missing


@pytest.mark.slow
def test_the_onnx_decode_step_decodes_softcapped_attention_as_generate(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    from archspec.compiler.generate.step import DecodeStep, export_decode_step_onnx

    model = gemma_like()
    path = str(tmp_path / "decode_step.onnx")
    inputs, _ = export_decode_step_onnx(model, path)
    session = onnxruntime.InferenceSession(path)

    def run(*args):
        logits, *cache = session.run(None, {name: a.numpy() for name, a in zip(inputs, args)})
        return (torch.as_tensor(logits), *cache)

    ids, mask = left_padded()
    expected = generate(model, ids, max_new_tokens=8, attention_mask=mask)
    assert torch.equal(decode_with_step(run, DecodeStep(model), ids, mask, 8), expected)
