"""The conv op (archspec/primitives/ops/conv.py, compiler/modules/conv.py) against torch's own
F.conv2d / F.conv1d called here from the definition: outputs, every node's shape, parameters,
FLOPs against FlopCounterMode, located errors for bad parameters, torch.export with a dynamic
batch (and a dynamic image size through a strided conv on a token grid), and ONNX Runtime.

Small specs; all CPU fp32."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import example_inputs, export_program, max_abs_difference, other_lengths

from tests.conftest import ROOT, build_counted, checks_shapes

TOL = 1e-5

IMAGE = """
name: c
inputs:
  image: [B, 4, 12, 10]
graph:
"""

GRID = """
name: g
inputs:
  image: [B, 3, 32, 24]
graph:
  - {id: patch, patchify: {patch: 4, dim: 8}}
"""

SEQUENCE = """
name: s
dims:
  L: [4, 64]
inputs:
  x: [B, L, 8]
graph:
"""


def counted_flops(model, args) -> int:
    """FlopCounterMode's count for the first sample (the checker counts per sample; autograd on:
    the plain conv path, which it counts)."""
    counter = FlopCounterMode(display=False)
    with torch.enable_grad(), counter:
        model(*(a[:1] for a in args))
    return counter.get_total_flops()


def weights(module):
    return module.conv.weight, module.conv.bias


# -- 2-D over an image -----------------------------------------------------------------------------

IMAGE_CASES = {  # conv params -> F.conv2d keyword arguments
    "plain": ("{out: 6, kernel: 3, padding: 1}", dict(padding=1)),
    "strided": ("{out: 6, kernel: 3, stride: 2, padding: 1}", dict(stride=2, padding=1)),
    "dilated": ("{out: 6, kernel: 3, dilation: 2, padding: 2}", dict(dilation=2, padding=2)),
    "depthwise": ("{kernel: 5, padding: 2, groups: depthwise}", dict(padding=2, groups=4)),
    "depthwise_x2": ("{out: 8, kernel: 3, groups: depthwise}", dict(groups=4)),
    "grouped_no_bias": ("{out: 6, kernel: 1, groups: 2, bias: false}", dict(groups=2)),
    "pairs": ("{out: 5, kernel: [3, 5], stride: [2, 1], padding: [1, 2], dilation: [1, 2]}",
              dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2))),
    "same_odd": ("{out: 6, kernel: 3, dilation: 2, padding: same}", dict(padding="same", dilation=2)),
    "same_even": ("{out: 6, kernel: [4, 2], padding: same}", dict(padding="same")),  # one more after than before
}


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # torch's reference, not ours
@pytest.mark.parametrize("case", IMAGE_CASES)
def test_2d_on_an_image_is_conv2d(case):
    params, torch_args = IMAGE_CASES[case]
    report, model = build_counted(IMAGE + f"  - {{id: c, conv: {params}}}\n")
    x = torch.randn(2, 4, 12, 10)
    weight, bias = weights(model.c)
    with torch.no_grad():
        assert torch.allclose(model(x), F.conv2d(x, weight, bias, **torch_args), atol=TOL)
    assert report.graph.type_of("c").layout == "image"
    checks_shapes(report, model, (x,), {"B": x.shape[0], "L": x.shape[1]})
    assert counted_flops(model, (x,)) == report.flops


def test_out_defaults_to_the_input_channels():
    report, _ = build_counted(IMAGE + "  - {id: c, conv: {kernel: 3}}\n")
    assert report.graph.type_of("c").shape[1:] == (4, 10, 8)
    assert report.params == 4 * 4 * 9 + 4


# -- 2-D over a token grid -------------------------------------------------------------------------


def as_image(tokens, grid):
    return tokens.transpose(1, 2).reshape(tokens.shape[0], -1, *grid)  # [B, HW, C] -> [B, C, H, W]


def test_position_generator_on_tokens_is_a_conv_and_an_add():
    """PVT v2 / CPVT: x + dwconv(x) on the token grid, tokens in and tokens out."""
    report, model = build_counted(GRID + """
  - {id: pos, conv: {kernel: 3, padding: same, groups: depthwise}}
  - {id: out, from: [patch, pos], add: {}}
""")
    assert report.graph.type_of("pos").grid == (8, 6) and report.graph.type_of("pos").shape[1:] == (48, 8)
    image = torch.randn(2, 3, 32, 24)
    with torch.no_grad():
        tokens = model.patch(image)  # [2, 48, 8]
        weight, bias = weights(model.pos)
        conv = F.conv2d(as_image(tokens, (8, 6)), weight, bias, padding=1, groups=8)  # [2, 8, 8, 6]
        assert torch.allclose(model(image), tokens + conv.flatten(2).transpose(1, 2), atol=TOL)
    checks_shapes(report, model, (image,), {"B": image.shape[0], "L": image.shape[1]})
    assert counted_flops(model, (image,)) == report.flops


def test_strided_conv_on_tokens_gives_the_new_grid():
    report, model = build_counted(GRID + "  - {id: down, conv: {out: 12, kernel: 3, stride: 2, padding: 1, dilation: 2}}\n")
    out = report.graph.type_of("down")
    assert out.layout == "tokens" and out.grid == (3, 2) and out.shape[1:] == (6, 12)
    assert str(out.origin) == "image 32x24 / patch 4 / conv 3/2"
    image = torch.randn(2, 3, 32, 24)
    with torch.no_grad():
        tokens = model.patch(image)
        weight, bias = weights(model.down)
        conv = F.conv2d(as_image(tokens, (8, 6)), weight, bias, stride=2, padding=1, dilation=2)  # [2, 12, 3, 2]
        assert torch.allclose(model(image), conv.flatten(2).transpose(1, 2), atol=TOL)
    checks_shapes(report, model, (image,), {"B": image.shape[0], "L": image.shape[1]})
    assert counted_flops(model, (image,)) == report.flops


# -- 1-D along tokens ------------------------------------------------------------------------------


def test_causal_depthwise_1d_reads_no_later_token():
    """Mamba's short convolution: depthwise, (kernel - 1) * dilation zeros on the left only."""
    conv = "{dim: 1, kernel: 4, dilation: 2, causal: true, groups: depthwise}"
    report, model = build_counted(SEQUENCE + f"  - {{id: c, conv: {conv}}}\n")
    assert report.graph.type_of("c").shape[1:] == report.graph.type_of("x").shape[1:]  # [L, 8]
    x = torch.randn(2, 11, 8)
    weight, bias = weights(model.c)
    with torch.no_grad():
        expected = F.conv1d(F.pad(x.transpose(1, 2), (6, 0)), weight, bias, dilation=2, groups=8).transpose(1, 2)
        out = model(x)
        assert torch.allclose(out, expected, atol=TOL)
        later = x.clone()
        later[:, 7:] += 1.0
        assert torch.equal(model(later)[:, :7], out[:, :7])
    checks_shapes(report, model, (x,), {"B": x.shape[0], "L": x.shape[1]})
    longest = torch.randn(1, 64, 8)  # the checker costs the longest sequence
    assert counted_flops(model, (longest,)) == report.flops


def test_strided_1d_on_a_fixed_length():
    report, model = build_counted("""
name: s
inputs:
  x: [B, 20, 8]
graph:
  - {id: c, conv: {dim: 1, out: 6, kernel: 5, stride: 3, padding: 2, groups: 2}}
""")
    assert report.graph.type_of("c").shape[1:] == (7, 6)
    x = torch.randn(2, 20, 8)
    weight, bias = weights(model.c)
    with torch.no_grad():
        expected = F.conv1d(x.transpose(1, 2), weight, bias, stride=3, padding=2, groups=2).transpose(1, 2)
        assert torch.allclose(model(x), expected, atol=TOL)
    checks_shapes(report, model, (x,), {"B": x.shape[0], "L": x.shape[1]})
    assert counted_flops(model, (x,)) == report.flops


def test_1d_over_a_grid_keeps_the_grid_only_when_it_keeps_the_length():
    same = archspec.check_text(GRID + "  - {id: c, conv: {dim: 1, kernel: 3, padding: 1}}\n").graph.type_of("c")
    shorter = archspec.check_text(GRID + "  - {id: c, conv: {dim: 1, kernel: 3}}\n").graph.type_of("c")
    assert same.grid == (8, 6) and shorter.grid is None and shorter.shape[1] == 46


# -- errors ----------------------------------------------------------------------------------------

BAD = [  # (graph text, message, hint)
    (GRID + "  - {conv: {kernel: 3, groups: 3}}", "3 groups do not divide the 8 input channels",
     "use a group count that divides 8 and passes the whole spec (1, 2, 4, 8)"),
    (GRID + "  - {conv: {kernel: 3, out: 10, groups: 4}}", "out 10 is not a multiple of the 4 groups",
     "use an out that is a multiple of 4 (8 or 12)"),
    (GRID + "  - {conv: {kernel: 5, dilation: 2}}",
     "kernel 5 (reach 9 with dilation 2) is larger than the 8x6 input padded to 8: the output would be empty",
     "use a kernel of at most 4, or give a longer input (at least 9 along that axis, padded as it is)"),
    (SEQUENCE.replace("[B, L, 8]", "[B, 3, 8]") + "  - {conv: {dim: 1, kernel: 5}}",
     "kernel 5 is larger than the 3 input padded to 3: the output would be empty",
     "use a kernel of at most 3, or give a longer input (at least 5 along that axis, padded as it is)"),
    (GRID + "  - {conv: {kernel: 3, stride: 2, padding: same}}",
     "padding: same keeps the size only at stride 1, got stride 2", "use stride: 1, or give the padding as a number"),
    (GRID + "  - {conv: {kernel: 3, padding: 3}}",
     "padding 3 is not smaller than the kernel's reach 3: the outputs at the border would read padding only",
     "use a padding of at most 2 there; padding: same keeps the size at stride 1"),
    (GRID + "  - {conv: {kernel: [3, 1], padding: 1}}",  # the Nystromformer trial's conv over the values
     "padding 1 along the width (kernel 1) is not smaller than the kernel's reach 1: the outputs at the border would "
     "read padding only", "give it per axis: padding: [1, 0]; use a padding of at most 0 there; padding: same keeps "
     "the size at stride 1"),
    (SEQUENCE + "  - {conv: {dim: 1, kernel: [3, 3]}}", "a 1-D conv takes one kernel, got the pair [3, 3]",
     "use kernel: 3"),
    (GRID + "  - {conv: {kernel: 3, causal: true}}", "causal is for a 1-D conv along the tokens",
     "use dim: 1, or drop causal"),
    (SEQUENCE + "  - {conv: {dim: 1, kernel: 3, causal: true, padding: 1}}",
     "causal pads (kernel - 1) * dilation on the left itself; give no padding with it", "drop padding"),
    (SEQUENCE + "  - {conv: {kernel: 3}}", "a 2-D conv reads an image or a token grid, got a token sequence",
     "use dim: 1 to convolve along the tokens"),
    (IMAGE + "  - {conv: {dim: 1, kernel: 3}}", "a 1-D conv reads tokens [B, N, C], got an image",
     "use dim: 2 to convolve an image"),
    (SEQUENCE + "  - {conv: {dim: 1, kernel: 5, stride: 2}}", "kernel 5 is larger than the shortest L (4) padded to 4: "
     "the output would be empty", "declare L from at least 5 (`dims:`)"),
]


@pytest.mark.parametrize("text,message,hint", BAD, ids=[m[:40] for _, m, _ in BAD])
def test_bad_parameters_are_located_errors(text, message, hint):
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    assert info.value.message.endswith(message) and info.value.hint == hint
    assert info.value.loc is not None


def test_check_command_exits_1_at_the_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(GRID + "  - {id: c, conv: {kernel: 3, groups: 3}}\n")
    done = subprocess.run([sys.executable, "-m", "archspec", "check", str(path)], capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert "bad.yaml:7:39: error: c: 3 groups do not divide the 8 input channels" in done.stderr + done.stdout


# -- export, dynamic sizes, ONNX -------------------------------------------------------------------

EVERYTHING = """
name: conv_all
dims:
  L: [4, 64]
inputs:
  image: [B, 3, 32, 32]
  seq: [B, L, 16]
graph:
  - {id: stem, from: image, conv: {out: 8, kernel: [3, 5], stride: [2, 1], padding: [1, 2], dilation: [1, 2]}}
  - {id: even, conv: {kernel: 4, padding: same, groups: 2, out: 6}}
  - {id: patch, patchify: {patch: 4, dim: 16}}
  - {id: pos, conv: {kernel: 3, padding: same, groups: depthwise}}
  - {id: tok, from: [patch, pos], add: {}}
  - {id: down, conv: {kernel: 3, stride: 2, padding: 1, out: 24, bias: false}}
  - {id: causal, from: seq, conv: {dim: 1, kernel: 4, causal: true, groups: depthwise}}
outputs: [down, causal]
"""


def test_export_takes_any_batch_and_length():
    report, model = build_counted(EVERYTHING)
    program = export_program(model, report.graph).module()
    for batch, lengths in ((1, None), (3, other_lengths(report.graph))):
        args = example_inputs(report.graph, batch=batch, lengths=lengths)
        with torch.no_grad():
            assert max_abs_difference(program(*args), model(*args)) < TOL


def test_onnx_runtime_agrees_with_eager(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.onnx import export_onnx

    report, model = build_counted(EVERYTHING)
    path = str(tmp_path / "model.onnx")
    export_onnx(model, report.graph, path, verify=False)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch, lengths in ((1, None), (3, other_lengths(report.graph))):
        args = example_inputs(report.graph, batch=batch, lengths=lengths)
        outs = session.run(None, {n.name: a.numpy() for n, a in zip(report.graph.inputs(), args)})
        with torch.no_grad():
            assert max_abs_difference(tuple(torch.from_numpy(o) for o in outs), model(*args)) < 1e-4


SIZED = """
name: conv_sizes
params:
  img: 64
inputs:
  image: [B, 3, img, img]
graph:
  - {id: patch, patchify: {patch: 2, dim: 16}}
  - {id: down, conv: {out: 24, kernel: 3, stride: 2, padding: 1}}
  - {id: pos, conv: {kernel: 3, padding: same, groups: depthwise}}
  - {id: out, from: [down, pos], add: {}}
"""


def test_build_with_a_size_range_follows_the_strided_conv(tmp_path):
    spec = tmp_path / "sized.yaml"
    spec.write_text(SIZED)
    done = subprocess.run([sys.executable, "-m", "archspec", "build", str(spec), "--target", "export", "--size",
                           "32:128", "-o", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    program = torch.export.load(tmp_path / "out" / "model.pt2").module()
    for size in (36, 64, 100):  # against the eager model built for that size (the same seeded weights)
        eager = archspec.build(str(spec), overrides={"img": str(size)}, seed=0).eval()
        x = torch.randn(2, 3, size, size)
        with torch.no_grad():
            out = program(x)
            assert out.shape[1] == ((size // 2 - 1) // 2 + 1) ** 2
            assert max_abs_difference(out, eager(x)) < 1e-4
