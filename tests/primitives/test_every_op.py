"""The tensor ops with constants of issue 18 (scale, shift, power, subtract, divide, reduce,
softmax, constant), each against a computation written here from its definition: outputs,
every node's shape against the checker's, parameters, buffers and FLOPs against torch's
counts, located errors for bad parameters, and the exports (torch.export with a dynamic
batch, ONNX against onnxruntime, TensorRT's operator coverage).

Small specs, built once per test; all CPU fp32.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.cli import EXIT_SPEC, main
from archspec.compiler.backends.export import export_program
from archspec.compiler.backends.onnx import export_onnx

from tests.conftest import build_counted, checks_shapes, checks_tensorrt_coverage

TOL = 1e-5


def spec(graph: str, inputs: str = "  x: [B, 6, 8]\n", params: str = "") -> str:
    return f"name: t\n{params}inputs:\n{inputs}graph:\n{graph}"


# -- element-wise with constants ------------------------------------------------------------------


def test_a_logit_soft_cap_is_scale_tanh_scale():
    """Gemma 2's soft-capping, c * tanh(x / c), from the ops and the tanh activation."""
    report, model = build_counted(spec(params="params:\n  cap: 30.0\n", graph="""
  - {id: down, scale: {factor: "${1 / cap}"}}
  - {id: squash, activation: {fn: tanh}}
  - {id: capped, scale: {factor: "${cap}"}}
"""))
    x = torch.randn(2, 6, 8) * 100
    expected = 30.0 * torch.tanh(x / 30.0)
    assert torch.allclose(model(x), expected, atol=TOL)
    assert model(x).abs().max() <= 30.0  # capped (tanh saturates to 1 in float32)
    checks_shapes(report, model, (x,))


def test_scale_undoes_t5s_folded_query_scale():
    """T5 folds 1/sqrt(d) into its query weights; a scale by sqrt(d) gives the plain queries back."""
    _, model = build_counted(spec(params="params:\n  d: 64\n", graph="""
  - {id: folded, scale: {factor: "${d ** -0.5}"}}
  - {id: plain, scale: {factor: "${d ** 0.5}"}}
"""))
    x = torch.randn(2, 6, 8)
    assert torch.allclose(model(x), x, atol=TOL)
    assert model.folded.factor == 0.125


def test_gemma_rms_norm_by_hand():
    """Gemma's RMSNorm, x / sqrt(mean(x**2) + eps) * (1 + w), from power, reduce, shift, divide."""
    report, model = build_counted(spec(params="params:\n  eps: 1.0e-6\n", graph="""
  - {id: w, param: {shape: [8], init: normal, std: 0.5}}
  - {id: gain, shift: {value: 1}}
  - {id: square, from: x, power: {exponent: 2}}
  - {id: mean_square, reduce: {fn: mean, axes: [-1], keepdim: true}}
  - {id: shifted, shift: {value: "${eps}"}}
  - {id: rms, power: {exponent: 0.5}}
  - {id: normed, from: [x, rms], divide: {}}
  - {id: out, from: [normed, gain], multiply: {}}
"""))
    x = torch.randn(2, 6, 8)
    w = model.w.value  # [1, 8]
    expected = x / torch.sqrt((x * x).sum(-1, keepdim=True) / 8 + 1e-6) * (1 + w)
    assert torch.allclose(model(x), expected, atol=TOL)
    assert report.params == 8
    checks_shapes(report, model, (x,))


def test_subtract_and_divide_broadcast():
    report, model = build_counted(spec(inputs="  x: [B, 6, 8]\n  y: [B, 1, 8]\n", graph="""
  - {id: d, from: [x, y], subtract: {}}
  - {id: back, from: [y, x], subtract: {}}
  - {id: q, from: [d, back], divide: {}}
"""))
    x, y = torch.randn(2, 6, 8), torch.randn(2, 1, 8)
    assert torch.allclose(model(x, y), (x - y) / (y - x), atol=TOL)  # -1 everywhere, computed
    assert report.graph.type_of("back").shape[1:] == (6, 8)
    checks_shapes(report, model, (x, y))


def test_subtract_keeps_the_token_grid():
    report = archspec.check_text("""
name: g
inputs:
  image: [B, 3, 16, 16]
graph:
  - {id: patch, patchify: {patch: 4, dim: 8}}
  - {id: mean, reduce: {fn: mean, axes: [1], keepdim: true}}
  - {id: centred, from: [patch, mean], subtract: {}}
  - {to_image: {}}
""")
    assert report.graph.type_of("centred").grid == (4, 4)


def test_shapes_that_do_not_broadcast_and_integer_division_are_refused():
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(spec(inputs="  x: [B, 6, 8]\n  y: [B, 5, 8]\n", graph="  - {from: [x, y], subtract: {}}\n"))
    assert info.value.message == "subtract: shapes [B, 6, 8] and [B, 5, 8] do not broadcast (dimension 1: 6 vs 5)"
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(spec(inputs="  a: {shape: [B, 6], dtype: int64}\n  b: {shape: [B, 6], dtype: int64}\n",
                                 graph="  - {from: [a, b], divide: {}}\n"))
    assert info.value.message == "divide reads floating-point values, got int64"
    assert "integer ids" in info.value.hint


# -- reduce and softmax ----------------------------------------------------------------------------

GRID = """
name: g
inputs:
  image: [B, 3, 16, 16]
graph:
  - {id: patch, patchify: {patch: 4, dim: 8}}
  - {id: cls, tokens: {count: 1}}
  - {id: img, from: patch, to_image: {}}
"""

REFERENCE = {"mean": lambda x, axes, keep: x.mean(axes, keep), "sum": lambda x, axes, keep: x.sum(axes, keep),
             "max": lambda x, axes, keep: x.amax(axes, keep), "min": lambda x, axes, keep: x.amin(axes, keep),
             "norm": lambda x, axes, keep: x.pow(2).sum(axes, keep).sqrt()}


@pytest.mark.parametrize("source, fn, axes, keepdim, layout, shape, grid, prefix", [
    ("cls", "mean", [-1], True, "tokens", (17, 1), (4, 4), 1),      # RMSNorm's mean square: broadcasts back
    ("cls", "max", [1], True, "tokens", (1, 8), None, 0),           # one token, no grid
    ("cls", "mean", [1], False, "vector", (8,), None, 0),           # a mean pool over the tokens
    ("cls", "sum", [2], False, "tensor", (17,), None, 0),           # [B, N]: neither tokens nor ids
    ("cls", "min", [1, 2], True, "tokens", (1, 1), None, 0),
    ("img", "mean", [2, 3], False, "vector", (8,), None, 0),        # global average pool
    ("img", "max", [-2, -1], True, "image", (8, 1, 1), None, 0),
    ("img", "sum", [1], True, "image", (1, 4, 4), None, 0),
    ("img", "min", [1], False, "tensor", (4, 4), None, 0),
    ("img", "norm", [1], True, "image", (1, 4, 4), None, 0),       # GRN's L2 norm over the channels
])
def test_reduce_computes_fn_and_keeps_the_layout_only_where_it_fits(source, fn, axes, keepdim, layout, shape, grid,
                                                                    prefix):
    node = f"{{id: r, from: {source}, reduce: {{fn: {fn}, axes: {axes}, keepdim: {str(keepdim).lower()}}}}}"
    report, model = build_counted(GRID + f"  - {node}\noutputs: [r, cls, img]\n")
    out = report.graph.type_of("r")
    assert (out.layout, out.shape[1:], out.grid, out.prefix) == (layout, shape, grid, prefix)
    image = torch.randn(2, 3, 16, 16)
    reduced, tokens, img = model(image)
    x = tokens if source == "cls" else img
    assert torch.allclose(reduced, REFERENCE[fn](x, axes, keepdim), atol=TOL)
    checks_shapes(report, model, (image,))


def test_the_l2_norm_has_a_gradient_at_a_zero_vector():
    """The ConvNeXt V2 trial: GRN's norm written as power, sum and power 0.5 gave NaN gradients
    where a channel was all zero (a GELU of large negative inputs), silently; torch's is 0 there."""
    model = archspec.build_text(spec(inputs="  x: [B, 4, 8]\n", graph="""
  - {id: n, reduce: {fn: norm, axes: [1], keepdim: true}}
""")).train()
    x = torch.randn(2, 4, 8)
    x[:, :, 3] = 0.0
    x.requires_grad_(True)
    model(x).sum().backward()
    expected = torch.autograd.grad(torch.linalg.vector_norm(x, dim=1, keepdim=True).sum(), x)[0]
    assert torch.isfinite(x.grad).all() and torch.allclose(x.grad, expected)


def test_reduce_tells_the_channels_from_the_tokens_by_axis_not_by_size():
    report = archspec.check_text(spec(inputs="  x: [B, 8, 8]\n", graph="""
  - {id: over_channels, reduce: {fn: sum, axes: [2]}}
  - {id: over_tokens, from: x, reduce: {fn: sum, axes: [1]}}
outputs: [over_channels, over_tokens]
"""))
    assert report.graph.type_of("over_channels").layout == "tensor"  # [B, N], though N == C
    assert report.graph.type_of("over_tokens").layout == "vector"


def test_reduce_on_integers_keeps_them_but_refuses_a_mean():
    report, model = build_counted(spec(inputs="  ids: {shape: [B, 6], dtype: int64}\n",
                               graph="  - {id: most, reduce: {fn: max, axes: [1]}}\n"))
    assert report.graph.type_of("most").dtype == "int64" and report.graph.type_of("most").layout == "tensor"
    ids = torch.randint(0, 50, (3, 6))
    assert torch.equal(model(ids), ids.max(1).values)
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(spec(inputs="  ids: {shape: [B, 6], dtype: int64}\n",
                                 graph="  - {reduce: {fn: mean, axes: [1]}}\n"))
    assert info.value.message == "a mean reads floating-point values, got token ids of int64"
    assert info.value.hint == "sum, max or min keep integers"


def test_softmax_along_an_axis():
    report, model = build_counted(spec(graph="""
  - {id: last, softmax: {}}
  - {id: over_tokens, from: x, softmax: {axis: 1}}
outputs: [last, over_tokens]
"""))
    x = torch.randn(2, 6, 8)
    last, over_tokens = model(x)
    assert torch.allclose(last, x.exp() / x.exp().sum(-1, keepdim=True), atol=TOL)
    assert torch.allclose(over_tokens, x.exp() / x.exp().sum(1, keepdim=True), atol=TOL)
    assert report.graph.type_of("last") == report.graph.type_of("x")
    checks_shapes(report, model, (x,))


# -- constant --------------------------------------------------------------------------------------


def test_constants_are_buffers_that_broadcast():
    report, model = build_counted(spec(inputs="  x: [B, 3, 4, 4]\n", graph="""
  - {id: one_half, constant: {shape: [4], value: 0.5}}
  - {id: eye, constant: {shape: [3, 4, 4], fill: eye}}
  - {id: ones, constant: {shape: [4, 1], fill: ones}}
  - {id: zeros, constant: {shape: [1, 4]}}
  - {id: a, from: [x, one_half], multiply: {}}
  - {id: b, from: [a, ones], add: {}}
  - {id: c, from: [b, zeros], subtract: {}}
  - {id: diag, from: [c, eye], multiply: {}}
"""))
    x = torch.randn(2, 3, 4, 4)
    identity = torch.zeros(3, 4, 4)
    for i in range(4):
        identity[:, i, i] = 1.0
    expected = (x * 0.5 + 1.0) * identity
    assert torch.allclose(model(x), expected, atol=TOL)
    assert report.params == 0 and not dict(model.state_dict())
    costs = {name: report.graph.node(name).meta["cost"].buffer_bytes for name in ("one_half", "eye", "ones", "zeros")}
    assert costs == {"one_half": 4 * 4, "eye": 3 * 16 * 4, "ones": 4 * 4, "zeros": 4 * 4}
    assert costs == {name: model.get_submodule(name).value.nbytes for name in costs}
    assert report.graph.type_of("eye").layout == "tensor" and report.graph.type_of("eye").shape == (1, 3, 4, 4)
    checks_shapes(report, model, (x,))


def test_what_is_made_from_constants_keeps_a_batch_of_1():
    """A conv, pool or pad of a constant is no more per-sample than the constant: the checker says
    [1, ...] as the module gives (user trial 13: a conv of a constant was typed [B, ...], and a
    concat with the image passed the check and failed in torch)."""
    report, model = build_counted(spec(inputs="  image: [B, 3, 8, 8]\n", graph="""
  - {id: c, constant: {shape: [4, 8, 8], fill: index, along: -1}}
  - {id: c_image, rearrange: {pattern: "b c h w -> b c h w", as: image}}
  - {id: proj, conv: {out: 3, kernel: 1}}
  - {id: pooled, pool: {fn: mean, kernel: 2}}
  - {id: padded, pad: {to_multiple: 3}}
  - {id: tokens, to_tokens: {}}
  - {id: image_tokens, from: image, to_tokens: {}}
  - {id: summed, from: [image_tokens, proj_tokens], add: {}}
  - {id: proj_tokens, from: proj, to_tokens: {}}
outputs: [padded, tokens, summed]
"""))
    assert [tuple(report.graph.type_of(n).shape)[:2] for n in ("proj", "pooled", "padded", "tokens")] == [
        (1, 3), (1, 3), (1, 3), (1, 36)]
    assert str(report.graph.type_of("summed").shape[0]) == "B"  # broadcast with the image's batch
    checks_shapes(report, model, (torch.randn(2, 3, 8, 8),))


def test_concat_of_a_batch_of_1_and_a_batch_of_b_is_a_located_error():
    text = spec(inputs="  image: [B, 3, 8, 8]\n", graph="""
  - {id: c, constant: {shape: [4, 8, 8], fill: ones}}
  - {id: c_image, rearrange: {pattern: "b c h w -> b c h w", as: image}}
  - {id: proj, conv: {out: 6, kernel: 1}}
  - {id: both, from: [proj, image], concat: {along: channels}}
""")
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text, name="bad.yaml")
    error = info.value
    assert error.message == "concat joins tensors of one batch; input 1 has a batch of 1, input 2 of B"
    assert "add or multiply broadcast, concat does not" in error.hint
    assert (error.loc.line, error.loc.col) == (9, 22) and error.path == "both"


# -- FLOPs and exports of every op -----------------------------------------------------------------

EVERY_OP = spec(inputs="  x: [B, 8, 8]\n", params="params:\n  cap: 30.0\n  eps: 1.0e-6\n", graph="""
  - {id: down, scale: {factor: "${1 / cap}"}}
  - {id: squash, activation: {fn: tanh}}
  - {id: capped, scale: {factor: "${cap}"}}
  - {id: w, param: {shape: [8], init: normal}}
  - {id: gain, shift: {value: 1.0}}
  - {id: square, from: x, power: {exponent: 2}}
  - {id: mean_square, reduce: {fn: mean, keepdim: true}}
  - {id: shifted, shift: {value: "${eps}"}}
  - {id: rms, power: {exponent: 0.5}}
  - {id: normed, from: [x, rms], divide: {}}
  - {id: gemma, from: [normed, gain], multiply: {}}
  - {id: peak, from: x, reduce: {fn: max, axes: [1], keepdim: true}}
  - {id: centred, from: [x, peak], subtract: {}}
  - {id: probs, softmax: {axis: 1}}
  - {id: total, reduce: {fn: sum, axes: [1, 2]}}
  - {id: low, from: x, reduce: {fn: min, axes: [-2]}}
  - {id: one_half, constant: {shape: [8], value: 0.5}}
  - {id: halved, from: [low, one_half], multiply: {}}
  - {id: eye, constant: {shape: [8, 8], fill: eye}}
  - {id: diagonal, from: [x, eye], multiply: {}}
  - {id: mixed, from: capped, linear: {dim: 4}}
  - {id: columns, constant: {shape: [8, 8], fill: index}}
  - {id: rows, constant: {shape: [8, 8], fill: index, along: 1}}
  - {id: by_column, from: [x, columns], multiply: {}}
  - {id: offsets, from: [columns, rows], subtract: {}}
  - {id: joined, from: [x, by_column], concat: {along: -1}}
  - {id: pairs, from: [offsets, offsets], concat: {along: 1}}
  - {id: mapped, from: pairs, linear: {dim: 3}}
  - {id: fourier, from: offsets, scale: {factor: 0.5}}
  - {id: sines, activation: {fn: sin}}
  - {id: cosines, from: fourier, activation: {fn: cos}}
  - {id: waves, from: [sines, cosines], concat: {along: -1}}
  - {id: grown, activation: {fn: exp}}
  - {id: norms, from: x, power: {exponent: 2}}
  - {id: norm_sum, reduce: {fn: sum, keepdim: true}}
  - {id: norm, power: {exponent: 0.5}}
  - {id: floor, clamp: {min: 0.5}}
  - {id: unit, from: [x, floor], divide: {}}
  - {id: capped_unit, clamp: {min: -0.25, max: 0.25}}
  - {id: above_half, from: [x, one_half], maximum: {}}
  - {id: soft, activation: {fn: softplus}}
  - {id: bounded, from: [soft, norm], minimum: {}}
  - {id: truncated, from: capped, cast: {dtype: int64}}
  - {id: counted, cast: {dtype: float32}}
outputs: [mixed, gemma, probs, total, halved, diagonal, joined, mapped, grown, capped_unit, bounded, counted]
""")


def every_op_reference(model, x):
    """EVERY_OP written out."""
    capped = 30.0 * torch.tanh(x / 30.0)
    gemma = x / ((x * x).mean(-1, keepdim=True) + 1e-6) ** 0.5 * (1.0 + model.w.value)
    centred = x - x.amax(1, keepdim=True)
    probs = centred.exp() / centred.exp().sum(1, keepdim=True)
    columns = torch.arange(8.0).expand(1, 8, 8)  # fill: index along the last axis
    offsets = columns - columns.transpose(1, 2)  # [1, 8, 8]: column - row
    pairs = torch.cat([offsets, offsets], dim=1)  # [1, 16, 8]
    return (capped @ model.mixed.weight.t() + model.mixed.bias, gemma, probs, probs.sum((1, 2)),
            x.amin(1) * 0.5, x * torch.eye(8), torch.cat([x, x * columns], dim=-1),
            pairs @ model.mapped.weight.t() + model.mapped.bias,
            torch.cat([(offsets * 0.5).sin(), (offsets * 0.5).cos()], dim=-1).exp(),
            F.normalize(x, dim=-1, eps=0.5).clamp(-0.25, 0.25),
            torch.minimum(F.softplus(torch.maximum(x, torch.tensor(0.5))), x.norm(dim=-1, keepdim=True)),
            capped.long().float())


def test_every_op_against_its_definition_and_flop_counter():
    report, model = build_counted(EVERY_OP)
    x = torch.randn(2, 8, 8)
    for got, want in zip(model(x), every_op_reference(model, x), strict=True):
        assert torch.allclose(got, want, atol=TOL)
    checks_shapes(report, model, (x,))
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.randn(1, 8, 8))
    linears = 2 * 8 * 8 * 4 + 2 * 16 * 8 * 3  # [B, 8, 8] -> 4 and the constant [1, 16, 8] -> 3; the rest count 0
    assert counter.get_total_flops() == report.flops == linears


def test_every_op_exports_with_a_dynamic_batch():
    report, model = build_counted(EVERY_OP)
    program = export_program(model, report.graph)
    x = torch.randn(5, 8, 8)  # not the batch it was traced with
    with torch.no_grad():
        for got, want in zip(program.module()(x), model(x), strict=True):
            assert torch.allclose(got, want, atol=TOL)


def test_every_op_in_onnx_matches_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    report, model = build_counted(EVERY_OP)
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4  # at batch 3, traced at another


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_every_op(tmp_path, capsys):
    checks_tensorrt_coverage(EVERY_OP, tmp_path, capsys)


# -- located errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("node, column, message, hint", [
    ("{reduce: {fn: mean, axes: [0]}}", 31, "reduce over axis 0, the batch: each sample must stay its own",
     "axes count from the batch (axis 0): the first axis of a sample is 1, the last -1 (here 1 to 2)"),
    ("{reduce: {fn: sum, axes: [-3]}}", 30, "reduce over axis -3, the batch: each sample must stay its own",
     "the first axis of a sample is 1"),
    ("{reduce: {fn: max, axes: [3]}}", 30, "axis 3 is outside a token sequence [B, 6, 8]",
     "its axes are 1 to 2, or -2 to -1 from the end"),
    ("{reduce: {fn: min, axes: [1, -2]}}", 30, "reduce names an axis twice: [1, -2] on [B, 6, 8]",
     "1 and -2 are one axis: name it once"),
    ("{reduce: {fn: mean, axes: []}}", 31, "`axes` must not be empty", None),
    ("{reduce: {fn: median}}", 19, "`fn` must be 'mean', 'sum', 'max', 'min' or 'norm'; got 'median'", "did you mean 'mean'?"),
    ("{softmax: {axis: 0}}", 22, "softmax over axis 0, the batch: each sample must stay its own",
     "the first axis of a sample is 1"),
    ("{constant: {shape: [8], fill: ones, value: 2.0}}", 48,
     "a constant is filled with ones or with a value, not both", "give `fill: zeros | ones | eye | index` or `value: NUMBER`"),
    ("{constant: {shape: [8], fill: index, along: 0}}", 49,
     "axis 0 is not an axis of the constant [1, 8] other than the batch", "1 is the first of shape"),
    ("{constant: {shape: [8, 4], fill: index, along: 3}}", 52,
     "axis 3 is not an axis of the constant [1, 8, 4] other than the batch", "axes 1 to 2"),
    ("{constant: {shape: [8], fill: ones, along: 1}}", 48, "`along` names the axis of `fill: index`",
     "add fill: index, or leave along out"),
    ("{from: [x, x], concat: {along: 0}}", 36, "axis 0 is not an axis of [B, 6, 8] other than the batch",
     "axes 1 to 2"),
    ("{constant: {shape: [8], fill: eye}}", 24, "an identity needs two axes, got shape [8]",
     "give the last two sizes, e.g. shape: [4, 4]"),
    ("{scale: {factor: .nan}}", 22, "'.nan' is not a finite number; a spec's values are finite",
     "give a number"),
    ("{scale: {factor: 2, by: 3}}", 25, "unknown key 'by' in scale", "allowed keys: factor"),
    ('{shift: {value: "${1.0e300 * 1.0e300}"}}', 24, "number too large (infinite)", None),
    ("{power: {exponent: two}}", 24, "`exponent` must be a number; got 'two'", None),
    ("{clamp: {}}", 6, "clamp needs `min`, `max` or both", "e.g. clamp: {min: 1.0e-12}"),
    ("{clamp: {min: 2, max: 1}}", 19, "clamp's min 2.0 is above its max 1.0", None),
])
def test_bad_parameters_are_located_errors(node, column, message, hint):
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(spec(graph=f"  - {node}\n"), name="bad.yaml")
    error = info.value
    assert message in error.message
    assert hint is None or hint in error.hint
    assert (error.loc.file, error.loc.line, error.loc.col) == ("bad.yaml", 5, column)  # at the offending value


def test_a_non_finite_override_of_a_constant_is_refused():
    with pytest.raises(archspec.SpecError, match="nan is not a finite number"):
        archspec.check_text(spec(params="params:\n  c: 2.0\n", graph='  - {scale: {factor: "${c}"}}\n'),
                            overrides={"c": float("nan")})


def test_archspec_check_exits_1_on_a_bad_op_without_a_traceback(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(spec(graph="  - {id: pooled, reduce: {fn: mean, axes: [0]}}\n"))
    assert main(["check", str(path)]) == EXIT_SPEC == 1
    err = capsys.readouterr().err
    assert f"{path}:5:43: error: pooled: reduce over axis 0, the batch" in err
    assert "hint: axes count from the batch" in err and "Traceback" not in err


def test_cast_turns_ids_into_floats_of_the_models_dtype_and_floats_into_ids():
    """The LayoutLMv3 trial turned int64 coordinates into floats with a 64-row constant table
    and a gather (6 nodes); `cast` says it."""
    report, model = build_counted("""
name: casts
dims: {L: [1, 16]}
inputs:
  ids: {shape: [B, L], dtype: int64}
graph:
  - {id: coords, from: ids, cast: {dtype: float32}}
  - {id: halved, scale: {factor: 0.5}}
  - {id: back, cast: {dtype: int64}}
  - {id: rows, from: back, embed: {vocab: 64, dim: 4, pos: none}}
outputs: [halved, rows]
""")
    assert report.graph.type_of("coords").layout == "tensor" and report.graph.type_of("back").layout == "ids"
    ids = torch.tensor([[3, 8, 63]])
    halved, rows = model(ids)
    assert torch.equal(halved, ids.float() * 0.5)
    assert torch.equal(rows, model.rows.tokens.weight[ids // 2])
    assert model.to(torch.bfloat16)(ids)[0].dtype == torch.bfloat16
    same = archspec.check_text("name: c\ninputs:\n  ids: {shape: [B, 4], dtype: int64}\ngraph:\n"
                               "  - {id: c, cast: {dtype: int64}}\n")  # a block reused on either dtype may say it
    assert [w.message for w in same.graph.warnings] == ["cast to int64 of values that are int64 already does nothing"]
    assert same.graph.type_of("c").layout == "ids"
    with pytest.raises(archspec.SpecError, match="add reads int64 and float32 tensors") as mixed:
        archspec.check_text("name: c\ninputs:\n  ids: {shape: [B, 4], dtype: int64}\n  x: [B, 4]\ngraph:\n"
                            "  - {id: s, from: [ids, x], add: {}}\n")
    assert "cast: {dtype: float32}" in str(mixed.value)


def test_an_int64_input_of_rank_3_is_a_tensor_its_readers_slice_or_cast():
    """The LayoutLMv3 trial's boxes [B, L, 4] int64 were refused (integer inputs were labels, ids
    or grid masks), and went in as four [B, L] inputs."""
    report, model = build_counted("""
name: boxes
dims: {L: [1, 16]}
inputs:
  bbox: {shape: [B, L, 4], dtype: int64}
graph:
  - {id: corners, from: bbox, cast: {dtype: float32}}
  - {id: height, from: bbox, slice: {along: -1, start: 3, stop: 4}}
  - {id: tall, compare: {op: gt, value: 10}}
outputs: [corners, tall]
""")
    assert report.graph.type_of("bbox").shape[1:] == (report.graph.dims["L"], 4)
    bbox = torch.randint(0, 64, (2, 5, 4))
    corners, tall = model(bbox)
    assert torch.equal(corners, bbox.float()) and torch.equal(tall, (bbox[..., 3:] > 10).float())
    with pytest.raises(archspec.SpecError, match="integer input 'x' must be labels"):
        archspec.check_text("name: f\ninputs:\n  x: {shape: [B, 2, 3, 4, 5], dtype: int64}\ngraph:\n"
                            "  - {id: c, cast: {dtype: float32}}\n")


def test_a_lowest_constant_is_the_lowest_finite_value_of_the_models_dtype():
    """The new-words trial built TimesFM's mask with float32's minimum: cast to bfloat16 it was
    -inf, and the padded rows were 0.29 off Hugging Face's finfo(dtype).min."""
    model = archspec.build_text("""
name: lowest
dims: {L: [1, 8]}
inputs:
  x: [B, L, 4]
graph:
  - {id: fixed, constant: {shape: [2, 2], fill: lowest}}
  - {id: sized, from: x, constant: {shape: [L, L], fill: lowest}}
outputs: [fixed, sized]
""")
    x = torch.randn(1, 3, 4)
    for dtype in (torch.float32, torch.bfloat16):
        fixed, sized = model.to(dtype)(x.to(dtype))
        assert sized.shape == (1, 3, 3)
        assert bool((fixed == torch.finfo(dtype).min).all()) and bool((sized == torch.finfo(dtype).min).all())


def test_an_add_keeps_the_grid_whichever_side_holds_it():
    """The ResMLP trial's add of [branch without a grid, x on a grid] lost the grid, and [x, branch]
    kept it: the grid now follows either side of the same layout and shape."""
    text = """name: g
inputs:
  image: [B, 3, 16, 16]
graph:
  - {id: x, patchify: {patch: 4, dim: 8, pos: none}}
  - {id: flat, rearrange: {pattern: "b n c -> b c n"}}
  - {id: mixed, linear: {dim: 16}}
  - {id: back, rearrange: {pattern: "b c n -> b n c", as: tokens}}
  - {id: one, from: [back, x], add: {}}
  - {id: other, from: [x, back], add: {}}
"""
    graph = archspec.check_text(text).graph
    assert graph.type_of("back").grid is None
    assert graph.type_of("one").grid == (4, 4) and graph.type_of("other").grid == (4, 4)


def test_where_is_hugging_faces_masked_fill():
    """where: [condition, x, y]: the OWL-ViT trial wrote `masked_fill(mask == 0, finfo.min)` as eight
    nodes (cast, rearrange, multiply, scale, shift, constant, multiply, add)."""
    text = """name: w
inputs:
  x: [B, 3, 5]
  mask: {shape: [B, 5], dtype: int64}
graph:
  - {id: m3, from: mask, rearrange: {pattern: "b q -> b 1 q"}}
  - {id: low, constant: {shape: [1, 1], fill: lowest}}
  - {id: out, from: [m3, x, low], where: {}}
"""
    model = archspec.build_text(text, seed=0)
    x, mask = torch.randn(2, 3, 5), torch.tensor([[1, 0, 1, 1, 0], [0, 0, 1, 1, 1]])
    assert torch.equal(model(x, mask), x.masked_fill(mask[:, None, :] == 0, torch.finfo(torch.float32).min))
    assert model.to(torch.bfloat16)(x.bfloat16(), mask).dtype == torch.bfloat16
    with pytest.raises(archspec.SpecError, match="where's condition is 0/1 int64, got .* of float32"):
        archspec.check_text(text.replace("from: [m3, x, low]", "from: [x, x, low]"))


def test_a_vector_times_an_image_is_refused_even_where_the_sizes_happen_to_broadcast():
    """The PoolFormer trial's LayerScale written as `param: {shape: [C]}` times an image: a clear
    broadcast error, except where the image's width equals C, where it scaled the width without a
    word (another model)."""
    text = """name: ls
inputs:
  image: [B, 8, 8, 8]
graph:
  - {id: gamma, param: {shape: [8]}}
  - {id: scaled, from: [image, gamma], multiply: {}}
"""
    with pytest.raises(archspec.SpecError, match="the vector's channels would meet the image's width"):
        archspec.check_text(text)
    archspec.check_text(text.replace("shape: [8]", "shape: [8, 1, 1]"))  # LayerScale2d's shape
