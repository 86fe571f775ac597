"""relative_lookup: a table's entry for every (query, key) pair of a token grid by its 2-D offset,
against the index tables of the reference implementations (timm's Swin relative_position_index,
LeViT's attention_bias_idxs of Attention and AttentionDownsample), in a spec whose attention is
written from tensor ops (LeViT's bias added to einsum scores: timm's own bias from the same
table), with located errors for a table of the wrong size, the checker's shapes, a dynamic-batch
export, ONNX Runtime and TensorRT coverage.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

import archspec
from archspec.compiler.backends.export import example_inputs, export_program
from archspec.compiler.lower import lower
from archspec.compiler.modules.relative_lookup import pair_offset_index

timm = pytest.importorskip("timm")


@pytest.mark.parametrize("h, w", [(7, 7), (4, 6), (1, 5)])
def test_signed_offsets_are_swins_relative_position_index(h, w):
    from timm.models.swin_transformer import get_relative_position_index

    assert torch.equal(pair_offset_index(h, w, "signed"), get_relative_position_index(h, w))


@pytest.mark.parametrize("h, w", [(4, 4), (3, 5)])
def test_key_minus_query_is_timms_tensorflow_maxvit_bias(h, w):
    """TensorFlow's MaxViT (timm's RelPosBiasTf) reads its table by key minus query: the MaxViT
    trial swapped the lookup's query and key axes with a rearrange; `order: key_minus_query`."""
    from timm.layers.pos_embed_rel import RelPosBiasTf

    theirs = RelPosBiasTf((h, w), num_heads=3)
    torch.nn.init.normal_(theirs.relative_position_bias_table, generator=torch.Generator().manual_seed(0))
    expected = theirs.get_bias()  # [heads, N, N]
    spec = (f"name: t\ninputs: {{x: [B, 4]}}\ngraph:\n  - {{id: table, param: {{shape: [3, {(2*h-1)*(2*w-1)}]}}}}\n"
            f"  - {{id: bias, from: table, relative_lookup: {{grid: [{h}, {w}], order: ORDER}}}}\n"
            "outputs: {bias: bias}\n")
    for order, equal in (("key_minus_query", True), ("query_minus_key", False)):
        model = archspec.build_text(spec.replace("ORDER", order))
        with torch.no_grad():
            model.table.value.copy_(theirs.relative_position_bias_table.reshape(1, 3, -1))
            ours = model(torch.zeros(1, 4))
        assert torch.equal(ours[0], expected) == equal  # [1, heads, N, N]


@pytest.mark.parametrize("resolution, stride", [(7, 1), (14, 1), (7, 2), (14, 2), (4, 3)])
def test_absolute_offsets_are_levits_attention_bias_idxs(resolution, stride):
    from timm.models.levit import Attention, AttentionDownsample

    if stride == 1:
        reference = Attention(dim=32, key_dim=8, num_heads=2, resolution=resolution)
    else:
        reference = AttentionDownsample(in_dim=32, out_dim=48, key_dim=8, num_heads=2, resolution=resolution,
                                        stride=stride)
    ours = pair_offset_index(resolution, resolution, "absolute", stride)
    assert torch.equal(ours, reference.attention_bias_idxs)
    assert ours.shape == ((-(-resolution // stride)) ** 2, resolution ** 2)


def levit_scores(grid: int, heads: int, stride: int, key_dim: int = 8) -> str:
    """LeViT's attention scores with its bias, written from tensor ops (queries on every stride-th
    token of the grid, as AttentionDownsample's)."""
    queries = -(-grid // stride)
    return f"""
name: levit_scores
inputs:
  q: [B, {heads}, {queries * queries}, {key_dim}]
  k: [B, {heads}, {grid * grid}, {key_dim}]
graph:
  - {{id: scores, from: [q, k], einsum: {{eq: "b h i d, b h j d -> b h i j"}}}}
  - {{id: scaled, scale: {{factor: {key_dim ** -0.5}}}}}
  - {{id: table, param: {{shape: [{heads}, {grid * grid}], init: normal}}}}
  - {{id: bias, from: table, relative_lookup: {{grid: {grid}, offsets: absolute, stride: {stride}}}}}
  - {{id: biased, from: [scaled, bias], add: {{}}}}
  - {{id: attn, softmax: {{}}}}
outputs: [attn]
"""


@pytest.mark.parametrize("stride", [1, 2])
def test_levits_biased_attention_from_tensor_ops_is_timms(stride):
    """The same table in timm's Attention / AttentionDownsample gives the same attention weights
    (timm's forward, its softmax taken from the scores it computes)."""
    from timm.models.levit import Attention, AttentionDownsample

    grid, heads, key_dim = 7, 2, 8
    text = levit_scores(grid, heads, stride, key_dim)
    report = archspec.check_text(text)
    model = archspec.build_text(text, seed=0).eval()
    assert report.params == heads * grid * grid == sum(p.numel() for p in model.parameters())
    if stride == 1:
        reference = Attention(dim=heads * key_dim, key_dim=key_dim, num_heads=heads, resolution=grid)
    else:
        reference = AttentionDownsample(in_dim=heads * key_dim, out_dim=32, key_dim=key_dim, num_heads=heads,
                                        resolution=grid, stride=stride)
    reference.eval()  # timm's train() returns None: not chained
    with torch.no_grad():
        reference.attention_biases.copy_(model.table.value[0])
    q, k = example_inputs(report.graph, batch=3)
    with torch.no_grad():
        theirs = (q @ k.transpose(-2, -1) * reference.scale + reference.get_attention_biases(q.device)).softmax(-1)
        ours = model(q, k)
    assert ours.shape == theirs.shape == (3, heads, q.shape[2], grid * grid)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    assert not torch.allclose(ours, (q @ k.transpose(-2, -1) * reference.scale).softmax(-1), atol=1e-3)


SPEC = """
name: lookup
inputs:
  x: [B, 4, 12]
graph:
  - {id: table, param: {shape: [3, 12], init: normal}}
  - {id: bias, from: table, relative_lookup: {grid: [3, 4], offsets: absolute}}
  - {id: signed, param: {shape: [2, 3, 35], init: normal}}
  - {id: signed_bias, from: signed, relative_lookup: {grid: [3, 4], stride: 2}}
  - {id: read, from: [x, table], einsum: {eq: "b i c, b h c -> b h i"}}
outputs: [bias, signed_bias, read]
"""


def test_the_checker_gives_the_modules_shapes_and_costs():
    report = archspec.check_text(SPEC)
    assert report.graph.type_of("bias").shape == (1, 3, 12, 12)
    assert report.graph.type_of("signed_bias").shape == (1, 2, 3, 4, 12)  # 2x2 queries of the 3x4 grid
    model = archspec.build_text(SPEC, seed=0).eval()
    with torch.no_grad():
        bias, signed_bias, _ = model(*example_inputs(report.graph, batch=2))
    assert bias.shape == (1, 3, 12, 12) and signed_bias.shape == (1, 2, 3, 4, 12)
    table = model.table.value  # [1, 3, 12]
    index = pair_offset_index(3, 4, "absolute")
    assert torch.equal(bias[0, :, 5, 2], table[0, :, index[5, 2]])
    assert "bias.index" in dict(model.named_buffers()) and "bias.index" not in model.state_dict()  # not saved


@pytest.mark.parametrize("node, message, hint", [
    ("{from: table, relative_lookup: {grid: [3, 4]}}",
     "relative_lookup over a 3x4 grid with signed offsets reads a table of 35 rows on its last axis, got "
     "[1, 3, 12]", "e.g. a param: {shape: [heads, 35]}, one bias per head and offset"),
    ("{from: table, relative_lookup: {grid: [3, 4], offsets: absolute, stride: 5}}",
     "stride 5 is larger than the 3x4 grid", None),
    ("{from: x, relative_lookup: {grid: 2, offsets: abs}}", "`offsets` must be 'signed' or 'absolute'; got 'abs'",
     None),
])
def test_bad_parameters_give_a_located_error(node, message, hint):
    text = SPEC.split("outputs:")[0] + f"  - {node}\noutputs: [bias]\n"
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    assert info.value.message.endswith(message), info.value.message
    assert info.value.loc.line == 11
    if hint is not None:
        assert info.value.hint == hint


def test_export_onnxruntime_and_a_dynamic_batch(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from archspec.compiler.backends.onnx import export_onnx

    report = archspec.check_text(SPEC)
    model = lower(report.graph, seed=0).eval()
    program = export_program(model, report.graph)
    path = str(tmp_path / "model.onnx")
    export_onnx(model, report.graph, path, verify=False)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        args = example_inputs(report.graph, batch=batch)
        outs = session.run(None, {n.name: a.numpy() for n, a in zip(report.graph.inputs(), args)})
        with torch.no_grad():
            for exported, ort, want in zip(program.module()(*args), outs, model(*args)):
                assert torch.equal(exported, want)
                torch.testing.assert_close(torch.from_numpy(ort), want, rtol=0, atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_the_lookup():
    from archspec.compiler.backends import tensorrt as T

    text = levit_scores(grid=7, heads=2, stride=2)
    coverage = T.coverage_report(archspec.check_text(text).graph, batch="1:8:64")
    assert coverage.complete, coverage.summary()


def offset_index(size: int):
    """Another helper of the name of decomposed.py's `offset_index` (this op's was named so once,
    and SAM's standalone model.py called the wrong one)."""
    return size


def test_the_standalone_source_refuses_two_helpers_of_one_name():
    from archspec.compiler.backends import source
    from archspec.compiler.modules.attention.scores import decomposed

    seen: dict = {}
    source._dependencies(decomposed.offset_index, seen)
    source._dependencies(decomposed.offset_index, seen)  # the same helper again: fine
    with pytest.raises(ValueError, match="two helpers named 'offset_index'"):
        source._dependencies(offset_index, seen)
