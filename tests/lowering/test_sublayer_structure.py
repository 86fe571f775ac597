"""The residual structure of sub-layers (issue 18): `residual: false` (a parallel block, GPT-J /
PaLM: x + attn(ln1 x) + mlp(ln2 x), with a variadic `add`), `norm: sandwich` (CogView, Gemma 2:
x + post_norm(f(norm(x)))) and RMSNorm with an offset (Gemma: scale by 1 + w, computed in
float32), each against a computation written here or Hugging Face's own modules (GemmaRMSNorm,
GemmaMLP); parameters and FLOPs against the module and torch's counts; every node's shape;
located errors for options that do not go together; the exports; and the shipped specs'
parameters and FLOPs unchanged.

Small specs, built once per test; all CPU fp32 unless said.
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.cli import EXIT_SPEC, main
from archspec.compiler.backends.export import export_program
from archspec.compiler.backends.onnx import export_onnx

from tests.conftest import ROOT, build_counted, checks_shapes, perturb_constants, run_capturing

TOL = 1e-5
WIDTH, HEADS, HIDDEN = 16, 2, 32


def build(text: str, seed: int = 0):
    report, model = build_counted(text, seed)
    return report, perturb_constants(model, seed)


def counted_flops(model, x) -> int:
    """FlopCounterMode's count for one sample, attention as the matmuls it counts (SDPA's CPU
    kernels are not counted)."""
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        model(x[:1])
    return counter.get_total_flops()


def spec(graph: str) -> str:
    return f"name: t\ninputs:\n  x: [B, 6, {WIDTH}]\ngraph:\n{graph}"


# -- written out ----------------------------------------------------------------------------------


def layer_norm(x, norm):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def causal_attention(x, node):
    """softmax(q k^T / sqrt(d) + causal mask) v, projected, from the node's weights."""
    B, L, C = x.shape
    d = C // HEADS
    q, k, v = (x @ node.qkv.weight.t() + node.qkv.bias).split(C, dim=-1)
    q, k, v = (t.reshape(B, L, HEADS, d).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, C)
    return out @ node.proj.weight.t() + node.proj.bias


def gelu_mlp(x, node):
    return F.gelu(x @ node.fc1.weight.t() + node.fc1.bias) @ node.fc2.weight.t() + node.fc2.bias


# -- residual: false: a parallel block --------------------------------------------------------------

PARALLEL = spec(f"""\
  - {{id: attn, from: x, attention: {{kind: causal, heads: {HEADS}, residual: false}}}}
  - {{id: mlp, from: x, mlp: {{hidden: {HIDDEN}, residual: false, layer_scale: 0.5}}}}
  - {{id: block, from: [x, attn, mlp], add: {{}}}}
""")


def test_a_parallel_block_adds_both_branches_to_the_input_once():
    report, model = build(PARALLEL)
    x = torch.randn(2, 6, WIDTH)
    attn, mlp = model.attn, model.mlp
    want = (x + causal_attention(layer_norm(x, attn.norm), attn)
            + mlp.layer_scale.gamma * gelu_mlp(layer_norm(x, mlp.norm), mlp))
    with torch.no_grad():
        got = model(x)
        branch = model.attn(x)
    assert torch.allclose(got, want, atol=TOL)
    assert torch.allclose(branch, causal_attention(layer_norm(x, attn.norm), attn), atol=TOL)  # no x in it
    checks_shapes(report, model, (x,))
    assert counted_flops(model, x) == report.flops


def test_the_branches_keep_their_parameters():
    report = archspec.check_text(PARALLEL)
    with_residual = archspec.check_text(PARALLEL.replace(", residual: false", ""))
    assert report.params == with_residual.params
    attention = 3 * (WIDTH * WIDTH + WIDTH) + WIDTH * WIDTH + WIDTH + 2 * WIDTH
    mlp = 2 * HIDDEN * WIDTH + HIDDEN + WIDTH + 2 * WIDTH + WIDTH  # + LayerScale
    assert report.params == attention + mlp


def test_add_takes_any_number_of_inputs_and_broadcasts():
    report, model = build("name: t\ninputs:\n  x: [B, 6, 8]\n  y: [B, 6, 8]\ngraph:\n"
                          "  - {id: p, param: {shape: [8], init: normal}}\n"
                          "  - {id: s, from: [x, y, p, x], add: {}}\n")
    x, y = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    assert torch.allclose(model(x, y), x + y + model.p.value + x, atol=TOL)
    checks_shapes(report, model, (x, y))


def test_add_of_one_input_or_of_shapes_that_do_not_broadcast_is_refused():
    with pytest.raises(archspec.SpecError):
        archspec.check_text(spec("  - {from: [x], add: {}}\n"))
    text = ("name: t\ninputs:\n  x: [B, 6, 8]\n  y: [B, 6, 8]\n  z: [B, 5, 8]\ngraph:\n"
            "  - {from: [x, y, z], add: {}}\n")
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    assert info.value.message == "add: shapes [B, 6, 8] and [B, 5, 8] do not broadcast (dimension 1: 6 vs 5)"


# -- norm: sandwich ---------------------------------------------------------------------------------


def test_a_sandwich_mlp_normalises_before_and_after_its_body():
    report, model = build(spec(f"  - {{id: mlp, mlp: {{hidden: {HIDDEN}, norm: sandwich, norm_eps: 1.0e-6}}}}\n"))
    x = torch.randn(2, 6, WIDTH)
    node = model.mlp
    want = x + layer_norm(gelu_mlp(layer_norm(x, node.norm), node), node.post_norm)
    with torch.no_grad():
        assert torch.allclose(model(x), want, atol=TOL)
    assert node.norm.eps == node.post_norm.eps == 1e-6
    assert report.params == 2 * HIDDEN * WIDTH + HIDDEN + WIDTH + 2 * (2 * WIDTH)  # two LayerNorms
    checks_shapes(report, model, (x,))
    assert counted_flops(model, x) == report.flops


GEMMA2_BLOCK = spec(f"""\
  - {{id: attn, attention: {{kind: causal, heads: {HEADS}, norm: sandwich, norm_kind: rms, norm_offset: 1.0,
                            norm_eps: 1.0e-6}}}}
  - {{id: mlp, mlp: {{hidden: {HIDDEN}, act: gelu_tanh, gated: true, bias: false, norm: sandwich,
                     norm_kind: rms, norm_offset: 1.0, norm_eps: 1.0e-6}}}}
""")


def gemma_norm(weight, eps=1e-6):
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    norm = GemmaRMSNorm(weight.shape[0], eps=eps)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm


def gemma_mlp(node):
    from transformers import GemmaConfig
    from transformers.models.gemma.modeling_gemma import GemmaMLP

    mlp = GemmaMLP(GemmaConfig(hidden_size=WIDTH, intermediate_size=HIDDEN, hidden_act="gelu_pytorch_tanh"))
    gate, up = node.fc1.weight.detach().chunk(2)
    with torch.no_grad():
        mlp.gate_proj.weight.copy_(gate)
        mlp.up_proj.weight.copy_(up)
        mlp.down_proj.weight.copy_(node.fc2.weight)
    return mlp


def test_a_gemma2_block_matches_hugging_faces_norms_and_mlp():
    """Gemma 2's decoder layer: x + post_attention_layernorm(attn(input_layernorm(x))), then
    + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x))), every norm (1 + w)."""
    pytest.importorskip("transformers")
    report, model = build(GEMMA2_BLOCK)
    x = torch.randn(2, 6, WIDTH)
    attn, mlp = model.attn, model.mlp
    input_layernorm, post_attention_layernorm = gemma_norm(attn.norm.weight), gemma_norm(attn.post_norm.weight)
    pre_feedforward_layernorm = gemma_norm(mlp.norm.weight)
    post_feedforward_layernorm = gemma_norm(mlp.post_norm.weight)
    with torch.no_grad():
        h = x + post_attention_layernorm(causal_attention(input_layernorm(x), attn))
        want = h + post_feedforward_layernorm(gemma_mlp(mlp)(pre_feedforward_layernorm(h)))
        assert torch.allclose(model(x), want, atol=TOL)
    checks_shapes(report, model, (x,))
    assert counted_flops(model, x) == report.flops
    norms = 2 * WIDTH  # two RMSNorms per sub-layer, a weight each
    assert report.params == (4 * WIDTH * WIDTH + 4 * WIDTH) + 3 * HIDDEN * WIDTH + 2 * norms


# -- RMSNorm with an offset: Gemma's --------------------------------------------------------------------


def test_the_offset_norm_starts_as_gemmas_does():
    pytest.importorskip("transformers")
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    model = archspec.build_text(GEMMA2_BLOCK + "  - {id: final, norm: {kind: rms, offset: 1.0}}\n")
    for norm in (model.attn.norm, model.attn.post_norm, model.mlp.norm, model.final):
        assert torch.equal(norm.weight, GemmaRMSNorm(WIDTH).weight)  # zeros: the scale 1 + w starts at 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_norm_op_and_the_sublayer_norm_compute_gemmas_rms_norm(dtype):
    """Perturbed weights; in half precision too, where Gemma's order (scale in float32, then cast)
    differs from Llama's (cast, then scale)."""
    pytest.importorskip("transformers")
    text = spec(f"  - {{id: final, norm: {{kind: rms, offset: 1.0, eps: 1.0e-6}}}}\n"
                f"  - {{id: mlp, mlp: {{hidden: {HIDDEN}, norm_kind: rms, norm_offset: 1.0, norm_eps: 1.0e-6}}}}\n")
    report, model = build(text)
    with torch.no_grad():
        for norm in (model.final, model.mlp.norm):
            norm.weight.copy_(torch.randn(WIDTH))
    model = model.to(dtype)
    x = torch.randn(2, 6, WIDTH).to(dtype)
    _, outputs = run_capturing(model, (x,), names=["final", "mlp.norm"])
    with torch.no_grad():
        assert torch.equal(outputs["final"], gemma_norm(model.final.weight).to(dtype)(x))
        assert torch.equal(outputs["mlp.norm"], gemma_norm(model.mlp.norm.weight).to(dtype)(outputs["final"]))
    assert report.params == WIDTH + (2 * HIDDEN * WIDTH + HIDDEN + WIDTH + WIDTH)


def test_an_offset_res_post_norm_still_starts_every_block_as_the_identity():
    model = archspec.build_text(spec(f"  - mlp: {{hidden: {HIDDEN}, norm: res_post, norm_kind: rms, "
                                     f"norm_offset: 1.0}}\n")).eval()
    x = torch.randn(2, 6, WIDTH)
    with torch.no_grad():
        assert torch.equal(model(x), x)


# -- mixture of experts ---------------------------------------------------------------------------------

MOE = spec(f"  - {{id: moe, mlp: {{hidden: {HIDDEN}, experts: 4, top_k: 2, act: silu, gated: true, bias: false, "
           f"norm_kind: rms}}}}\n")


def randomise(model, seed: int = 0):
    """Every parameter drawn again (std 0.5): the router's choice then differs from token to token."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=generator))
    return model


def test_a_mixture_of_experts_matches_hugging_faces_mixtral_block():
    pytest.importorskip("transformers")
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralRMSNorm, MixtralSparseMoeBlock

    report, model = build(MOE)
    node = randomise(model).moe
    config = MixtralConfig(hidden_size=WIDTH, intermediate_size=HIDDEN, num_local_experts=4, num_experts_per_tok=2,
                           hidden_act="silu", rms_norm_eps=1e-5)
    block, norm = MixtralSparseMoeBlock(config).eval(), MixtralRMSNorm(WIDTH, eps=1e-5)
    with torch.no_grad():
        block.gate.weight.copy_(node.router.weight)
        block.experts.gate_up_proj.copy_(node.experts.fc1)
        block.experts.down_proj.copy_(node.experts.fc2)
        norm.weight.copy_(node.norm.weight)
        x = torch.randn(2, 6, WIDTH)
        assert torch.allclose(model(x), x + block(norm(x)), atol=TOL)
        chosen = node.route(norm(x).reshape(-1, WIDTH)) > 0  # [T, E]
    assert (chosen.sum(-1) == 2).all() and len({tuple(c.tolist()) for c in chosen}) > 1  # routing matters here
    checks_shapes(report, model, (x,))
    assert counted_flops(model, x) == report.flops
    expert = 3 * HIDDEN * WIDTH  # gate, up, down
    assert report.params == 4 * expert + 4 * WIDTH + WIDTH  # experts, router, RMSNorm


def test_experts_without_gating_and_with_biases_are_weighted_by_the_renormalised_top_k():
    report, model = build(spec(f"  - {{id: moe, mlp: {{hidden: {HIDDEN}, experts: 3, top_k: 1, norm: none}}}}\n"))
    node = randomise(model).moe
    x = torch.randn(2, 6, WIDTH)
    tokens = x.reshape(-1, WIDTH)
    choice = (tokens @ node.router.weight.t()).argmax(-1)  # top 1: the weight renormalises to 1
    experts = node.experts
    hidden = F.gelu(torch.einsum("tc,thc->th", tokens, experts.fc1[choice]) + experts.fc1_bias[choice])
    want = torch.einsum("th,tch->tc", hidden, experts.fc2[choice]) + experts.fc2_bias[choice]
    with torch.no_grad():
        assert torch.allclose(model(x), x + want.reshape(x.shape), atol=TOL)
    assert report.params == 3 * (2 * HIDDEN * WIDTH + HIDDEN + WIDTH) + 3 * WIDTH
    assert counted_flops(model, x) == report.flops


# -- options that do not go together -------------------------------------------------------------------


@pytest.mark.parametrize("node, message, hint, at", [
    ("mlp: {hidden: 32, norm: post, residual: false}",
     "norm: post normalises the residual sum, and residual: false leaves no sum", "norm: res_post", "false"),
    ("mlp: {hidden: 32, norm: none, norm_eps: 1.0e-6}", "norm_eps is given but norm: none leaves no norm",
     "drop norm_eps", "1.0e-6"),
    ("attention: {kind: global, heads: 2, qk_norm_eps: 1.0e-5}", "qk_norm_eps goes with qk_norm",
     "give `qk_norm: layer` or `rms`", "1.0e-5"),
    ("attention: {kind: global, heads: 2, qk_norm_offset: 1.0}", "qk_norm_offset goes with qk_norm",
     "give `qk_norm: rms`", "1.0}"),
    ("mlp: {hidden: 32, norm: none, norm_offset: 1.0}",
     "norm_offset is given but norm: none leaves no norm", "drop norm_offset", "1.0"),
    ("mlp: {hidden: 32, norm: none, norm_bias: false, norm_eps: 1.0e-6}",  # the Moonshine trial: both at once
     "norm_eps and norm_bias are given but norm: none leaves no norm", "drop norm_eps and norm_bias", "1.0e-6"),
    ("norm: {kind: batch, offset: 1.0}", "unknown key 'offset' in norm (kind batch)",
     "'offset' is a parameter of kinds layer, rms", "offset"),
    ("norm: {kind: rms, offset: .inf}", "'.inf' is not a finite number", None, ".inf"),
    ("mlp: {hidden: 32, norm: sandwiched}", "sandwiched", "sandwich", "sandwiched"),
    ("mlp: {hidden: 32, residual: none}", "`residual` must be true or false; got 'none'", None, "none}"),
    ("mlp: {hidden: 32, experts: 4, top_k: 5}", "top_k 5 is more than the 4 experts", "at most experts (4)", "5"),
    ("mlp: {hidden: 32, top_k: 2}", "top_k goes with experts", "add experts", "2}"),
    ("mlp: {hidden: 32, experts: 8}", "a mixture of 8 experts needs top_k", "add top_k: 2", "8"),
    ("mlp: {hidden: 32, experts: 0, top_k: 1}", "", None, "0"),
])
def test_options_that_do_not_go_together_are_located_errors(node, message, hint, at):
    text = spec(f"  - {{id: bad, {node}}}\n")
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text, name="bad.yaml")
    error = info.value
    assert message in error.message
    assert hint is None or hint in error.hint
    line = text.splitlines()[4]
    assert (error.loc.file, error.loc.line, error.loc.col) == ("bad.yaml", 5, line.index(at) + 1)


def test_archspec_check_exits_1_on_a_bad_combination_without_a_traceback(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(spec("  - {id: ffn, mlp: {hidden: 32, norm: post, residual: false}}\n"))
    assert main(["check", str(path)]) == EXIT_SPEC == 1
    err = capsys.readouterr().err
    line = f"{path}:5:{path.read_text().splitlines()[4].index('false') + 1}:"
    assert line in err and "ffn: norm: post normalises the residual sum" in err
    assert "hint: for a branch with its norm after the body use norm: res_post" in err and "Traceback" not in err


# -- exports ------------------------------------------------------------------------------------------

EVERY_OPTION = spec(f"""\
  - {{id: attn, from: x, attention: {{kind: causal, heads: {HEADS}, residual: false, norm: sandwich}}}}
  - {{id: mlp, from: x, mlp: {{hidden: {HIDDEN}, residual: false, norm_kind: rms, norm_offset: 1.0}}}}
  - {{id: block, from: [x, attn, mlp], add: {{}}}}
  - {{id: ffn, mlp: {{hidden: {HIDDEN}, gated: true, act: silu, norm: sandwich, norm_kind: rms, norm_offset: 1.0}}}}
  - {{id: final, norm: {{kind: rms, offset: 1.0}}}}
  - {{id: moe, mlp: {{hidden: {HIDDEN}, experts: 4, top_k: 2, gated: true, act: silu, bias: false, norm_kind: rms}}}}
""")


def test_every_option_exports_with_a_dynamic_batch():
    report, model = build(EVERY_OPTION)
    program = export_program(model, report.graph)
    x = torch.randn(5, 6, WIDTH)  # not the batch it was traced with
    with torch.no_grad():
        assert torch.allclose(program.module()(x), model(x), atol=TOL)


def test_every_option_in_onnx_matches_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    report, model = build(EVERY_OPTION)
    for optimize in (False, True):  # the plain graph, and the one fused for ONNX Runtime
        result = export_onnx(model, report.graph, str(tmp_path / f"model_{optimize}.onnx"), optimize=optimize)
        assert result.max_difference is not None and result.max_difference < 1e-4  # at batch 3, traced at another


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_every_option(tmp_path, capsys):
    path = tmp_path / "every_option.yaml"
    path.write_text(EVERY_OPTION)
    assert main(["check", str(path), "--target", "tensorrt"]) == 0
    assert "nothing falls back to PyTorch" in capsys.readouterr().out


# -- the shipped specs are unchanged ----------------------------------------------------------------------

SHIPPED = {  # (params, FLOPs) of every shipped spec before these options existed
    "bert_base": (109482240, 96637943808),
    "clip_vit_b32": (151277313, 14777164800),
    "deit_s_distilled": (22436432, 9248280576),
    "gpt2": (124439808, 291648307200),
    "llama": (43848192, 146834194432),
    "pvt_v1_tiny": (13229288, 3865823232),
    "pvt_v2_b0": (3666760, 1132131328),
    "pvt_v2_b2": (25362856, 8053469184),
    "pvt_v2_b2_li": (22553512, 7777701888),
    "segformer_b0": (3319392, 904422400),
    "simmim_swin_t": (29875194, 6712492032),
    "swin_b": (87768224, 30861893632),
    "swin_s": (49606258, 17481750528),
    "swin_t": (28288354, 8981133312),
    "swinv2_t": (28347154, 11879380992),
    "transformer_base": (63084544, 34663825408),
    "vit_b16": (86567656, 35127656448),
    "vit_m16_gap": (38861288, 21140316160),
    "vit_s16": (22050664, 9197764608),
    "vit_ti16": (5717416, 2507366400),
    "examples/detector_backbone": (3409760, 7594311680),
    "examples/hybrid_pyramid": (14430740, 4008882176),
    "examples/tiny_lm": (6967296, 8589934592),
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_shipped_specs_keep_their_parameters_and_flops(name):
    report = archspec.check(str(ROOT / "specs" / f"{name}.yaml"))
    assert (report.params, report.flops) == SHIPPED[name]
