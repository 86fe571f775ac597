"""loss kind=mse: torch's F.mse_loss of a prediction and a float target, and with `mask: true`
the mean over the tokens a 0/1 mask keeps (the Decision Transformer trial computed its action
loss in Python; the Depth Anything trial its regression loss). Gradients flow into the model."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import archspec

SPEC = """name: regress
inputs:
  x: [B, 6, 8]
  attention_mask: {shape: [B, 6], dtype: int64}
targets:
  actions: [B, 6, 3]
graph:
  - {id: enc, from: x, mlp: {ratio: 2}}
  - {id: predict, linear: {dim: 3}}
outputs: [predict]
objectives:
  - {id: action, from: [predict, actions, attention_mask], loss: {kind: mse, mask: true}}
  - {id: plain, from: [predict, actions], loss: {kind: mse, weight: 0.5}}
"""


def test_the_mean_over_the_kept_tokens_and_torchs_mse():
    model = archspec.build_text(SPEC, seed=0)
    x, target = torch.randn(2, 6, 8), torch.randn(2, 6, 3)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    losses = model.losses(x, mask, target)
    total, action, plain = losses["loss"], losses["action"], losses["plain"]
    predict = model(x, mask)
    kept = mask.bool()
    assert torch.allclose(action, F.mse_loss(predict[kept], target[kept]))  # the reference's boolean indexing
    assert torch.allclose(plain, F.mse_loss(predict, target))
    assert torch.allclose(total, action + 0.5 * plain)
    total.backward()
    assert model.predict.weight.grad is not None and model.predict.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("objective,message", [
    ("{id: fit, from: [predict, actions], loss: {kind: mse}}", None),
    ("{id: fit, from: [x, actions], loss: {kind: mse}}",
     "prediction \\[B, 6, 8\\] and target \\[B, 6, 3\\] differ in shape"),
    ("{id: fit, from: [predict, actions, x], loss: {kind: mse, mask: true}}", "padding mask must be int64 0/1 values"),
])
def test_located_errors(objective, message):
    text = SPEC.split("objectives:")[0] + f"objectives:\n  - {objective}\n"
    if message is None:
        archspec.check_text(text)
        return
    with pytest.raises(archspec.SpecError, match=message):
        archspec.check_text(text)


def test_an_objective_reads_an_output_by_its_name():
    """The Funnel trial's `from: [last_hidden_state, target]` was "unknown node 'last_hidden_state'",
    though objectives read the model's outputs."""
    text = """name: o
inputs: {x: [B, 4, 8]}
targets: {y: [B, 4, 8]}
graph:
  - {id: block1, mlp: {ratio: 2}}
outputs: {last_hidden_state: block1}
objectives:
  - {id: fit, from: [last_hidden_state, y], loss: {kind: mse}}
"""
    model = archspec.build_text(text, seed=0)
    x, y = torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    losses = model.losses(x, y)
    assert list(losses) == ["fit", "loss"] and torch.allclose(losses["fit"], F.mse_loss(model(x), y))
