"""Mapping files: the `stack` rule, which joins tensors numbered one by one (Hugging Face's
checkpoint files keep a mixture's experts so: experts.0.w1.weight, experts.1.w1.weight, ...)
into one tensor along a new axis, in the order of the numbers (10 after 9, not after 1). A
group whose numbers skip one (or write one twice, `01` beside `1`: no tensor may vanish), or
whose tensors differ in shape, is left as it is and the rule says why; a rule without `{index}` is a located error. The shipped files that use it are
checked on Hugging Face's own saved checkpoints in tests/parity/test_mixtral.py and
test_deepseek_v3.py."""

from __future__ import annotations

import textwrap

import pytest
import torch

from archspec.core.errors import SpecError
from archspec.compiler.weights.mapping_file import read_mapping_file
from archspec.compiler.weights.rules import convert

STACK = r"""
name: experts one by one
rules:
  - stack:
      match: '^layers\.(\d+)\.experts\.{index}\.(w1|w2)\.weight$'
      into: all
"""


def rules_of(tmp_path, text: str):
    path = tmp_path / "map.yaml"
    path.write_text(textwrap.dedent(text).lstrip())
    return read_mapping_file(path).rules


def experts(count: int, shape=(3, 2), skip: int | None = None) -> dict:
    return {f"layers.0.experts.{i}.{w}.weight": torch.full(shape, float(10 * i + (w == "w2")))
            for i in range(count) if i != skip for w in ("w1", "w2")}


def test_twelve_experts_stack_in_the_order_of_their_numbers(tmp_path):
    state = {**experts(12), "layers.0.gate.weight": torch.zeros(12, 2)}
    out = convert(state, rules_of(tmp_path, STACK))
    assert sorted(out.state) == ["layers.0.experts.all.w1.weight", "layers.0.experts.all.w2.weight",
                                 "layers.0.gate.weight"]
    w1 = out.state["layers.0.experts.all.w1.weight"]
    assert w1.shape == (12, 3, 2) and w1[:, 0, 0].tolist() == [10.0 * i for i in range(12)]  # 10 after 9
    assert out.state["layers.0.experts.all.w2.weight"][3, 0, 0] == 31.0 and not out.refused


def test_a_new_axis_other_than_the_first(tmp_path):
    out = convert(experts(4), rules_of(tmp_path, STACK.replace("into: all", "into: all\n      dim: -1")))
    assert out.state["layers.0.experts.all.w1.weight"].shape == (3, 2, 4)


@pytest.mark.parametrize("state, why", [
    (experts(4, skip=2), "its numbers (0, 1, 3) do not run 0, 1, ... once each: no 2"),
    ({**experts(2), "layers.0.experts.2.w1.weight": torch.zeros(3, 5)}, "its tensors differ in shape ([3, 2], [3, 5])"),
    ({**experts(2), "layers.0.experts.01.w1.weight": torch.zeros(3, 2)}, "its numbers (0, 1, 01) do not run"),
    ({"layers.0.experts.0.w1.weight": torch.zeros(3, 2), "layers.0.experts.1.w1.weight": torch.zeros(3, 2),
      "layers.0.experts." + "9" * 40 + ".w1.weight": torch.zeros(3, 2)}, "no 2"),  # no range of 10^40 numbers
])
def test_a_group_that_cannot_stack_is_left_as_it_is_and_says_why(tmp_path, state, why):
    out = convert(state, rules_of(tmp_path, STACK))
    assert "layers.0.experts.all.w1.weight" not in out.state and "layers.0.experts.1.w1.weight" in out.state
    assert any(why in line and "the stack rule" in line for line in out.refused), out.refused


@pytest.mark.parametrize("match, message", [
    (r"'^layers\.(\d+)\.experts\.(\d+)\.w1$'", "stack: `match` must hold {index} once"),
    (r"'^experts\.[{index}]\.w1$'", "{index} in `match` must stand where a group can"),
])
def test_a_rule_without_its_index_is_a_located_error(tmp_path, match, message):
    path = tmp_path / "map.yaml"
    path.write_text(f"name: t\nrules:\n  - stack: {{match: {match}, into: all}}\n")
    with pytest.raises(SpecError) as info:
        read_mapping_file(path)
    assert message in str(info.value)
    loc = info.value.diagnostics[0].loc
    assert loc.file.endswith("map.yaml") and loc.line == 3
