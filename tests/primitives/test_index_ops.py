"""The index ops (issue 18): argsort, gather, scatter and compare, each against a torch
computation written here from its definition, and together as MAE's random masking against
Hugging Face's `ViTMAEEmbeddings.random_masking`. Also: node shapes, parameters and FLOPs
against torch's, located errors for bad parameters, torch.export with a dynamic batch,
onnxruntime, and TensorRT coverage.

Small specs; all CPU fp32.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import example_inputs, export_program
from archspec.compiler.lower import lower

from tests.conftest import build_counted, checks_shapes

TOL = 1e-5


def flops_of(model, args) -> int:
    """FlopCounterMode's count of one forward (batch 1)."""
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(*[a[:1] for a in args])
    return counter.get_total_flops()


# -- MAE's random masking ------------------------------------------------------------------------

MASKING = """
name: masking
params:
  ratio: 0.75
inputs:
  x: [B, 16, 8]
  noise: [B, 16]
graph:
  - {id: shuffle, from: noise, argsort: {}}                 # ids_shuffle
  - {id: restore, from: shuffle, argsort: {}}               # ids_restore
  - {id: kept, from: [x, shuffle], gather: {count: "${int(16 * (1 - ratio))}"}}
  - {id: mask, from: restore, compare: {op: ge, value: "${int(16 * (1 - ratio))}"}}  # 1 = removed
outputs: [kept, mask, restore]
"""


def hf_random_masking(x, noise, ratio=0.75):
    """Hugging Face's ViTMAEEmbeddings.random_masking of a tiny config (hidden size 8)."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.vit_mae.modeling_vit_mae import ViTMAEEmbeddings

    config = transformers.ViTMAEConfig(hidden_size=8, image_size=16, patch_size=4, num_channels=3, mask_ratio=ratio)
    return ViTMAEEmbeddings(config).random_masking(x, noise)


def test_mae_random_masking_equals_hugging_face():
    report, model = build_counted(MASKING)
    x, noise = torch.randn(3, 16, 8), torch.rand(3, 16)
    kept, mask, restore = model(x, noise)
    ref_kept, ref_mask, ref_restore = hf_random_masking(x, noise)
    assert torch.equal(kept, ref_kept) and kept.shape == (3, 4, 8)
    assert torch.equal(mask, ref_mask) and mask.dtype == torch.float32
    assert torch.equal(restore, ref_restore) and restore.dtype == torch.int64
    assert report.graph.type_of("kept").grid is None
    checks_shapes(report, model, (x, noise), dtypes=True)
    assert report.params == 0 and report.flops == flops_of(model, (x, noise)) == 0


def test_mae_embeddings_are_patchify_then_gather_with_skip_prefix():
    """ViTMAEEmbeddings (patches + pos[1:], masked; then cls + pos[0] in front) with the same weights."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.vit_mae.modeling_vit_mae import ViTMAEEmbeddings

    report, model = build_counted("""
name: mae_embeddings
inputs:
  image: [B, 3, 16, 16]
  noise: [B, 16]
graph:
  - {id: patch, from: image, patchify: {patch: 4, dim: 8, cls_token: true, pos: learned}}
  - {id: shuffle, from: noise, argsort: {}}
  - {id: restore, from: shuffle, argsort: {}}
  - {id: kept, from: [patch, shuffle], gather: {count: 4, skip_prefix: true}}
  - {id: mask, from: restore, compare: {op: ge, value: 4}}
outputs: [kept, mask, restore]
""")
    config = transformers.ViTMAEConfig(hidden_size=8, image_size=16, patch_size=4, num_channels=3, mask_ratio=0.75)
    reference = ViTMAEEmbeddings(config).eval()
    with torch.no_grad():
        reference.patch_embeddings.projection.weight.copy_(model.patch.proj.weight)
        reference.patch_embeddings.projection.bias.copy_(model.patch.proj.bias)
        reference.cls_token.copy_(model.patch.cls_token)
        reference.position_embeddings.copy_(model.patch.pos_embed)
        image, noise = torch.randn(2, 3, 16, 16), torch.rand(2, 16)
        for got, want in zip(model(image, noise), reference(image, noise)):
            assert torch.equal(got, want)
    assert report.params == sum(p.numel() for p in reference.parameters())
    checks_shapes(report, model, (image, noise), dtypes=True)


def test_the_restore_direction_puts_kept_tokens_back_in_place():
    """MAE's decoder: cat(kept, filler) gathered by ids_restore has each kept token at its place."""
    report, model = build_counted(MASKING.replace("  noise: [B, 16]", "  noise: [B, 16]\n  fill: [B, 12, 8]")
                          .replace("outputs: [kept, mask, restore]", """\
  - {id: joined, from: [kept, fill], concat: {}}
  - {id: unshuffled, from: [joined, restore], gather: {}}
outputs: [unshuffled, mask]"""))
    x, noise = torch.randn(2, 16, 8), torch.rand(2, 16)
    unshuffled, mask = model(x, noise, torch.zeros(2, 12, 8))
    assert torch.equal(unshuffled, x * (1 - mask).unsqueeze(-1))
    checks_shapes(report, model, (x, noise, torch.zeros(2, 12, 8)), dtypes=True)


# -- each op against its definition -----------------------------------------------------------------

def test_argsort_descending_of_a_float_sequence_and_of_ids():
    report, model = build_counted("""
name: a
inputs:
  scores: [B, 10]
  ids: {shape: [B, 10], dtype: int64}
graph:
  - {id: down, from: scores, argsort: {descending: true}}
  - {id: up, from: ids, argsort: {}}
outputs: [down, up]
""")
    scores, ids = torch.randn(2, 10), torch.stack([torch.randperm(10) for _ in range(2)])
    down, up = model(scores, ids)
    assert torch.equal(scores.gather(1, down), scores.sort(dim=1, descending=True).values)
    assert torch.equal(ids.gather(1, up), torch.arange(10).expand(2, 10))  # the inverse permutation
    checks_shapes(report, model, (scores, ids), dtypes=True)


GRID = """
name: g
inputs:
  image: [B, 3, 16, 16]
  index: {shape: [B, 6], dtype: int64}
graph:
  - {id: patch, from: image, patchify: {patch: 4, dim: 8, cls_token: true}}
"""


def test_gather_keeps_the_class_token_in_front_with_skip_prefix():
    report, model = build_counted(GRID + "  - {id: kept, from: [patch, index], gather: {count: 5, skip_prefix: true}}\n")
    image, index = torch.randn(2, 3, 16, 16), torch.stack([torch.randperm(16)[:6] for _ in range(2)])
    patches = model.patch(image)  # [2, 17, 8]: class token, then 4x4 patches
    picked = torch.stack([patches[b, 1:][index[b, :5]] for b in range(2)])  # [2, 5, 8]
    assert torch.equal(model(image, index), torch.cat([patches[:, :1], picked], 1))
    out = report.graph.type_of("kept")
    assert out.prefix == 1 and out.grid is None and out.shape[1:] == (6, 8)
    assert report.graph.node("kept").op.value_range(report.graph.node("kept").params, 1, _context(report, "kept")) == 16
    checks_shapes(report, model, (image, index), dtypes=True)


def _context(report, name):
    from archspec.primitives.infer import GraphContext

    return GraphContext(report.graph, report.graph.node(name))


def test_scatter_places_tokens_and_keeps_the_grid_of_what_it_fills():
    report, model = build_counted(GRID + """
  - {id: grid, slice: {start: 1}}
  - {id: kept, from: [grid, index], gather: {}}
  - {id: first, from: [grid, index], gather: {count: 4}}
  - {id: learned, param: {shape: [16, 8], init: normal}}
  - {id: placed, from: [learned, index, first], scatter: {count: 4}}
  - {id: back, from: [patch, index, kept], scatter: {skip_prefix: true}}
outputs: [placed, back]
""")
    image, index = torch.randn(3, 3, 16, 16), torch.stack([torch.randperm(16)[:6] for _ in range(3)])
    placed, back = model(image, index)
    patches, learned = model.patch(image), model.learned.value  # [3, 17, 8], [1, 16, 8]
    expected = learned.expand(3, -1, -1).clone()
    for b in range(3):
        for m in range(4):
            expected[b, index[b, m]] = patches[b, 1 + index[b, m]]
    assert torch.equal(placed, expected)
    assert torch.equal(back, patches)  # gathered tokens put back where they came from
    assert report.graph.type_of("back") == report.graph.type_of("patch")  # the 4x4 grid and the class token
    checks_shapes(report, model, (image, index), dtypes=True)


@pytest.mark.parametrize("op,python", [("lt", lambda a, v: a < v), ("le", lambda a, v: a <= v),
                                       ("gt", lambda a, v: a > v), ("ge", lambda a, v: a >= v),
                                       ("eq", lambda a, v: a == v), ("ne", lambda a, v: a != v)])
def test_compare_gives_zeros_and_ones(op, python):
    report, model = build_counted(f"""
name: c
inputs:
  x: [B, 6, 8]
  ids: {{shape: [B, 6], dtype: int64}}
graph:
  - {{id: m, from: ids, compare: {{op: {op}, value: 3, dtype: int64}}}}
  - {{id: masked, from: [x, m], mask_token: {{}}}}
  - {{id: f, from: x, compare: {{op: {op}, value: 0.25}}}}
outputs: [m, masked, f]
""")
    x, ids = torch.randn(2, 6, 8), torch.randint(0, 6, (2, 6))
    m, masked, f = model(x, ids)
    assert torch.equal(m, python(ids, 3).long()) and report.graph.type_of("m").layout == "ids"
    assert torch.equal(f, python(x, 0.25).float()) and report.graph.type_of("f").layout == "tensor"
    assert torch.allclose(masked, torch.where(m.bool().unsqueeze(-1), model.masked.token, x), atol=TOL)
    checks_shapes(report, model, (x, ids), dtypes=True)


# -- located errors -----------------------------------------------------------------------------------

BAD = """
name: bad
inputs:
  image: [B, 3, 16, 16]
  noise: [B, 16]
graph:
  - {id: patch, from: image, patchify: {patch: 4, dim: 8, cls_token: true}}
  - {id: order, from: noise, argsort: {}}
"""


@pytest.mark.parametrize("node,message,hint", [
    ("{from: [patch, order], gather: {count: 4}}",
     "x ([B, 17, 8] 4x4+1) has 1 prefix (class) token(s), which the index would count",
     "`skip_prefix: true` keeps them in front and indexes the others; or drop them first (slice: {start: 1})"),
    ("{from: [patch, order], gather: {count: 20, skip_prefix: true}}",
     "count 20 is more than the 16 indices", "at most 16"),
    ("{from: patch, argsort: {}}",
     "argsort sorts the rows of a [B, N] tensor, got a 4x4 token grid [B, 17, 8] 4x4+1",
     "a float input [B, N] (e.g. noise: [B, 196]) or token ids [B, N]"),
    ("{from: [patch, noise], gather: {skip_prefix: true}}",
     "the index must be int64 [B, M] (e.g. an argsort), got a feature vector [B, 16] of float32",
     "an argsort of it gives one, or `cast: {dtype: int64}` of floats that hold whole numbers (a `constant` with "
     "`fill: index`)"),
    ("{from: [noise, order], gather: {skip_prefix: true}}",
     "skip_prefix is for tokens; x is a feature vector", None),
    ("{from: [patch, order, patch], scatter: {skip_prefix: true}}",
     "x ([B, 17, 8] 4x4+1) has 1 prefix (class) token(s), which the index would count",
     "drop them first (slice: {start: 1})"),
    ("{from: [patch, order, order], scatter: {skip_prefix: true}}",
     "scatter puts [B, 16] int64 into [B, 17, 8] 4x4+1: the sizes after the sequence and the dtypes must agree",
     None),
    ("{from: [noise, order, noise], scatter: {count: 8}}",
     "8 indices for 16 values", "one index per value placed: `count: 16` uses the first 16"),
    ("{from: order, compare: {op: gte, value: 4}}",
     "`op` must be 'lt', 'le', 'gt', 'ge', 'eq' or 'ne'; got 'gte'", "did you mean 'ge'?"),  # greater or equal
])
def test_bad_parameters_give_a_located_error_with_a_hint(node, message, hint):
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(BAD + f"  - {node}\n")
    assert info.value.message.endswith(message)
    assert info.value.loc.line == 9
    if hint is not None:
        assert info.value.hint == hint


def test_check_command_exits_1_without_a_traceback(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(BAD + "  - {from: [patch, order], gather: {count: 4}}\n")
    done = subprocess.run([sys.executable, "-m", "archspec", "check", str(spec)], capture_output=True, text=True)
    assert done.returncode == 1
    assert f"{spec}:9:" in done.stderr and "prefix (class) token" in done.stderr and "hint: `skip_prefix" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


# -- export, ONNX, TensorRT -------------------------------------------------------------------------

ALL = MASKING.replace("outputs: [kept, mask, restore]", """\
  - {id: values, from: [noise, shuffle], gather: {count: 4}}
  - {id: back, from: [x, shuffle, kept], scatter: {count: 4}}
outputs: [kept, mask, restore, values, back]
""")


def test_export_has_a_dynamic_batch():
    report = archspec.check_text(ALL)
    model = lower(report.graph, seed=0).eval()
    program = export_program(model, report.graph)
    for batch in (1, 5):
        args = example_inputs(report.graph, batch=batch)
        with torch.no_grad():
            for got, want in zip(program.module()(*args), model(*args)):
                assert torch.equal(got, want)


def test_onnxruntime_agrees_at_other_batches(tmp_path):
    onnx = pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.onnx import export_onnx

    report = archspec.check_text(ALL)
    model = lower(report.graph, seed=0).eval()
    path = str(tmp_path / "model.onnx")
    export_onnx(model, report.graph, path, verify=False)
    kinds = {n.op_type for n in onnx.load(path).graph.node}
    assert {"TopK", "GatherND", "ScatterElements", "GreaterOrEqual"} <= kinds  # argsort, gather, scatter, compare
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        args = example_inputs(report.graph, batch=batch)
        outs = session.run(None, {n.name: a.numpy() for n, a in zip(report.graph.inputs(), args)})
        with torch.no_grad():
            for got, want in zip(outs, model(*args)):
                assert torch.equal(torch.from_numpy(got), want)


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_every_op_with_a_dynamic_batch():
    from archspec.compiler.backends import tensorrt as T

    coverage = T.coverage_report(archspec.check_text(ALL).graph, batch="1:8:64")
    assert coverage.complete, coverage.summary()


def test_a_slice_of_a_param_keeps_its_batch_of_one():
    report = archspec.check_text("""
name: sl
inputs:
  x: [B, 13, 8]
graph:
  - {id: pos, param: {shape: [66, 8]}}
  - {id: used, slice: {start: 2, stop: 15}}
  - {id: y, from: [x, used], add: {}}
""")
    assert report.graph.node("used").type.shape[0] == 1


def test_scatter_count_hint_offers_only_a_count_that_fits():
    """The PaliGemma trial was told `count: 256` for an index of 8: a count above the indices fails too."""
    from archspec.core.types import Sym
    from archspec.primitives.ops.scatter import count_hint

    assert count_hint(16, 32) == "one index per value placed: `count: 16` uses the first 16"
    assert count_hint(256, 8) == "one index per value placed: an index [B, 256] (it has 8)"
    assert "count" not in count_hint(Sym("L", 1, 64), 8)
