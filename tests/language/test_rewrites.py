"""The performance rewrites of compiler/modules/ are exact: each gives the outputs of the plain
computation it replaces (within float rounding, 1e-5), in every path that can reach it.

  - Linear / Conv2d: oneDNN with prepacked weights and fused activations in eager CPU inference
    (Linear from PACKED_MIN_ROWS rows), F.linear / F.conv2d everywhere else; packed again when the weight changes; no cache in the
    state dict, a pickle or a deep copy.
  - Window attention: one gather into window order and one back instead of roll, partition,
    reverse and roll; the mask kept per batch size in eager inference (and recomputed when the
    position bias changes). The reference here is roll + partition written out in the test, with
    the module's own mask: this checks the gather against the roll; the mask and the partition
    themselves are checked against timm's by the parity tests.
  - PVT: spatial reduction, the depthwise-conv MLP and overlapping patch embeddings read and
    write channels-last views: no transposing copies.
  - Attention written out (compiler/modules/attention/form.py, what the aoti target's CPU
    export traces): softmax(q·k^T·scale + mask)·v as plain ops instead of SDPA, for short key
    rows only; whole models against their fused selves, and the export it goes into.
  - Whole models (Swin, Swin v2, PVT v2, ViT): the eager-inference path against the plain path
    (the same model with autograd on, which takes no fast path), and the standalone model.py.
    These compare archspec with itself; timm is the outside reference in test_parity.py.
  - ONNX for ONNX Runtime (export_onnx(optimize=True)): every fusion fires, counted in the graph
    ONNX Runtime runs against what the architecture implies (fused forms only: a plain Gelu
    does not count), and onnxruntime agrees with eager.

The parity tests (test_parity.py) check the same models against timm with these rewrites on.
"""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import archspec
from archspec.compiler.modules.attention.sra import SpatialReductionAttention
from archspec.compiler.modules.attention.window import (WindowAttention, window_order, window_partition,
                                                        window_reverse)
from archspec.compiler.modules.common import PACKED_MIN_ROWS, Conv2d, Linear
from archspec.compiler.modules.mlp import Mlp

from tests.conftest import ROOT

ATOL = 1e-5
ONEDNN = torch.backends.mkldnn.is_available()
needs_onednn = pytest.mark.skipif(not ONEDNN, reason="torch built without oneDNN")

SWIN_SMALL = {"img": 64, "window": 4, "depths": [2, 2, 2, 2], "dims": [16, 32, 64, 128], "heads": [1, 2, 4, 8],
              "classes": 10}
SMALL = {
    "swin_t": SWIN_SMALL,
    "swinv2_t": SWIN_SMALL,
    "pvt_v2_b2": {"img": 64, "depths": [1, 1, 1, 1], "dims": [16, 32, 64, 128], "heads": [1, 2, 4, 8],
                  "classes": 10},
    "vit_ti16": {"img": 32, "depth": 2},
}


class OpLog(TorchDispatchMode):
    """The aten/mkldnn ops a call dispatches."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func))
        return func(*args, **(kwargs or {}))


def ops_of(fn, *args):
    with torch.no_grad(), OpLog() as log:
        fn(*args)
    return log.ops


def seeded(module: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter random (LayerNorms, biases and tables included), so nothing hides."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return module


# -- Linear and Conv2d --------------------------------------------------------------------------------


@needs_onednn
@pytest.mark.parametrize("fn", ["none", "gelu", "gelu_tanh", "relu"])
def test_linear_fast_path_matches_f_linear(fn):
    torch.manual_seed(0)
    lin = seeded(Linear(48, 80)).eval()
    x = torch.randn(3, 50, 48).transpose(0, 1)  # not contiguous; 150 rows (PACKED_MIN_ROWS: 128)
    with torch.no_grad():
        ops = ops_of(lambda t: lin.activate(t, fn), x)
        got = lin.activate(x, fn)
        expected = F.linear(x, lin.weight, lin.bias)
    expected = {"none": expected, "gelu": F.gelu(expected), "gelu_tanh": F.gelu(expected, approximate="tanh"),
                "relu": F.relu(expected)}[fn]
    assert "_linear_pointwise" in ops and "addmm" not in ops and "gelu" not in ops
    assert got.shape == expected.shape
    assert float((got - expected).abs().max()) < ATOL


def test_linear_takes_the_plain_path_with_autograd_in_training_and_under_hooks():
    lin = seeded(Linear(16, 8))
    x = torch.randn(PACKED_MIN_ROWS, 16)
    assert "_linear_pointwise" not in ops_of(lambda t: lin.train()(t), x)  # training
    lin.eval()
    with torch.enable_grad():
        with OpLog() as log:
            y = lin(x.requires_grad_())
    assert "_linear_pointwise" not in log.ops and y.requires_grad
    handle = lin.register_forward_hook(lambda m, a, out: None)
    assert "_linear_pointwise" not in ops_of(lin, x.detach())
    handle.remove()
    assert ("_linear_pointwise" in ops_of(lin, x.detach())) == ONEDNN
    assert "_linear_pointwise" not in ops_of(lin, x.detach()[:PACKED_MIN_ROWS - 1])  # too few rows


@needs_onednn
def test_linear_packs_again_when_the_weight_changes_and_keeps_no_state():
    lin = seeded(Linear(16, 8)).eval()
    x = torch.randn(PACKED_MIN_ROWS, 16)
    assert "_linear_pointwise" in ops_of(lin, x)
    with torch.no_grad():
        first = lin(x)
        lin.load_state_dict({"weight": torch.randn(8, 16), "bias": torch.randn(8)})
        second = lin(x)
        lin.weight.mul_(2)
        third = lin(x)
        assert float((second - F.linear(x, lin.weight / 2, lin.bias)).abs().max()) < ATOL
        assert float((third - F.linear(x, lin.weight, lin.bias)).abs().max()) < ATOL
    assert not torch.allclose(first, second)
    assert set(lin.state_dict()) == {"weight", "bias"}
    clone = copy.deepcopy(lin)
    assert "_inference_cache" not in clone.__dict__
    buffer = io.BytesIO()
    torch.save(lin, buffer)  # the packed (opaque) weight is not pickled
    assert "_inference_cache" not in pickle.loads(pickle.dumps(lin)).__dict__
    with torch.no_grad():
        assert float((clone(x) - third).abs().max()) < ATOL


@needs_onednn
def test_a_cache_key_tells_tensor_objects_apart_even_on_one_storage():
    """A new weight at a freed weight's address (same pointer, version 0) must not reuse the old
    packed copy: the key holds the tensor object and compares by identity."""
    from archspec.compiler.modules.common import tensor_key

    a = torch.ones(4)
    b = a.detach()  # the same storage and version counter: only the object differs
    assert tensor_key(a) == tensor_key(a) and tensor_key(a) != tensor_key(b)
    key = tensor_key(a)
    a.add_(1)  # in place: the version moves
    assert tensor_key(a) != key
    assert tensor_key(torch.ones(2).requires_grad_().detach()) is not None
    with torch.inference_mode():
        assert tensor_key(torch.ones(2)) is None  # no version counter: never cached


def test_linear_bf16_uses_onednn():
    lin = seeded(Linear(32, 16)).eval().to(torch.bfloat16)
    x = torch.randn(PACKED_MIN_ROWS, 32, dtype=torch.bfloat16)
    assert "_linear_pointwise" in ops_of(lin, x)
    with torch.no_grad():
        gap = (lin(x).float() - F.linear(x, lin.weight, lin.bias).float()).abs().max()
    assert float(gap) < 0.05  # bf16 rounding of the output (|y| ~ 1)


@needs_onednn
@pytest.mark.parametrize("fn", ["none", "gelu"])
def test_conv_fast_path_matches_and_keeps_channels_last(fn):
    conv = seeded(Conv2d(24, 24, 3, 1, 1, groups=24)).eval()
    x = torch.randn(2, 5, 6, 24).permute(0, 3, 1, 2)  # tokens viewed as a channels-last image
    with torch.no_grad():
        ops = ops_of(lambda t: conv.activate(t, fn), x)
        got = conv.activate(x, fn)
        expected = F.conv2d(x.contiguous(), conv.weight, conv.bias, 1, 1, 1, 24)
        expected = F.gelu(expected) if fn == "gelu" else expected
    assert "_convolution_pointwise" in ops and "copy_" not in ops and "clone" not in ops
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert float((got - expected).abs().max()) < ATOL


# -- window attention -------------------------------------------------------------------------------------


def reference_window_forward(m: WindowAttention, x: torch.Tensor) -> torch.Tensor:
    """The computation the gathers replace: roll, partition, attention per window, reverse, roll
    (timm's SwinTransformerBlock), with the module's own weights, through plain torch ops."""
    B, N, C = x.shape
    (H, W), (wh, ww), (sh, sw) = m.grid, m.window, m.shift

    def body(h):
        h = h.view(B, H, W, C)
        if sh or sw:
            h = torch.roll(h, (-sh, -sw), (1, 2))
        windows = window_partition(h, wh, ww)  # [B*nW, A, C]
        bias = torch.cat((m.q_bias, m.k_bias, m.v_bias)) if m.q_bias is not None else m.qkv.bias
        qkv = F.linear(windows, m.qkv.weight, bias).reshape(-1, wh * ww, 3, m.heads, C // m.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scale = None
        if m.logit_scale is not None:
            q = F.normalize(q, dim=-1) * torch.clamp(m.logit_scale, max=4.6052).exp()
            k = F.normalize(k, dim=-1)
            scale = 1.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m.attn_mask(B), scale=scale)
        out = F.linear(out.transpose(1, 2).reshape(-1, wh * ww, C), m.proj.weight, m.proj.bias)
        out = window_reverse(out, wh, ww, H, W)
        if sh or sw:
            out = torch.roll(out, (sh, sw), (1, 2))
        return out.reshape(B, N, C)

    if m.place == "res_post":
        return x + m.norm(body(x))
    return x + body(m.norm(x))


WINDOW_CASES = {  # grid, window, shift, bias, cosine, qkv_bias, norm
    "window": ((8, 12), (4, 4), (0, 0), "table", False, True, "pre"),
    "shifted": ((8, 12), (4, 4), (2, 2), "table", False, True, "pre"),
    "shifted_v2": ((8, 8), (4, 4), (2, 2), "cpb", True, "qv", "res_post"),
    "rectangular": ((6, 8), (3, 4), (1, 2), "table", False, True, "pre"),
    "one_window": ((4, 4), (4, 4), (0, 0), "table", False, True, "pre"),
}


@pytest.mark.parametrize("case", list(WINDOW_CASES))
def test_window_gathers_match_roll_and_partition(case):
    grid, window, shift, bias, cosine, qkv_bias, norm = WINDOW_CASES[case]
    torch.manual_seed(0)
    m = seeded(WindowAttention(dim=32, heads=2, grid=grid, window=window, shift=shift, bias=bias, cosine=cosine,
                               qkv_bias=qkv_bias, cpb_hidden=64, norm=norm)).eval()
    x = torch.randn(3, grid[0] * grid[1], 32)
    with torch.no_grad():
        expected = reference_window_forward(m, x)
        fast = m(x)  # eager inference: packed linears, the cached mask
        again = m(x)  # the cached mask
    with torch.enable_grad():
        plain = m(x).detach()  # autograd on: the plain path
    for got in (fast, again, plain):
        assert float((got - expected).abs().max()) < ATOL
    ops = ops_of(m, x)
    assert "roll" not in ops and "clone" not in ops and "copy_" not in ops
    assert ops.count("index_select") == (0 if case == "one_window" else 2)


def test_window_order_is_roll_then_partition():
    grid, window, shift = (6, 8), (3, 4), (1, 2)
    tokens = torch.arange(48).view(1, 6, 8, 1)
    expected = window_partition(torch.roll(tokens, (-1, -2), (1, 2)), 3, 4).flatten()
    assert torch.equal(window_order(grid, window, shift), expected)


def test_the_cached_window_mask_follows_the_position_bias():
    m = seeded(WindowAttention(dim=16, heads=2, grid=(8, 8), window=(4, 4), shift=(2, 2))).eval()
    x = torch.randn(2, 64, 16)
    with torch.no_grad():
        m(x)
        m.position_bias.table.add_(1.0)  # in place: its version changes
        got = m(x)
        expected = reference_window_forward(m, x)
        m.load_state_dict({k: v + 0.5 if "table" in k else v for k, v in m.state_dict().items()})
        assert float((m(x) - reference_window_forward(m, x)).abs().max()) < ATOL
        assert float((m(x[:1]) - reference_window_forward(m, x[:1])).abs().max()) < ATOL  # another batch
    assert float((got - expected).abs().max()) < ATOL
    assert "_inference_cache" not in copy.deepcopy(m).__dict__


# -- PVT: channels-last views ------------------------------------------------------------------------------


def test_spatial_reduction_reads_and_writes_channels_last_views():
    m = seeded(SpatialReductionAttention(dim=32, heads=2, grid=(8, 8), sr_ratio=2)).eval()
    x = torch.randn(2, 64, 32)
    with torch.no_grad():
        h = m.norm(x)
        image = h.transpose(1, 2).reshape(2, 32, 8, 8)  # what the rewrite replaced
        reduced = F.conv2d(image, m.sr.weight, m.sr.bias, 2).flatten(2).transpose(1, 2)
        expected = m.sr_norm(reduced)
        got = m.reduce(h)
        with torch.enable_grad():
            plain = m.reduce(h).detach()
    assert float((got - expected).abs().max()) < ATOL and float((plain - expected).abs().max()) < ATOL
    assert got.is_contiguous()
    ops = ops_of(m.reduce, h)
    assert "copy_" not in ops and "clone" not in ops


@pytest.mark.parametrize("extra_relu", [False, True])
def test_depthwise_conv_mlp_needs_no_copies(extra_relu):
    m = seeded(Mlp(dim=16, hidden=64, act="gelu", grid=(8, 8), dwconv=True, extra_relu=extra_relu)).eval()
    x = torch.randn(2, 64, 16)
    with torch.no_grad():
        h = F.linear(x, m.fc1.weight, m.fc1.bias)
        h = h.transpose(1, 2).reshape(2, 64, 8, 8)
        if extra_relu:
            h = F.relu(h)
        h = F.gelu(F.conv2d(h, m.dwconv.weight, m.dwconv.bias, 1, 1, 1, 64)).flatten(2).transpose(1, 2)
        expected = F.linear(h, m.fc2.weight, m.fc2.bias)
        got = m.body(x)
    with torch.enable_grad():
        plain = m.body(x).detach()
    assert float((got - expected).abs().max()) < ATOL and float((plain - expected).abs().max()) < ATOL
    ops = ops_of(m.body, x)
    assert "copy_" not in ops and "clone" not in ops and ("gelu" not in ops) == ONEDNN


def test_plain_mlp_fuses_its_gelu_into_fc1():
    m = seeded(Mlp(dim=16, hidden=64, act="gelu")).eval()
    x = torch.randn(2, 64, 16)
    with torch.no_grad():
        expected = F.linear(F.gelu(F.linear(x, m.fc1.weight, m.fc1.bias)), m.fc2.weight, m.fc2.bias)
        assert float((m.body(x) - expected).abs().max()) < ATOL
    assert ("gelu" in ops_of(m.body, x)) != ONEDNN


# -- whole models -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=list(SMALL))
def small_model(request):
    spec = request.param
    torch.manual_seed(0)
    model = archspec.build(str(ROOT / "specs" / f"{spec}.yaml"), overrides=SMALL[spec]).eval()
    seeded(model)
    return spec, model


def test_eager_inference_matches_the_plain_path(small_model):
    spec, model = small_model
    size = SMALL[spec]["img"]
    x = torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        fast = model(x)
        again = model(x)
    with torch.enable_grad():
        plain = model(x)
    scale = float(plain.abs().max())
    assert float((fast - plain).abs().max()) < ATOL * max(1.0, scale), (spec, scale)
    assert torch.equal(fast, again)


def test_standalone_model_py_runs_the_rewritten_modules(small_model, tmp_path):
    from archspec.compiler.backends.source import standalone_source

    spec, model = small_model
    source = standalone_source(model, spec, None)
    assert "class Linear(nn.Linear)" in source
    namespace: dict = {}
    exec(compile(source, str(tmp_path / "model.py"), "exec"), namespace)  # noqa: S102 - our own generated file
    standalone = namespace[type(model).__name__]().eval()
    standalone.load_state_dict(model.state_dict())
    size = SMALL[spec]["img"]
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        assert float((standalone(x) - model(x)).abs().max()) < ATOL


def test_attention_written_out_matches_sdpa_and_runs_no_sdpa(small_model, monkeypatch):
    from archspec.compiler.modules.attention import form
    from archspec.compiler.modules.attention.form import AttentionForm, attention_written_out

    # the written form's arithmetic checked in fp32 against SDPA's (packages write it out in bf16 only)
    monkeypatch.setattr(form, "WRITTEN_MAX_KEYS_FP32", form.WRITTEN_MAX_KEYS)
    spec, model = small_model
    size = SMALL[spec]["img"]
    x = torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), OpLog() as fused_log:
        fused = model(x)
    with torch.no_grad(), attention_written_out(model), OpLog() as written_log:
        written = model(x)
    assert any("scaled_dot_product" in op for op in fused_log.ops)
    assert not any("scaled_dot_product" in op for op in written_log.ops) and "exp" in written_log.ops
    assert float((written - fused).abs().max()) < ATOL * max(1.0, float(fused.abs().max()))
    assert not any(m.written for m in model.modules() if isinstance(m, AttentionForm))  # put back


def test_long_or_dynamic_key_rows_keep_the_fused_kernel(monkeypatch):
    from archspec.compiler.modules.attention import form
    from archspec.compiler.modules.attention.form import (WRITTEN_MAX_KEYS, WRITTEN_MAX_KEYS_FP32, AttentionForm,
                                                          attention_written_out)

    monkeypatch.setattr(form, "CPU_HAS_AMX", False)  # the thresholds of a CPU without AMX
    layer = AttentionForm()
    bf16, fp32 = torch.zeros(1, dtype=torch.bfloat16), torch.zeros(1)  # the queries' dtype and device
    with attention_written_out(nn.Sequential()):  # a model without attention: nothing to do
        pass
    assert not layer.writes_out(16, bf16)  # not asked for, not compiling
    layer.written = True
    assert layer.writes_out(WRITTEN_MAX_KEYS, bf16)
    assert not layer.writes_out(WRITTEN_MAX_KEYS + 1, bf16)
    assert WRITTEN_MAX_KEYS_FP32 == 0  # fp32 stays fused at every length (form.py says why)
    assert not layer.writes_out(1, fp32) and not layer.writes_out(49, fp32)

    class Symbolic:  # what a dynamic dimension is while torch.export traces: not an int
        pass

    assert not layer.writes_out(Symbolic(), bf16)


def test_a_cpu_with_amx_keeps_the_fused_kernel_in_bf16(monkeypatch):
    from archspec.compiler.modules.attention import form

    monkeypatch.setattr(form, "CPU_HAS_AMX", True)
    layer = form.AttentionForm()
    layer.written = True  # asked for, as the aoti target's export asks
    assert form.WRITTEN_MAX_KEYS_AMX == 0  # SDPA's kernel runs AMX tiles: the written form lost there (form.py)
    assert not layer.writes_out(49, torch.zeros(1, dtype=torch.bfloat16))
    assert not layer.writes_out(49, torch.zeros(1))


def test_cpu_has_amx_reads_this_machines_flags():
    from archspec.compiler.modules.attention import form
    from archspec.core.isa import read_isa

    assert form.CPU_HAS_AMX == ("amx_bf16" in (read_isa().flags or ()))


def test_torch_compile_traces_bf16_attention_whole(small_model):
    """The form's choice reads nothing while torch.compile traces: no graph break in attention
    (reading the CPU's flags there split swin_t's graph in 30: 1.7x the time compiled frozen)."""
    spec, model = small_model
    size = SMALL[spec]["img"]
    x = torch.randn(2, 3, size, size).to(torch.bfloat16)
    with torch.no_grad():
        explained = torch._dynamo.explain(copy.deepcopy(model).to(torch.bfloat16))(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons[:1]


def graph_of_compile(model, x):
    """The ops of the graph torch.compile hands its backend for `model(x)`, and the output (the
    graph run as captured: no inductor)."""
    captured = []

    def backend(gm, example_inputs):
        captured.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend=backend, dynamic=False)(x)
    ops = [str(n.target) for gm in captured for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    return ops, out


# (precision, the CPU has AMX, short rows written out): form.py's choice on each kind of CPU
FORMS = [("bf16", False, True), ("bf16", True, False), ("fp32", False, False)]


@pytest.mark.parametrize("precision, amx, written", FORMS)
def test_a_cpu_compile_writes_short_attention_out_in_bf16_only(precision, amx, written, monkeypatch):
    """torch.compile on the CPU (bench's compile target, a user's own) writes Swin's short windows
    out in bf16 on a CPU without AMX, as the package does, and keeps SDPA in fp32, on AMX and in
    eager (form.py): the same outputs either way."""
    from archspec.compiler.modules.attention import form

    monkeypatch.setattr(form, "CPU_HAS_AMX", amx)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = seeded(archspec.build(str(ROOT / "specs" / "swin_t.yaml"), overrides=SMALL["swin_t"])).eval().to(dtype)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3)).to(dtype)
    ops, compiled = graph_of_compile(model, x)
    blocks = sum(SMALL["swin_t"]["depths"])
    assert sum("scaled_dot_product" in op for op in ops) == (0 if written else blocks)
    assert sum(op.endswith("exp") for op in ops) == (blocks if written else 0)
    with torch.no_grad(), OpLog() as eager_log:
        expected = model(x)
    assert any("scaled_dot_product" in op for op in eager_log.ops)  # eager keeps the fused kernel
    bound = ATOL if precision == "fp32" else 3e-2 * max(1.0, float(expected.float().abs().max()))
    assert float((compiled.float() - expected.float()).abs().max()) < bound


@pytest.mark.parametrize("precision, amx, written", FORMS)
def test_the_aoti_cpu_export_writes_short_attention_out_in_bf16_only(precision, amx, written, monkeypatch):
    """Swin's short windows written out in a bf16 package for a CPU without AMX; an fp32 one, or
    one for an AMX CPU, keeps SDPA's kernel (form.py)."""
    from archspec.compiler.backends.targets.aoti import export_for_package
    from archspec.compiler.modules.attention import form

    monkeypatch.setattr(form, "CPU_HAS_AMX", amx)

    report = archspec.check(str(ROOT / "specs" / "swin_t.yaml"), overrides=SMALL["swin_t"])
    model = seeded(archspec.build(str(ROOT / "specs" / "swin_t.yaml"), overrides=SMALL["swin_t"])).eval()
    program = export_for_package(model, report.graph, precision, (1, 4))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    blocks = sum(SMALL["swin_t"]["depths"])
    assert sum("scaled_dot_product" in t for t in targets) == (0 if written else blocks)
    assert targets.count("aten.exp.default") == (blocks if written else 0)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = model(x)
        bound = ATOL if precision == "fp32" else 3e-2 * max(1.0, float(expected.abs().max()))
        assert float((program.module()(x) - expected).abs().max()) < bound


def test_the_aoti_export_keeps_sdpa_for_a_dynamic_sequence_length():
    from archspec.compiler.backends.targets.aoti import export_for_package

    tiny = {"vocab": 64, "dim": 32, "depth": 1, "heads": 2}
    report = archspec.check(str(ROOT / "specs" / "gpt2.yaml"), overrides=tiny)
    model = archspec.build(str(ROOT / "specs" / "gpt2.yaml"), overrides=tiny).eval()
    program = export_for_package(model, report.graph, "fp32", (1, 4))  # L: 1 to 1024, dynamic
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert sum("scaled_dot_product" in t for t in targets) == 1 and "aten.exp.default" not in targets


# -- ONNX for ONNX Runtime ----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec,fusions", [("swin_t", None), ("pvt_v2_b2", None),
                                          ("swin_t", ("attention", "bias_gelu", "skip_layer_norm"))],
                         ids=["swin_t", "pvt_v2_b2", "swin_t+skip_layer_norm"])
def test_onnx_for_onnxruntime_fuses_and_matches(spec, fusions, tmp_path):
    pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.onnx import DEFAULT_FUSIONS, export_onnx
    from archspec.compiler.lower import lower

    report = archspec.check(str(ROOT / "specs" / f"{spec}.yaml"), overrides=SMALL[spec])
    model = lower(report.graph, seed=0)
    seeded(model)
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"), optimize=True,
                         fusions=fusions or DEFAULT_FUSIONS)
    assert result.max_difference is not None and result.max_difference < ATOL, result.summary()
    found = {f.op: f for f in result.fusions}
    assert result.opset == 23 and not result.notes, result.summary()
    assert all(f.complete for f in result.fusions), result.summary()
    assert found["Attention"].found == found["Attention"].expected > 0
    if spec == "swin_t":  # PVT v2's GELU follows a depthwise conv: nothing to fuse it with
        assert found["Gelu/BiasGelu"].found == sum(SMALL[spec]["depths"])  # one per MLP
    else:
        assert "Gelu/BiasGelu" not in found
    if fusions and "skip_layer_norm" in fusions:
        # from the architecture, not from the pass: a residual add feeds a LayerNorm wherever a
        # pre-norm sub-layer follows another in a stage (two per block, less the first of each
        # stage, which reads the merge's output), and at the final norm
        depths = SMALL[spec]["depths"]
        assert found["SkipLayerNormalization"].found == sum(2 * d - 1 for d in depths) + 1
        assert found["SkipLayerNormalization"].expected == found["SkipLayerNormalization"].found
    else:
        assert "SkipLayerNormalization" not in found


def test_onnx_fusions_are_checked():
    from archspec.compiler.backends.onnx import export_onnx

    with pytest.raises(ValueError, match="unknown ONNX fusions"):
        export_onnx(None, None, "x.onnx", optimize=True, fusions=("attention", "everything"))
