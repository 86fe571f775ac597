"""conv_transpose against torch's own ConvTranspose2d / ConvTranspose1d: the same parameters
(count and state dict layout), the same outputs with the same weights, torch's size formula, and
an export that follows the image's size through it. The Depth Anything trial's DPT neck
upsamples with transposed convs, which the language could not say."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.compiler.backends.export import SizeRange, example_inputs, export_program, max_abs_difference

SPEC = """name: up
params:
  img: 7
inputs:
  image: [B, 8, img, img]
graph:
  - {id: up, conv_transpose: {out: 6, kernel: 4, stride: 4}}
  - {id: grid, to_tokens: {}}
  - {id: up2, conv_transpose: {out: 4, kernel: 3, stride: 2, padding: 1, output_padding: 1, groups: 2}}
  - {id: dilated, from: up, conv_transpose: {kernel: [3, 2], stride: [1, 2], dilation: 2, padding: [2, 0],
                                              groups: depthwise, bias: false}}
  - {id: seq, from: grid, conv_transpose: {dim: 1, out: 5, kernel: 3, stride: 2, padding: 1}}
outputs: [up, up2, dilated, seq]
"""


def torch_twins(model):
    """torch's own modules of the same geometry, with the model's weights."""
    twins = {
        "up": torch.nn.ConvTranspose2d(8, 6, 4, 4),
        "up2": torch.nn.ConvTranspose2d(6, 4, 3, 2, padding=1, output_padding=1, groups=2),
        "dilated": torch.nn.ConvTranspose2d(6, 6, (3, 2), (1, 2), padding=(2, 0), dilation=2, groups=6, bias=False),
        "seq": torch.nn.ConvTranspose1d(6, 5, 3, 2, padding=1),
    }
    for name, twin in twins.items():
        twin.load_state_dict(getattr(model, name).conv.state_dict())  # the same keys and shapes
    return twins


def test_the_same_outputs_and_parameters_as_torchs_transposed_convs():
    report = archspec.check_text(SPEC)
    model = archspec.build_text(SPEC, seed=0).eval()
    twins = torch_twins(model)
    assert report.params == sum(p.numel() for twin in twins.values() for p in twin.parameters())
    image = torch.randn(2, 8, 7, 7)
    up, up2, dilated, seq = model(image)
    with torch.no_grad():
        want_up = twins["up"](image)  # [2, 6, 28, 28]
        tokens = want_up.flatten(2).transpose(1, 2)  # [2, 784, 6]
        want_up2 = twins["up2"](want_up).flatten(2).transpose(1, 2)  # [2, 56*56, 4]
        want_seq = twins["seq"](tokens.transpose(1, 2)).transpose(1, 2)  # [2, 1567, 5]
        want_dilated = twins["dilated"](want_up)
    for got, want in ((up, want_up), (up2, want_up2), (dilated, want_dilated), (seq, want_seq)):
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)
    graph = report.graph
    assert graph.type_of("up2").grid == (56, 56) and graph.type_of("seq").shape[1:] == (1567, 5)
    assert tuple(graph.type_of("dilated").shape[2:]) == tuple(want_dilated.shape[2:])


def test_flops_count_every_input_value_at_every_tap():
    report = archspec.check_text(SPEC)
    row = next(r for r in report.nodes if r.path == "up")
    assert row.flops == 2 * (8 * 6 * 4 * 4) * 49  # in x out x kh x kw multiply-adds at each of 7x7 inputs


def test_an_export_follows_the_image_size_through_it():
    spec = """name: up_then_patch
params:
  img: 16
inputs:
  image: [B, 3, img, img]
graph:
  - {id: up, conv_transpose: {out: 8, kernel: 2, stride: 2}}
  - {id: patch, patchify: {patch: 4, dim: 8, pos: none}}
  - {id: pooled, reduce: {fn: mean, axes: [1]}}
"""
    graph = archspec.check_text(spec).graph
    gm = archspec.build_text(spec, seed=0).eval()
    program = export_program(gm, graph, batch_range=(1, 8), size_range=SizeRange(8, 32, 2))
    for size in (10, 24):
        eager = archspec.build_text(spec, overrides={"img": size}, seed=0).eval()
        (x,) = example_inputs(graph, batch=3, size=size)
        with torch.no_grad():
            assert max_abs_difference(program.module()(x), eager(x)) < 1e-5


@pytest.mark.parametrize("params,message", [
    ("{out: 4, kernel: 3, stride: 2, output_padding: 2}", "output_padding 2 must be smaller than the stride 2"),
    ("{kernel: 1, padding: 2}", "padding takes all of the output"),
    ("{dim: 1, kernel: [2, 2]}", "a 1-D conv_transpose takes one kernel"),
    ("{out: 5, kernel: 2, groups: 2}", "out 5 is not a multiple of the 2 groups"),
])
def test_located_errors(params, message):
    text = f"name: e\ninputs:\n  image: [B, 4, 4, 4]\ngraph:\n  - {{id: t, to_tokens: {{}}}}\n" \
           f"  - {{id: up, conv_transpose: {params}}}\n"
    with pytest.raises(archspec.SpecError, match=message):
        archspec.check_text(text)


def test_a_1d_transposed_conv_over_a_symbolic_length_must_keep_it():
    text = """name: e
dims:
  L: [1, 64]
inputs:
  x: [B, L, 4]
graph:
  - {id: same, conv_transpose: {dim: 1, kernel: 3, padding: 1}}
  - {id: longer, conv_transpose: {dim: 1, kernel: 2, stride: 2}}
"""
    with pytest.raises(archspec.SpecError, match="changes the length reads a fixed length"):
        archspec.check_text(text)
    graph = archspec.check_text(text.rsplit("  - {id: longer", 1)[0]).graph
    assert graph.type_of("same").shape[1:] == graph.type_of("x").shape[1:]
    x = torch.randn(2, 9, 4)
    model = archspec.build_text(text.rsplit("  - {id: longer", 1)[0], seed=0)
    weight, bias = model.same.conv.weight, model.same.conv.bias
    want = F.conv_transpose1d(x.transpose(1, 2), weight, bias, padding=1).transpose(1, 2)
    assert torch.allclose(model(x), want, atol=1e-6)
