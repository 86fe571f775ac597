"""Activations: the rule floor's names (archspec/primitives/activations.py) and the torch floor's
table (compiler/modules/activations.py) hold the same names; each torch module computes the
functional it names, oneDNN's fused form agrees, and an unknown name raises naming it."""

from __future__ import annotations

import pytest
import torch

from archspec.compiler.modules import activations as torch_floor
from archspec.compiler.modules.common import Linear
from archspec.primitives.activations import ACTIVATIONS


def test_both_floors_hold_the_same_names():
    torch_floor.same_names(ACTIVATIONS, torch_floor.TORCH_ACTIVATIONS)


@pytest.mark.parametrize("floor", ["rules", "torch"])
def test_a_name_on_one_floor_only_fails(floor, monkeypatch):
    table = ACTIVATIONS if floor == "rules" else torch_floor.TORCH_ACTIVATIONS
    monkeypatch.setitem(table, "mish", table["relu"])
    with pytest.raises(KeyError, match="mish"):
        torch_floor.same_names(ACTIVATIONS, torch_floor.TORCH_ACTIVATIONS)


@pytest.mark.parametrize("name", sorted(torch_floor.TORCH_ACTIVATIONS))
def test_the_learned_parameters_are_those_the_rule_floor_counts(name):
    from archspec.primitives.activations import learned_params

    module = torch_floor.activation(name)
    assert sum(p.numel() for p in module.parameters()) == learned_params(name)
    assert (torch_floor.TORCH_ACTIVATIONS[name][1] is None) == (learned_params(name) > 0)  # no functional form


@pytest.mark.parametrize("name", [n for n in sorted(torch_floor.TORCH_ACTIVATIONS)
                                  if torch_floor.TORCH_ACTIVATIONS[n][1] is not None])
def test_each_module_computes_the_functional_it_names(name):
    cls, functional, kwargs, _ = torch_floor.TORCH_ACTIVATIONS[name]
    x = torch.randn(4, 33, generator=torch.Generator().manual_seed(0)) * 3
    module = torch_floor.activation(name)
    assert type(module) is cls
    nan = name in ("log1p", "log")  # NaN below -1 (below 0), on both sides alike
    torch.testing.assert_close(module(x), functional(x, **kwargs), rtol=0, atol=0, equal_nan=nan)
    torch.testing.assert_close(torch_floor.apply_activation(x, name), module(x), rtol=0, atol=0, equal_nan=nan)


@pytest.mark.parametrize("name", [n for n in sorted(torch_floor.TORCH_ACTIVATIONS) if torch_floor.fusable(n)])
def test_the_fused_linear_computes_the_activation(name):
    linear = Linear(32, 64).eval()
    x = torch.randn(2, 128, 32, generator=torch.Generator().manual_seed(0))  # enough rows for oneDNN's path
    with torch.no_grad():
        torch.testing.assert_close(linear.activate(x, name), torch_floor.activation(name)(linear(x)),
                                   rtol=1e-4, atol=1e-5)


def test_an_unknown_name_raises_naming_it():
    for use in (torch_floor.activation, torch_floor.activation_class, torch_floor.onednn_activation):
        with pytest.raises(KeyError, match="'mish'"):
            use("mish")
    with pytest.raises(KeyError, match="'mish'"):
        torch_floor.apply_activation(torch.zeros(1), "mish")


def test_onednn_fuses_only_what_it_can():
    assert [n for n in torch_floor.TORCH_ACTIVATIONS if torch_floor.fusable(n)] == ["gelu", "gelu_tanh", "relu"]
    with pytest.raises(ValueError, match="oneDNN fuses no silu"):
        torch_floor.onednn_activation("silu")


def test_hard_swish_and_sigmoid_are_the_papers_formulas():
    import archspec

    model = archspec.build_text("name: h\ninputs:\n  x: [B, 4, 8]\ngraph:\n"
                                "  - {id: hs, activation: {fn: hardswish}}\n"
                                "  - {id: hsig, from: x, activation: {fn: hardsigmoid}}\n"
                                "  - {id: m, from: x, mlp: {ratio: 2, act: hardswish}}\n"
                                "outputs: [hs, hsig, m]\n")
    x = 4 * torch.randn(2, 4, 8)
    hs, hsig, _ = model(x)
    relu6 = (x + 3).clamp(0, 6)
    assert torch.allclose(hs, x * relu6 / 6, atol=1e-6) and torch.allclose(hsig, relu6 / 6, atol=1e-6)


def test_elu_and_leaky_relu_are_the_references_formulas():
    """OWL-ViT's logit scale (elu + 1) and Swin2SR's upsampler (LeakyReLU) were written from other
    words (4 and 2 nodes)."""
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0])
    torch.testing.assert_close(torch_floor.activation("elu")(x), torch.where(x > 0, x, x.exp() - 1))
    torch.testing.assert_close(torch_floor.activation("leaky_relu")(x), torch.where(x > 0, x, 0.01 * x))


def test_round_rounds_ties_to_even_and_passes_no_gradient():
    """BitNet's quantizer wrote round as 5 nodes (sign, scale, add, two casts): half away from zero."""
    import archspec

    model = archspec.build_text("name: rnd\ninputs: {x: [B, 8]}\ngraph:\n  - {id: a, activation: {fn: round}}\n")
    x = torch.tensor([[0.5, 1.5, -0.5, 2.5, 2.4, -1.6, 0.0, -2.5]], requires_grad=True)
    out = model(x)
    assert out.tolist() == [[0.0, 2.0, -0.0, 2.0, 2.0, -2.0, 0.0, -2.0]]
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


@pytest.mark.parametrize("written, meant, note", [("squared_relu", "relu2", ""), ("swish", "silu", ""),
                                                  ("gelu_new", "gelu_tanh", ""), ("swiglu", "silu", "gated: true")])
def test_other_names_of_an_activation_are_offered(written, meant, note):
    """The Persimmon trial's squared_relu was offered star_relu, the ERNIE trial's swiglu silu alone."""
    import archspec

    text = f"name: a\ninputs: {{x: [B, 4, 8]}}\ngraph:\n  - {{id: m, mlp: {{ratio: 2, act: {written}}}}}\n"
    with pytest.raises(archspec.SpecError) as error:
        archspec.check_text(text)
    hint = error.value.diagnostics[0].hint
    assert hint.startswith(f"did you mean '{meant}'?") and note in hint
