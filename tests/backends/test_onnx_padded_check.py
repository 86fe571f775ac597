"""The ONNX Runtime check of a spec that reads a key-padding mask (compiler/backends/padded_check.py):
masks right-padded, outputs compared at the real tokens. Rows whose every key is hidden have no
defined output (torch averages the values there, ONNX Runtime's fused Attention gives 0): with a
random 0/1 mask the check met such rows at random, and a local window of 2-4 tokens made
`archspec build --target onnx` fail as an internal bug (exit 3) on a correct file (the ModernBERT
user trial)."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.cli import EXIT_OK, main
from archspec.compiler.backends.padded_check import gap_at_real_tokens, padding_masks, right_padded

pytest.importorskip("onnxruntime")

LOCAL = """
archspec: 1
name: local_padded
params: {win: 4}
dims: {L: [1, 64]}
inputs:
  input_ids: {shape: [B, L], dtype: int64}
  attention_mask: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 32, dim: 16, pos: none}}
  - id: attn
    from: [embed, attention_mask]
    attention: {kind: global, heads: 2, padding_mask: true, scores: [{local_window: {window: "${win}"}}]}
"""


def test_the_masks_are_found_and_right_padded_with_a_real_token_in_every_row():
    graph = archspec.check_text(LOCAL).graph
    assert padding_masks(graph) == [1]  # the ids are not a mask
    ids, mask = right_padded((torch.zeros(3, 5, dtype=torch.long), torch.zeros(3, 5, dtype=torch.long)), [1])
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0]] and ids.sum() == 0


def test_only_real_tokens_are_compared_but_a_real_one_still_counts():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    want = torch.zeros(2, 3, 4)
    padded_off = want.clone()
    padded_off[0, 2] = 5.0  # a padded row differs: no one's output
    assert gap_at_real_tokens((padded_off,), (want,), (None, mask), [1]) == 0.0
    real_off = want.clone()
    real_off[1, 0] = 0.5
    assert gap_at_real_tokens((real_off,), (want,), (None, mask), [1]) == 0.5
    pooled = torch.ones(2, 4)  # another shape: compared whole
    assert gap_at_real_tokens((pooled,), (torch.zeros(2, 4),), (None, mask), [1]) == 1.0


@pytest.mark.parametrize("window", [2, 4])
def test_a_short_local_window_over_padding_builds_its_onnx_file(tmp_path, window, capsys):
    spec = tmp_path / "local.yaml"
    spec.write_text(LOCAL)
    code = main(["build", str(spec), "--set", f"win={window}", "--target", "onnx", "-o", str(tmp_path / "out")])
    assert code == EXIT_OK and (tmp_path / "out" / "model.onnx").is_file()
    captured = capsys.readouterr()  # the GPTBigCode trial read the gap as the whole output's
    assert "max |onnxruntime - eager|" in captured.err + captured.out
    assert "at the real tokens" in captured.err + captured.out
