"""generate(..., compile=True) on a CUDA GPU (compiler/generate/graphed.py): the decode step
under torch.compile with CUDA graphs, over static cache buffers the step's generate() copies its
prefill's caches into.

Without a GPU the same class runs here (torch compiles it and records no graph on the CPU), so
what the graphs do not change is checked on every machine: the tokens are the eager loop's,
for a left-padded batch with grouped-query attention and for a sliding window's ring, also
for a second call of the same shape with another prompt (the held buffers must take the new
prefill's caches), after the weights change in place (they are read where they lie), and the
scores a step returns are the eager ones. The tests marked gpu check, on a CUDA GPU, that the
step is chosen there by itself, that torch recorded graphs (no op left out of them) and replays
one at every later step without waiting for the GPU, and that each step's scores survive the
next replay. Those have not run yet (no GPU lent since they were written)."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.generate import decoder_of, driver, generate
from archspec.compiler.generate.compiled import CompiledSteps
from archspec.compiler.generate.graphed import GraphedSteps

from tests.conftest import ROOT
from tests.generate.test_generate import one_thread  # noqa: F401  (the autouse fixture: one intra-op thread)
from tests.generate.test_generate import LLAMA_SMALL, left_padded, noisy, prompt, sliding_llama


def built(name: str = "llama", overrides: dict = LLAMA_SMALL):
    torch.manual_seed(0)
    return noisy(archspec.build(str(ROOT / "specs" / f"{name}.yaml"), overrides).eval())


@pytest.fixture
def graphed(monkeypatch):
    """The CUDA-graph steps wherever the model is (here: on the CPU, compiled without graphs)."""
    monkeypatch.setattr(driver, "steps_kind", lambda model: GraphedSteps)


def test_a_model_on_the_cpu_compiles_its_step_as_one_program():
    assert driver.steps_kind(built()) is CompiledSteps


def test_graphed_steps_give_eager_tokens_again_for_another_prompt_of_the_same_shape(graphed):
    ours = built()
    ids, mask = left_padded()
    assert torch.equal(generate(ours, ids, max_new_tokens=12, attention_mask=mask, compile=True),
                       generate(ours, ids, max_new_tokens=12, attention_mask=mask, compile=False))
    steps = decoder_of(ours).compiled
    assert isinstance(steps, GraphedSteps) and steps.how == {(3, 64): "made"} and steps.ready(3, 64)
    held = [t.data_ptr() for ts in steps.buffers.values() for t in ts]
    other = prompt(3, 9, seed=11).masked_fill(mask == 0, 0)  # other tokens, the same shape: the same buffers
    assert torch.equal(generate(ours, other, max_new_tokens=12, attention_mask=mask, compile=True),
                       generate(ours, other, max_new_tokens=12, attention_mask=mask, compile=False))
    assert [t.data_ptr() for ts in steps.buffers.values() for t in ts] == held


def test_graphed_steps_read_the_weights_where_they_lie(graphed):
    ours = built()
    ids, mask = left_padded()
    generate(ours, ids, max_new_tokens=6, attention_mask=mask, compile=True)
    with torch.no_grad():
        for p in ours.parameters():
            p.mul_(1.5)
    assert torch.equal(generate(ours, ids, max_new_tokens=6, attention_mask=mask, compile=True),
                       generate(ours, ids, max_new_tokens=6, attention_mask=mask, compile=False))


def test_graphed_steps_decode_over_a_sliding_windows_ring(graphed):
    ours = sliding_llama(window=5)
    ids = prompt(1, 8, seed=7)  # longer than the window: the prefill fills the ring
    assert torch.equal(generate(ours, ids, max_new_tokens=14, compile=True),
                       generate(ours, ids, max_new_tokens=14, compile=False))


def scores_of(model, ids, mask, compile: bool):
    out = generate(model, ids, max_new_tokens=10, attention_mask=mask, return_dict_in_generate=True,
                   output_scores=True, compile=compile)
    return out.sequences, out.scores


def test_graphed_steps_give_the_eager_scores(graphed):
    ours = built()
    ids, mask = left_padded()
    (tokens, scores), (eager_tokens, eager_scores) = scores_of(ours, ids, mask, True), scores_of(ours, ids, mask, False)
    assert torch.equal(tokens, eager_tokens) and len(scores) == len(eager_scores) == 10
    assert all(torch.allclose(s, e, atol=1e-5, rtol=1e-5) for s, e in zip(scores, eager_scores))


# -- on a CUDA GPU -------------------------------------------------------------------------------------------


@pytest.fixture
def replays(monkeypatch):
    """Graphs must be recorded (an op that would leave the graph raises: cudagraph_or_error) and
    no host sync may happen while decoding; yields the count of graph replays (CUDAGraphNode.run)."""
    from torch._inductor import config as inductor_config
    from torch._inductor import cudagraph_trees

    counted = {"replays": 0}
    run = cudagraph_trees.CUDAGraphNode.run

    def counting(self, *args, **kwargs):
        counted["replays"] += 1
        return run(self, *args, **kwargs)

    monkeypatch.setattr(cudagraph_trees.CUDAGraphNode, "run", counting)
    with inductor_config.patch({"triton.cudagraph_or_error": True}):
        yield counted


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_step_is_replayed_as_cuda_graphs_and_gives_eager_tokens_and_scores(replays, monkeypatch):
    from torch._dynamo.utils import counters

    ours = built().cuda()
    ids, mask = (t.cuda() for t in left_padded())
    counters.clear()
    tokens, scores = scores_of(ours, ids, mask, True)  # scores kept across replays: copies, not the graph's outputs
    assert isinstance(decoder_of(ours).compiled, GraphedSteps)
    assert not counters["inductor"].get("cudagraph_skips"), dict(counters["inductor"])
    assert replays["replays"] >= 7, replays  # 9 steps: a warm-up run, the recording, then replays
    eager_tokens, eager_scores = scores_of(ours, ids, mask, False)
    assert torch.equal(tokens, eager_tokens)
    assert all(torch.allclose(s, e, atol=1e-4, rtol=1e-4) for s, e in zip(scores, eager_scores))
    before, run = replays["replays"], GraphedSteps.run

    def without_a_wait(self, *args):  # no step may wait for the GPU (a sync raises in this mode)
        torch.cuda.set_sync_debug_mode("error")
        try:
            return run(self, *args)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(GraphedSteps, "run", without_a_wait)
    again = generate(ours, ids, max_new_tokens=10, attention_mask=mask, compile=True)
    assert torch.equal(again, eager_tokens) and replays["replays"] - before == 9  # every step a replay


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_bf16_steps_decode_as_replayed_graphs(replays):
    ours = built().cuda().to(torch.bfloat16)
    ids = prompt(2, 8, seed=3).cuda()
    out = generate(ours, ids, max_new_tokens=24, compile=True)
    assert out.shape == (2, 32) and replays["replays"] >= 21
