"""`weights_of: PATH` on a node: it uses the weights of the node PATH names (DeBERTa's
share_att_key, one linear applied to two inputs; two towers tied block by block). The parameter
count, the module tree, checkpoints (one tensor), training (the gradient summed over both uses),
export and model.py all see one set of weights; nodes that differ in op or parameters are a
located error naming both nodes' lines."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

TIED = """\
archspec: 1
name: tied_linear
inputs:
  x: [B, 6, 32]
  y: [B, 6, 32]
graph:
  - {id: k1, from: x, linear: {dim: 16}}
  - {id: k2, from: y, WEIGHTS linear: {dim: 16}}
  - {id: both, from: [k1, k2], add: {}}
"""

BLOCKS = """\
archspec: 1
name: tied_towers
inputs:
  x: [B, 6, 32]
  y: [B, 6, 32]
blocks:
  layer:
    graph:
      - {id: attn, attention: {kind: global, heads: 2}}
      - {id: mlp, mlp: {ratio: 2}}
graph:
  - {id: left, from: x, layer: {}}
  - {id: right, from: y, weights_of: left, layer: {}}
  - {id: both, from: [left, right], add: {}}
"""


def tied(weights: str = "weights_of: k1,"):
    return TIED.replace("WEIGHTS", weights)


def params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 6, 32, generator=g), torch.randn(2, 6, 32, generator=g)


def test_the_weights_are_counted_and_held_once():
    assert archspec.check_text(tied()).params * 2 == archspec.check_text(tied("")).params
    model = archspec.build_text(tied())
    assert model.k2.weight is model.k1.weight and model.k2.bias is model.k1.bias
    assert params(model) == archspec.check_text(tied()).params == 32 * 16 + 16
    assert [name for name, _ in model.named_children()] == ["k1", "k2", "both"]  # the call tree stays
    assert archspec.check_text(tied()).graph.meta("k2")["cost"].shared_with == "k1"


def test_one_step_moves_both_uses_alike_by_the_summed_gradient():
    model, apart = archspec.build_text(tied()), archspec.build_text(tied(""))
    apart.load_state_dict(model.state_dict())  # both: k1's values
    x, y = inputs()
    model(x, y).square().sum().backward()
    apart(x, y).square().sum().backward()
    assert torch.allclose(model.k1.weight.grad, apart.k1.weight.grad + apart.k2.weight.grad, atol=1e-6)
    before = model.k1.weight.detach().clone()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert not torch.equal(model.k1.weight, before)
    assert torch.equal(model.k2.weight, model.k1.weight)


def test_a_block_ties_node_by_node():
    model = archspec.build_text(BLOCKS)
    assert model.right.attn.qkv.weight is model.left.attn.qkv.weight
    assert model.right.mlp.fc2.weight is model.left.mlp.fc2.weight
    apart = archspec.check_text(BLOCKS.replace("weights_of: left, ", "")).params
    assert archspec.check_text(BLOCKS).params * 2 == apart == params(model) * 2


def test_a_checkpoint_naming_one_of_them_fills_both(tmp_path):
    state = archspec.build_text(tied("")).state_dict()
    torch.save({k: v for k, v in state.items() if not k.startswith("k2.")}, tmp_path / "one.pt")
    model = archspec.build_text(tied(), weights=str(tmp_path / "one.pt"))
    assert torch.equal(model.k2.weight, state["k1.weight"])
    torch.save(state, tmp_path / "apart.pt")  # two linears trained apart: not one tensor
    with pytest.raises(SpecError) as info:
        archspec.build_text(tied(), weights=str(tmp_path / "apart.pt"))
    assert "have different values under their names" in info.value.diagnostics[0].message


def test_export_and_model_py_keep_the_tie(tmp_path):
    from archspec.compiler.backends.export import export_program
    from archspec.compiler.backends.source import standalone_source

    report = archspec.check_text(tied())
    model = archspec.build_text(tied()).eval()
    x, y = inputs(1)
    program = export_program(model, report.graph)
    unique = {id(v): v for v in program.state_dict.values()}
    assert sum(v.numel() for v in unique.values()) == report.params
    with torch.no_grad():
        assert torch.allclose(program.module()(x, y), model(x, y), atol=1e-6)
    (tmp_path / "model.py").write_text(standalone_source(model, report.name, None))
    loaded = importlib.util.spec_from_file_location("tied_linear_model", tmp_path / "model.py")
    source = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(source)
    again = getattr(source, type(model).__name__)().eval()
    assert again.k2.weight is again.k1.weight
    again.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(again(x, y), model(x, y))


def failure(text: str):
    with pytest.raises(SpecError) as info:
        archspec.check_text(text)
    return info.value.diagnostics[0]


def line_of(text: str, piece: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if piece in line)


def test_another_op_is_a_located_error_naming_both_lines():
    text = tied().replace(
        "- {id: k2, from: y, weights_of: k1, linear: {dim: 16}}", "- {id: k2, from: y, weights_of: k1, norm: {}}")
    problem = failure(text)
    assert "k2 is norm" in problem.message and f"'k1' (line {line_of(text, 'id: k1')}) is linear" in problem.message
    assert problem.loc.line == line_of(text, "id: k2") and problem.path == "k2"


def test_other_parameters_are_a_located_error_at_the_parameter():
    text = tied().replace("weights_of: k1, linear: {dim: 16}", "weights_of: k1, linear: {dim: 8}")
    problem = failure(text)
    assert "k2 has dim 8" in problem.message and f"'k1' (line {line_of(text, 'id: k1')}) has dim 16" in problem.message
    assert (problem.loc.line, problem.loc.col) == (line_of(text, "id: k2"), text.splitlines()[7].index("8") + 1)


def test_blocks_that_differ_name_the_node_one_lacks():
    text = BLOCKS.replace("- {id: right, from: y, weights_of: left, layer: {}}",
                          "- {id: right, from: y, weights_of: left, graph: [{id: attn, attention: "
                          "{kind: global, heads: 2}}]}")
    assert "this one has no 'mlp', which 'left' has" in failure(text).message


@pytest.mark.parametrize("weights, says", [
    ("weights_of: k3,", "unknown node 'k3'"),
    ("weights_of: k2,", "names this node itself"),
    ("weights_of: x,", "'x' is an input"),
    ("repeat: 2, weights_of: k1,", "`weights_of` and `repeat` together"),
])
def test_bad_references_are_located_errors(weights, says):
    text = tied(weights)
    problem = failure(text)
    assert says in problem.message
    assert problem.loc.line == line_of(text, "id: k2")


def test_inputs_of_another_width_are_a_located_error():
    text = tied().replace("  y: [B, 6, 32]", "  y: [B, 6, 48]")
    problem = failure(text)
    assert "would have 784 parameters, and k1, whose weights it uses" in problem.message and "has 528" in problem.message
    assert problem.path == "k2" and problem.loc.line == line_of(text, "id: k2")


FORWARD = """\
archspec: 1
name: tied_forward
inputs:
  x: [B, 6, 32]
graph:
  - {id: early, from: x, weights_of: late, linear: {dim: 32}}
  - {id: late, from: early, linear: {dim: 32}}
"""


def test_a_node_naming_a_later_one_is_tied_to_it_as_check_counts():
    """EoMT's trial: a norm inside the layers `weights_of` the final norm, written after them,
    was counted once by check and built as two tensors (its checkpoint then failed to load)."""
    report, model = archspec.check_text(FORWARD), archspec.build_text(FORWARD)
    assert model.late.weight is model.early.weight and model.late.bias is model.early.bias
    assert params(model) == report.params == 32 * 32 + 32
    cycle = FORWARD.replace("{id: late, from: early,", "{id: late, from: early, weights_of: early,")
    assert params(archspec.build_text(cycle)) == archspec.check_text(cycle).params == 32 * 32 + 32
    narrower = FORWARD.replace("x: [B, 6, 32]", "x: [B, 6, 16]")  # early [16 -> 32], late [32 -> 32]: no one tensor
    problem = failure(narrower)
    assert "would have 1,056 parameters, and early, whose weights it uses" in problem.message
    assert problem.loc.line == line_of(narrower, "id: late")
