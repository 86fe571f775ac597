"""Families declared once (DESIGN section 10): the element-wise ops from one table on each floor
(archspec/primitives/ops/elementwise.py, compiler/modules/elementwise.py), the layout ops from
one file on each (ops/layout.py, modules/layout.py). Both floors hold the same rows; every
member says its traits (no cost, keeps the grid, no ONNX fusion) and none is assumed; a spec of
every member and layout op computes what its definition says, through eager, torch.export,
ONNX Runtime, TensorRT's coverage and the standalone model.py.

Small specs, built once per test; all CPU fp32.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.backends.onnx import export_onnx
from archspec.compiler.backends.onnx_fusions import FUSES, NO_FUSION
from archspec.compiler.facts import KEEPS, ONNX_FUSION, TOKEN_GRID
from archspec.compiler.lowering_rules import LOWERINGS, load_lowerings
from archspec.compiler.modules import elementwise as torch_floor
from archspec.compiler.modules.layout import OnImage
from archspec.compiler.modules.pad import Pad
from archspec.compiler.modules.pool import Pool
from archspec.primitives import registry
from archspec.primitives.base import Cost, Op, no_cost
from archspec.primitives.ops.elementwise import ELEMENTWISE, ELEMENTWISE_OPS

from tests.conftest import checks_tensorrt_coverage

TOL = 1e-5


def test_the_family_is_its_table():
    assert [row.name for row in ELEMENTWISE] == list(ELEMENTWISE_OPS)
    for row in ELEMENTWISE:
        op = registry.op(row.name)
        assert op is ELEMENTWISE_OPS[row.name] and op.Params is row.params and op.doc == row.doc
        assert op.reads(None) == row.reads and op.variadic == row.variadic


def test_both_floors_hold_the_same_rows():
    rules = set(ELEMENTWISE_OPS)
    torch_rows = set(torch_floor.ELEMENTWISE_FUNCTIONS) | set(torch_floor.MODULES)
    assert rules == torch_rows, f"rule floor only: {rules - torch_rows}, torch floor only: {torch_rows - rules}"
    assert not set(torch_floor.ELEMENTWISE_FUNCTIONS) & set(torch_floor.MODULES)
    load_lowerings()
    assert all(op in LOWERINGS for op in ELEMENTWISE_OPS.values())


def test_a_row_without_a_torch_function_fails_naming_it():
    with pytest.raises(KeyError, match="'mish' has no torch function"):
        torch_floor._lowering("mish")


def test_every_member_says_its_traits():
    load_lowerings()
    for op in ELEMENTWISE_OPS.values():  # no FLOPs; no parameters but an activation's learned scalars
        assert op.row.learned is None or op.primitive == "activation"
        assert TOKEN_GRID.of(op) == KEEPS
        assert ONNX_FUSION.of(op) is None and op in NO_FUSION and op not in FUSES
    activation = ELEMENTWISE_OPS["activation"]
    for fn, learned in (("relu", 0), ("star_relu", 2)):
        assert activation.cost(activation.Params.model_validate({"fn": fn}), [], None, None) == Cost(learned, 0)
    for label in ("to_image", "to_tokens", "resize", "upsample", "pad", "pool", "softmax"):
        assert type(registry.op(label)).cost is no_cost, label


def test_an_op_that_says_no_cost_has_none_assumed():
    class Silent(Op):
        primitive = "silent"

    with pytest.raises(NotImplementedError, match="silent has no cost rule"):
        Silent().cost(None, [], None, None)

    class Free(Op):
        primitive = "free"
        cost = no_cost

    assert Free().cost(None, [], None, None) == Cost(0, 0)


def test_an_elementwise_module_holds_its_params_as_constants():
    scale = torch_floor.Elementwise(name="scale", factor=0.125)
    x = torch.randn(2, 3)
    assert scale.factor == 0.125 and torch.equal(scale(x), x * 0.125)
    assert repr(scale) == "Elementwise(scale, factor=0.125)"
    add = torch_floor.Elementwise(name="add")
    assert torch.equal(add(x, x, x), x + x + x)


def test_pad_and_pool_read_a_token_grid_as_an_image_alike():
    assert issubclass(Pad, OnImage) and issubclass(Pool, OnImage)
    tokens = torch.randn(2, 5 * 7, 4)
    image = tokens.transpose(1, 2).reshape(2, 4, 5, 7)
    pooled = Pool("max", (2, 2), (2, 2), (0, 0), True, grid=(5, 7))(tokens)
    assert torch.equal(pooled, F.max_pool2d(image, 2).flatten(2).transpose(1, 2))
    padded = Pad(0.0, to_multiple=(2, 2))(image)
    assert padded.shape == (2, 4, 6, 8) and torch.equal(padded[:, :, :5, :7], image)


# -- every member and layout op, through every export ----------------------------------------------

FAMILIES = """name: families
inputs:
  x: [B, 4, 8]
graph:
  - {id: a, add: {}, from: [x, x, x]}
  - {id: d, subtract: {}, from: [a, x]}
  - {id: m, multiply: {}, from: [d, x]}
  - {id: pos, clamp: {min: 0.5, max: 4.0}, from: x}
  - {id: q, divide: {}, from: [m, pos]}
  - {id: p, power: {exponent: 2}, from: pos}
  - {id: s, scale: {factor: 0.5}, from: p}
  - {id: t, shift: {value: -1.0}, from: s}
  - {id: g, activation: {fn: gelu}, from: t}
  - {id: dropped, dropout: {rate: 0.1}, from: g}
  - {id: kept, drop_path: {rate: 0.1}, from: dropped}
  - {id: big, compare: {op: gt, value: 0.0}, from: kept}
  - {id: gated, multiply: {}, from: [q, big]}
  - {id: image, rearrange: {pattern: "b (h w) c -> b c h w", sizes: {h: 2}, as: image}, from: gated}
  - {id: padded, pad: {sides: [1, 1, 0, 2]}, from: image}
  - {id: grid, to_tokens: {}, from: padded}
  - {id: pooled, pool: {fn: mean, kernel: 2}, from: grid}
  - {id: back, to_image: {}, from: pooled}
  - {id: up, upsample: {factor: 2, mode: bilinear}, from: back}
  - {id: sized, resize: {size: [3, 5], mode: bicubic}, from: up}
outputs: [q, big, sized]
"""


def families_reference(x):
    a = x + x + x
    pos = x.clamp(0.5, 4.0)
    q = (a - x) * x / pos
    g = F.gelu((pos ** 2) * 0.5 - 1.0)
    big = (g > 0).float()
    image = (q * big).reshape(x.shape[0], 2, 2, 8).permute(0, 3, 1, 2)  # b (h w) c -> b c h w
    padded = F.pad(image, (0, 2, 1, 1))  # [B, 8, 4, 4]
    back = F.avg_pool2d(padded, 2)  # [B, 8, 2, 2]
    up = F.interpolate(back, scale_factor=2, mode="bilinear", align_corners=False)
    return q, big, F.interpolate(up, size=(3, 5), mode="bicubic", align_corners=False)


@pytest.fixture(scope="module")
def built():
    report = archspec.check_text(FAMILIES)
    model = archspec.build_text(FAMILIES, seed=0).eval()
    return report, model


def test_every_member_against_its_definition(built):
    report, model = built
    assert report.params == 0 and report.flops == 0
    x = torch.randn(3, 4, 8)
    for name, got, want in zip(("q", "big", "sized"), model(x), families_reference(x), strict=True):
        assert list(got.shape) == [3 if str(d) == "B" else d for d in report.graph.type_of(name).shape], name
        assert torch.allclose(got, want, atol=TOL), name


def test_every_member_exports_with_a_dynamic_batch(built):
    report, model = built
    program = export_program(model, report.graph)
    x = torch.randn(5, 4, 8)
    with torch.no_grad():
        for got, want in zip(program.module()(x), model(x), strict=True):
            assert torch.allclose(got, want, atol=TOL)


def test_every_member_in_onnx_matches_onnxruntime(built, tmp_path):
    pytest.importorskip("onnxruntime")
    report, model = built
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_every_member(tmp_path, capsys):
    checks_tensorrt_coverage(FAMILIES, tmp_path, capsys)


def test_the_standalone_model_py_gives_the_same(built, tmp_path):
    from archspec.compiler.backends.source import standalone_source

    report, model = built
    text = standalone_source(model, report.name, report.file)
    assert "class Elementwise(nn.Module)" in text and "class OnImage(nn.Module)" in text
    (tmp_path / "model.py").write_text(text)
    loaded = importlib.util.spec_from_file_location("families_model", tmp_path / "model.py")
    source = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(source)
    again = getattr(source, type(model).__name__)().eval()
    x = torch.randn(2, 4, 8)
    with torch.no_grad():
        for got, want in zip(again(x), model(x), strict=True):
            assert torch.equal(got, want)


MASKED_SCORES = """name: masked_scores
dims: {L: [1, 16]}
inputs:
  x: [B, L, 8]
graph:
  - {id: query_at, from: x, constant: {shape: [L, L], fill: index, along: 1}}
  - {id: key_at, from: x, constant: {shape: [L, L], fill: index}}
  - {id: ahead, from: [key_at, query_at], subtract: {}}
  - {id: future, from: ahead, compare: {op: gt, value: 0}}
  - {id: hidden, from: future, scale: {factor: -1.0e+4}}
  - {id: k, from: x, linear: {dim: 8}}
  - {id: s, from: [x, k], einsum: {eq: "b i d, b j d -> b i j"}}
  - {id: masked, from: [s, hidden], add: {}}
  - {id: out, from: [masked, k], einsum: {eq: "b i j, b j d -> b i d"}}
outputs: [out]
"""


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_float_compare_takes_the_models_dtype(dtype):
    """The causal-mask recipe (compare, scale, add to the scores) in a bf16 model: the mask was
    float32, promoted the scores and the next einsum failed (DiffLlama trial, exit 3)."""
    model = archspec.build_text(MASKED_SCORES, seed=0).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        want = model(x)
        got = model.to(dtype)(x.to(dtype))
    assert got.dtype == dtype and (got.float() - want).abs().max() < 0.02 * want.abs().max()
    compare = next(m for m in model.modules() if isinstance(m, torch_floor.Compare))
    assert compare(torch.tensor([1.0, -1.0], dtype=dtype)).tolist() == [1, 0]
    as_ids = torch_floor.Compare("gt", 0, "int64").to(dtype)
    assert as_ids(torch.tensor([1.0, -1.0])).dtype == torch.int64
