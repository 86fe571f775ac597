"""The relative_bias op (T5's bucketed relative position bias): its shape rule and located
errors, its cost against the built module and FlopCounterMode, its buckets and biases against
transformers' own `T5Attention._relative_position_bucket` and `compute_bias` (bidirectional and
causal, equal and unequal lengths, distances past max_distance), and its export with a dynamic
batch and a symbolic length."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.modules.relative_bias import relative_buckets
from archspec.core.errors import SpecError
from archspec.core.types import Sym

HEADS = 4


def spec(bias: str, inputs: str = "  x: [B, L, 16]\n", reads: str = "x", dims: str = "dims:\n  L: [1, 64]\n") -> str:
    return f"name: t\n{dims}inputs:\n{inputs}graph:\n  - {{id: bias, from: {reads}, relative_bias: {bias}}}\n"


def t5_attention(heads: int, buckets: int, max_distance: int, bidirectional: bool):
    """transformers' T5Attention holding a relative position table (is_decoder: causal buckets)."""
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(d_model=32, d_kv=8, num_heads=heads, relative_attention_num_buckets=buckets,
                      relative_attention_max_distance=max_distance, is_decoder=not bidirectional)
    return T5Attention(config, has_relative_attention_bias=True, layer_idx=0).eval()


# -- shape rule ------------------------------------------------------------------------------------

def test_one_stream_gives_a_square_bias_over_its_symbolic_length():
    report = archspec.check_text(spec(f"{{heads: {HEADS}}}"))
    out = report.graph.node("bias").type
    assert out.layout == "tensor" and out.dtype == "float32"
    assert out.shape[:2] == (1, HEADS) and out.shape[2] == out.shape[3] == Sym("L", 1, 64)


def test_two_streams_give_queries_by_keys_and_ids_count_as_a_stream():
    text = spec(f"{{heads: {HEADS}, bidirectional: false}}", reads="[q, k]", dims="",
                inputs="  q: [B, 7, 16]\n  k: {shape: [B, 12], dtype: int64}\n")
    assert archspec.check_text(text).graph.node("bias").type.shape == (1, HEADS, 7, 12)


@pytest.mark.parametrize("bias, inputs, reads, message, hint", [
    ("{heads: 4, buckets: 33}", None, "x", "33 is odd", "use 32 or 34 buckets"),
    ("{heads: 4, buckets: 2}", None, "x", "leave no room", "at least 4"),
    ("{heads: 4, buckets: 1, bidirectional: false}", None, "x", "leave no room", "at least 2"),
    ("{heads: 4, buckets: 32, max_distance: 8}", None, "x", "max_distance 8 must exceed the 8", "above 8"),
    ("{heads: 4}", "  x: [B, 3, 32, 32]\n", "x", "reads token sequences", "embedded tokens"),
    ("{heads: 4}", "  x: {shape: [B, 16, 8], grid: [4, 4]}\n", "x", "4x4 grid", "window attention"),
])
def test_bad_parameters_and_inputs_are_located_errors(bias, inputs, reads, message, hint):
    text = spec(bias, reads=reads) if inputs is None else spec(bias, inputs=inputs, reads=reads, dims="")
    with pytest.raises(SpecError) as e:
        archspec.check_text(text)
    diagnostic = e.value.diagnostics[0]
    assert message in diagnostic.message and diagnostic.path == "bias" and diagnostic.loc is not None
    assert hint in diagnostic.hint


def test_three_inputs_are_refused():
    text = spec(f"{{heads: {HEADS}}}", reads="[x, x, x]")
    with pytest.raises(SpecError, match="reads"):
        archspec.check_text(text)


def test_an_attention_refuses_a_bias_of_other_heads():
    text = (spec("{heads: 3}") + "  - {id: attn, from: [x, bias], attention: {kind: global, heads: 4, bias: true}}\n")
    with pytest.raises(SpecError, match="does not fit scores"):
        archspec.check_text(text)


# -- cost ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dims, max_distance", [("  L: [1, 64]\n", 8), ("  L: [1, 10]\n", 128)],
                         ids=["clamped", "by-length"])
def test_cost_is_the_table_and_the_bucket_buffer_with_no_flops(dims, max_distance):
    text = spec(f"{{heads: {HEADS}, buckets: 16, max_distance: {max_distance}}}", dims=f"dims:\n{dims}")
    report = archspec.check_text(text)
    model = archspec.build_text(text).eval()
    assert report.params == 16 * HEADS == sum(p.numel() for p in model.parameters())
    held = sum(b.numel() * b.element_size() for b in model.buffers())
    assert sum(row.buffer_bytes for row in report.nodes) == held
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randn(1, report.graph.dims["L"].hi, 16))
    assert report.flops == counter.get_total_flops() == 0


# -- values against transformers ---------------------------------------------------------------

@pytest.mark.parametrize("bidirectional", [True, False], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("buckets, max_distance", [(32, 128), (16, 20), (8, 9)])
def test_buckets_equal_t5s(bidirectional, buckets, max_distance):
    transformers_t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    relative = torch.arange(-600, 601)
    theirs = transformers_t5.T5Attention._relative_position_bucket(relative, bidirectional, buckets, max_distance)
    assert torch.equal(relative_buckets(relative, bidirectional, buckets, max_distance), theirs)
    assert len(theirs.unique()) == buckets - bidirectional  # every bucket reached (but "after, distance 0")


@pytest.mark.parametrize("bidirectional", [True, False], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("buckets, max_distance, queries, keys", [
    (32, 128, 150, 150),   # t5-small's table, distances past max_distance
    (8, 6, 40, 40),        # past 2 x max_distance: the clamp of the tabulated distances
    (8, 5, 9, 23),         # more keys than queries (two streams)
    (8, 5, 23, 4),         # more queries than keys
])
def test_bias_equals_t5s_compute_bias(bidirectional, buckets, max_distance, queries, keys):
    pytest.importorskip("transformers")
    ref = t5_attention(HEADS, buckets, max_distance, bidirectional)
    torch.manual_seed(0)
    with torch.no_grad():
        ref.relative_attention_bias.weight.normal_()
    two = queries != keys
    dims = "dims:\n  N: [1, 200]\n  M: [1, 200]\n"
    text = spec(f"{{heads: {HEADS}, buckets: {buckets}, max_distance: {max_distance}, "
                f"bidirectional: {str(bidirectional).lower()}}}", dims=dims, reads="[q, k]" if two else "q",
                inputs="  q: [B, N, 16]\n" + ("  k: [B, M, 16]\n" if two else ""))
    model = archspec.build_text(text).eval()
    model.bias.table.data.copy_(ref.relative_attention_bias.weight)
    args = (torch.randn(2, queries, 16),) + ((torch.randn(2, keys, 16),) if two else ())
    with torch.no_grad():
        ours = model(*args)
        theirs = ref.compute_bias(queries, keys)
    assert ours.shape == (1, HEADS, queries, keys)
    assert torch.equal(ours, theirs)


def test_the_table_is_learned():
    model = archspec.build_text(spec(f"{{heads: {HEADS}}}")).train()
    model(torch.randn(2, 9, 16)).square().sum().backward()
    assert model.bias.table.grad is not None and model.bias.table.grad.abs().sum() > 0


# -- export ----------------------------------------------------------------------------------------

def test_exports_with_a_dynamic_batch_and_a_symbolic_length():
    text = spec(f"{{heads: {HEADS}, buckets: 8, max_distance: 10}}") + (
        "  - {id: attn, from: [x, bias], attention: {kind: global, heads: 4, scale: 1.0, bias: true}}\n")
    report = archspec.check_text(text)
    model = archspec.build_text(text).eval()
    program = export_program(model, report.graph)
    for batch, length in ((3, 5), (1, 40)):
        x = torch.randn(batch, length, 16)
        with torch.no_grad():
            assert torch.allclose(program.module()(x), model(x), atol=1e-6, rtol=0)
