"""Mixture-of-experts routing in general (issue 35, "MoE in general"): the mlp primitive's router
options against Hugging Face transformers' MoE blocks at tiny configs, fp32, CPU.

- DeepseekV3MoE: sigmoid scores with the logits in float32, the correction bias
  (e_score_correction_bias, a buffer) used for choosing only, group-limited top-k (n_group,
  topk_group: groups by the sum of their top-2 scores), norm_topk_prob, routed_scaling_factor,
  shared experts (n_shared_experts * moe_intermediate_size);
- GptOssMLP: a router bias, top-k on the logits then a softmax over the k, experts with biases,
  gate and up interleaved in gate_up_proj ([E, C, 2I], `in_out` layout) and the clamped SwiGLU
  ((up + 1) * gate * sigmoid(1.702 gate), both clamped by swiglu_limit);
- MixtralSparseMoeBlock (unchanged: tests/parity/test_mixtral.py holds the whole model);
- Qwen2MoeSparseMoeBlock: a softmax router (norm_topk_prob off and on) and a shared expert of
  its own width whose output is gated by sigmoid(shared_expert_gate(x)) (`shared_gate`).

Each reference is built from its config with random init, seeded noise on every parameter (and
on the correction bias, a buffer), saved as a checkpoint under Hugging Face's full-model names
(`model.layers.0.mlp.*`) and loaded by `archspec.build(spec, weights=FILE)` alone through the
spec's mapping file (the rules a full-model mapping holds for its MoE layers; written below).
Then: parameter counts equal (reference = module = checker), outputs within 1e-5 relative, the
router logits (recording_router_logits) equal the reference's, and the routing is not trivial
(the clamp, the correction bias and the groups each change the output). Then the exports
(torch.export with a dynamic batch, ONNX against onnxruntime, TensorRT's operator coverage) and
the standalone model.py, and the located errors of options that do not go together."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest
import torch

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.backends.onnx import export_onnx
from archspec.compiler.modules.router import Router, recording_router_logits

from tests.conftest import checks_tensorrt_coverage, standalone_copy

pytest.importorskip("transformers")

TOL = 1e-5
DIM, TOKENS = 64, 7
PREFIX = "model.layers.0.mlp."

DEEPSEEK_MAPPING = r"""
name: hf deepseek_v3 moe
doc: DeepseekV3MoE's tensors under model.layers.N.mlp (the MoE layers of DeepseekV3ForCausalLM)
rules:
  - fuse:                       # the shared experts' gate and up projections -> one gated fc1, gate first
      match: '^model\.layers\.(\d+)\.mlp\.shared_experts\.{part}\.weight$'
      parts: [gate_proj, up_proj]
      into: fc1
  - rename:
      '^model\.layers\.(\d+)\.mlp\.gate\.weight$': 'layers.\1.mlp.router.weight'
      '^model\.layers\.(\d+)\.mlp\.gate\.e_score_correction_bias$': 'layers.\1.mlp.router.correction'
      '^model\.layers\.(\d+)\.mlp\.experts\.gate_up_proj$': 'layers.\1.mlp.experts.fc1'
      '^model\.layers\.(\d+)\.mlp\.experts\.down_proj$': 'layers.\1.mlp.experts.fc2'
      '^model\.layers\.(\d+)\.mlp\.shared_experts\.fc1\.': 'layers.\1.mlp.shared.fc1.'
      '^model\.layers\.(\d+)\.mlp\.shared_experts\.down_proj\.': 'layers.\1.mlp.shared.fc2.'
"""

GPT_OSS_MAPPING = r"""
name: hf gpt_oss moe
doc: GptOssMLP's tensors under model.layers.N.mlp (experts_layout in_out, gate_layout interleaved)
rules:
  - rename:
      '^model\.layers\.(\d+)\.mlp\.router\.': 'layers.\1.mlp.router.'
      '^model\.layers\.(\d+)\.mlp\.experts\.gate_up_proj$': 'layers.\1.mlp.experts.fc1'
      '^model\.layers\.(\d+)\.mlp\.experts\.gate_up_proj_bias$': 'layers.\1.mlp.experts.fc1_bias'
      '^model\.layers\.(\d+)\.mlp\.experts\.down_proj$': 'layers.\1.mlp.experts.fc2'
      '^model\.layers\.(\d+)\.mlp\.experts\.down_proj_bias$': 'layers.\1.mlp.experts.fc2_bias'
"""

MIXTRAL_MAPPING = r"""
name: hf mixtral moe
rules:
  - rename:
      '^model\.layers\.(\d+)\.mlp\.gate\.weight$': 'layers.\1.mlp.router.weight'
      '^model\.layers\.(\d+)\.mlp\.experts\.gate_up_proj$': 'layers.\1.mlp.experts.fc1'
      '^model\.layers\.(\d+)\.mlp\.experts\.down_proj$': 'layers.\1.mlp.experts.fc2'
"""


def deepseek(groups=4, top_groups=2, top_k=2, experts=8, normalize=True, scale=2.5, shared=1, hidden=32):
    """(DeepseekV3Config arguments, the spec's mlp options) of one DeepSeek-V3 MoE configuration."""
    config = dict(hidden_size=DIM, moe_intermediate_size=hidden, n_routed_experts=experts, num_experts_per_tok=top_k,
                  n_group=groups, topk_group=top_groups, n_shared_experts=shared, norm_topk_prob=normalize,
                  routed_scaling_factor=scale, hidden_act="silu")
    options = dict(hidden=hidden, experts=experts, top_k=top_k, act="silu", gated=True, bias=False,
                   router_score="sigmoid", router_correction=True, router_normalize=normalize, router_scale=scale,
                   shared_experts=shared)
    if groups > 1:  # one group is no limit: the spec leaves the options out
        options.update(router_groups=groups, router_top_groups=top_groups)
    return "deepseek_v3", config, options


def gpt_oss(experts=4, top_k=2, limit=0.3, hidden=32):
    config = dict(hidden_size=DIM, intermediate_size=hidden, num_local_experts=experts, num_experts_per_tok=top_k,
                  swiglu_limit=limit)
    options = dict(hidden=hidden, experts=experts, top_k=top_k, act="quick_gelu", gated=True, bias=True,
                   router_score="softmax_chosen", router_bias=True, experts_layout="in_out",
                   gate_layout="interleaved", gate_limit=limit, value_offset=1.0)
    return "gpt_oss", config, options


def mixtral(experts=4, top_k=2, hidden=32):
    config = dict(hidden_size=DIM, intermediate_size=hidden, num_local_experts=experts, num_experts_per_tok=top_k)
    options = dict(hidden=hidden, experts=experts, top_k=top_k, act="silu", gated=True, bias=False)
    return "mixtral", config, options


QWEN2_MOE_MAPPING = r"""
name: hf qwen2_moe moe
rules:
  - fuse:                       # the shared expert's gate and up projections -> one gated fc1, gate first
      match: '^model\.layers\.(\d+)\.mlp\.shared_expert\.{part}\.weight$'
      parts: [gate_proj, up_proj]
      into: fc1
  - rename:
      '^model\.layers\.(\d+)\.mlp\.gate\.weight$': 'layers.\1.mlp.router.weight'
      '^model\.layers\.(\d+)\.mlp\.experts\.gate_up_proj$': 'layers.\1.mlp.experts.fc1'
      '^model\.layers\.(\d+)\.mlp\.experts\.down_proj$': 'layers.\1.mlp.experts.fc2'
      '^model\.layers\.(\d+)\.mlp\.shared_expert\.fc1\.': 'layers.\1.mlp.shared.fc1.'
      '^model\.layers\.(\d+)\.mlp\.shared_expert\.down_proj\.': 'layers.\1.mlp.shared.fc2.'
      '^model\.layers\.(\d+)\.mlp\.shared_expert_gate\.': 'layers.\1.mlp.shared.gate.'
"""


def qwen2_moe(normalize=False, hidden=32, shared=3):
    """Qwen2-MoE: its shared expert shared_expert_intermediate_size wide (shared x the experts')."""
    config = dict(hidden_size=DIM, moe_intermediate_size=hidden, shared_expert_intermediate_size=shared * hidden,
                  num_experts=4, num_experts_per_tok=2, norm_topk_prob=normalize)
    options = dict(hidden=hidden, experts=4, top_k=2, act="silu", gated=True, bias=False, router_normalize=normalize,
                   shared_experts=shared, shared_gate=True)
    return "qwen2_moe", config, options


VARIANTS = {
    "deepseek_v3": deepseek(),  # DeepseekV3Config's structure: groups, normalised, scaled, one shared expert
    "deepseek_v3_plain": deepseek(groups=1, top_groups=1, top_k=3, normalize=False, scale=1.0, shared=2),
    "deepseek_v3_8_groups": deepseek(groups=4, top_groups=3, top_k=4, experts=16, scale=1.5),
    "gpt_oss": gpt_oss(),  # swiglu_limit 0.3: the clamp matters at these weights
    "gpt_oss_default_limit": gpt_oss(experts=8, top_k=3, limit=7.0),
    "mixtral": mixtral(),
    "qwen2_moe": qwen2_moe(),
    "qwen2_moe_normalized": qwen2_moe(normalize=True),
}
MAPPINGS = {"deepseek_v3": DEEPSEEK_MAPPING, "gpt_oss": GPT_OSS_MAPPING, "mixtral": MIXTRAL_MAPPING,
            "qwen2_moe": QWEN2_MOE_MAPPING}


def reference(family: str, config: dict, seed: int = 0) -> torch.nn.Module:
    """The Hugging Face MoE block: normal(0, 0.02) init, then seeded noise on every parameter and
    on the correction bias (a buffer: zeros in a fresh model, trained values in a checkpoint)."""
    if family == "deepseek_v3":
        from transformers import DeepseekV3Config
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE as Block
        cfg = DeepseekV3Config(**config)
    elif family == "gpt_oss":
        from transformers import GptOssConfig
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP as Block
        cfg = GptOssConfig(**config)
    elif family == "qwen2_moe":
        from transformers import Qwen2MoeConfig
        from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock as Block
        cfg = Qwen2MoeConfig(**config)
    else:
        from transformers import MixtralConfig
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock as Block
        cfg = MixtralConfig(**config)
    generator = torch.Generator().manual_seed(seed)
    block = Block(cfg).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(0.02 * torch.randn(p.shape, generator=generator) + 0.05 * torch.randn(p.shape, generator=generator))
        for name, b in block.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=generator))
    return block


def spec_text(options: dict, family: str) -> str:
    """One MoE sub-layer alone (norm: none, residual: false: the block's own output) at the path a
    full model has, layers.0.mlp."""
    mlp = ", ".join(f"{k}: {v if not isinstance(v, bool) else str(v).lower()}" for k, v in options.items())
    return textwrap.dedent(f"""\
        archspec: 1
        name: moe_{family}
        inputs:
          x: [B, {TOKENS}, {DIM}]
        graph:
          - id: layers
            repeat: 1
            graph:
              - {{id: mlp, mlp: {{{mlp}, norm: none, residual: false}}}}
        mappings: [moe_{family}.yaml]
        """)


def ref_out(block, x):
    out = block(x)
    return out[0] if isinstance(out, tuple) else out  # GptOssMLP returns (hidden_states, router_scores)


def ref_logits(family, block, x):
    """The reference's router logits [T, E]."""
    router = block.router if family == "gpt_oss" else block.gate
    return router(x.reshape(-1, DIM))[0]


def relative(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max())


class Pair:
    def __init__(self, name, folder):
        self.family, self.config, self.options = VARIANTS[name]
        self.ref = reference(self.family, self.config)
        self.path = folder / f"moe_{self.family}_{name}.yaml"
        self.path.write_text(spec_text(self.options, self.family))
        (folder / f"moe_{self.family}.yaml").write_text(MAPPINGS[self.family])
        checkpoint = folder / f"{name}.pt"
        torch.save({PREFIX + k: v for k, v in self.ref.state_dict().items()}, checkpoint)
        self.report = archspec.check(str(self.path))
        self.ours = archspec.build(str(self.path), weights=str(checkpoint)).eval()

    def inputs(self, batch=3, seed=1):
        return (torch.randn(batch, TOKENS, DIM, generator=torch.Generator().manual_seed(seed)),)


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request, tmp_path_factory) -> Pair:
    return Pair(request.param, tmp_path_factory.mktemp(request.param))


def test_parameter_counts_are_the_references(pair):
    ref = sum(p.numel() for p in pair.ref.parameters())
    ours = sum(p.numel() for p in pair.ours.parameters())
    assert ref == ours == pair.report.params
    assert {row.path: row.params for row in pair.report.nodes}["layers.0.mlp"] == ref


def test_outputs_match_the_reference(pair):
    (x,) = pair.inputs()
    with torch.no_grad():
        want, got = ref_out(pair.ref, x), pair.ours(x)
    error = relative(got, want)
    print(f"{pair.family} {pair.options}: max relative deviation {error:.2e}")
    assert got.shape == want.shape and error <= TOL


def test_router_logits_are_recorded(pair):
    """recording_router_logits gives each router's logits by module path: the reference's."""
    (x,) = pair.inputs()
    with torch.no_grad(), recording_router_logits(pair.ours) as logits:
        pair.ours(x)
        want = ref_logits(pair.family, pair.ref, x)
    assert list(logits) == ["layers.0.mlp.router"]
    experts = next(pair.config[k] for k in ("n_routed_experts", "num_local_experts", "num_experts") if k in pair.config)
    assert logits["layers.0.mlp.router"].shape == (3 * TOKENS, experts)
    assert relative(logits["layers.0.mlp.router"], want) <= TOL
    with torch.no_grad():
        pair.ours(x)
    assert len(logits) == 1  # the hooks are gone after the block


def test_hugging_faces_load_balancing_loss_reads_them():
    """The recorded logits are what Hugging Face's auxiliary loss takes (Mixtral's switch loss)."""
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    model = archspec.build_text(spec_text(VARIANTS["mixtral"][2], "mixtral").replace("mappings: [moe_mixtral.yaml]\n",
                                                                                     ""))
    x = torch.randn(2, TOKENS, DIM)
    with recording_router_logits(model) as logits:
        out = model(x)
    aux = load_balancing_loss_func(tuple(logits.values()), num_experts=4, top_k=2)
    assert aux.requires_grad and torch.isfinite(aux)
    (out.square().mean() + 0.01 * aux).backward()
    assert model.layers[0].mlp.router.weight.grad is not None


def test_the_correction_bias_is_a_buffer_that_loads_and_does_not_train():
    family, config, options = VARIANTS["deepseek_v3"]
    model = archspec.build_text(spec_text(options, family).replace(f"mappings: [moe_{family}.yaml]\n", ""))
    router = model.layers[0].mlp.router
    assert "correction" in dict(router.named_buffers()) and "correction" not in dict(router.named_parameters())
    assert "layers.0.mlp.router.correction" in model.state_dict()
    assert torch.equal(router.correction, torch.zeros(8))  # as Hugging Face initialises it
    model.train()
    model(torch.randn(2, TOKENS, DIM)).square().sum().backward()
    assert router.weight.grad is not None and router.correction.grad is None


@pytest.mark.parametrize("name, what, change", [
    ("gpt_oss", "the clamp", lambda ref: setattr(ref.experts, "limit", 1e9)),
    ("deepseek_v3", "the correction bias", lambda ref: ref.gate.e_score_correction_bias.zero_()),
    ("deepseek_v3", "the groups", lambda ref: setattr(ref.gate, "topk_group", ref.gate.num_group)),
    ("deepseek_v3", "the scale", lambda ref: setattr(ref.gate, "routed_scaling_factor", 1.0)),
    ("deepseek_v3", "normalising", lambda ref: setattr(ref.gate, "norm_topk_prob", False)),
    ("qwen2_moe", "the shared expert's gate", lambda ref: ref.shared_expert_gate.weight.fill_(100.0)),
])
def test_each_option_matters_at_these_weights(name, what, change):
    """Switching the option off in the reference changes its output well beyond the tolerance, so
    the comparisons above see each option."""
    family, config, _ = VARIANTS[name]
    ref = reference(family, config)
    x = torch.randn(3, TOKENS, DIM, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = ref_out(ref, x)
        change(ref)
        after = ref_out(ref, x)
    assert relative(after, before) > 100 * TOL, what


def test_exports_with_a_dynamic_batch(pair):
    program = export_program(pair.ours, pair.report.graph)
    for batch in (1, 5):  # not the batch it was traced with
        args = pair.inputs(batch, seed=batch)
        with torch.no_grad():
            assert relative(program.module()(*args), ref_out(pair.ref, *args)) <= TOL


def test_onnx_matches_onnxruntime(pair, tmp_path):
    pytest.importorskip("onnxruntime")
    result = export_onnx(pair.ours, pair.report.graph, str(tmp_path / "moe.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
@pytest.mark.parametrize("name", ["deepseek_v3", "gpt_oss"])
def test_tensorrt_converts_every_op(name, tmp_path, capsys):
    family, _, options = VARIANTS[name]
    text = spec_text(options, family).replace(f"mappings: [moe_{family}.yaml]\n", "")
    checks_tensorrt_coverage(text, tmp_path, capsys, batch="1:4:16")


def test_the_standalone_model_py_gives_the_same(pair, tmp_path):
    again = standalone_copy(pair.ours, pair.report.name, pair.report.file, tmp_path)
    again.load_state_dict(pair.ours.state_dict())
    args = pair.inputs()
    with torch.no_grad():
        assert torch.equal(again(*args), pair.ours(*args))


def test_the_router_is_one_module_with_the_logits_as_its_output():
    model = archspec.build_text(spec_text(VARIANTS["gpt_oss"][2], "gpt_oss").replace("mappings: [moe_gpt_oss.yaml]\n",
                                                                                    ""))
    router = model.layers[0].mlp.router
    assert isinstance(router, Router) and router.weight.shape == (4, DIM) and router.bias.shape == (4,)
    experts = model.layers[0].mlp.experts
    assert experts.fc1.shape == (4, DIM, 64) and experts.fc2.shape == (4, 32, DIM)  # GPT-OSS's layout
    assert experts.fc1_bias.shape == (4, 64) and experts.fc2_bias.shape == (4, DIM)


def test_a_dense_gated_mlp_takes_the_gate_options_too():
    """gate_layout, gate_limit and value_offset on an MLP without experts: GPT-OSS's expert formula."""
    text = textwrap.dedent(f"""\
        name: dense_glu
        inputs:
          x: [B, {TOKENS}, {DIM}]
        graph:
          - mlp: {{hidden: 16, act: quick_gelu, gated: true, gate_layout: interleaved, gate_limit: 0.5,
                   value_offset: 1.0, norm: none, residual: false}}
        """)
    model = archspec.build_text(text).eval()
    mlp = model.mlp
    x = torch.randn(2, TOKENS, DIM)
    h = x @ mlp.fc1.weight.T + mlp.fc1.bias
    gate, up = h[..., ::2].clamp(max=0.5), h[..., 1::2].clamp(-0.5, 0.5)
    want = ((up + 1) * (gate * torch.sigmoid(gate * 1.702))) @ mlp.fc2.weight.T + mlp.fc2.bias
    with torch.no_grad():
        assert relative(model(x), want) <= TOL


@pytest.mark.parametrize("option", ["gate_layout: halves", "gate_layout: value_first", "value_offset: 0.0"])
def test_a_gate_option_without_a_gate_is_an_error_even_at_its_default(option):
    """The GLM-4 trial: `gate_layout: halves` on an MLP without `gated` passed (it is the default),
    `value_first` did not; an option that would do nothing is an error either way."""
    text = f"name: plain\ninputs:\n  x: [B, {TOKENS}, {DIM}]\ngraph:\n  - mlp: {{hidden: 16, {option}}}\n"
    with pytest.raises(archspec.SpecError, match=f"{option.split(':')[0]} goes with gated: true"):
        archspec.check_text(text)


def test_value_first_is_moonshines_gated_mlp():
    """gate_layout: value_first (Moonshine: `hidden, gate = fc1(x).chunk(2)`, act(gate) * hidden),
    against Hugging Face's MoonshineDecoderMLP with the same weights; halves gives other outputs."""
    moonshine = pytest.importorskip("transformers.models.moonshine.modeling_moonshine")
    from transformers import MoonshineConfig

    config = MoonshineConfig(hidden_size=DIM, intermediate_size=16, decoder_hidden_act="silu")
    torch.manual_seed(0)
    ref = moonshine.MoonshineDecoderMLP(config, "silu").eval()
    text = textwrap.dedent(f"""\
        name: value_first
        inputs:
          x: [B, {TOKENS}, {DIM}]
        graph:
          - mlp: {{hidden: 16, act: silu, gated: true, gate_layout: LAYOUT, norm: none, residual: false}}
        """)
    x = torch.randn(2, TOKENS, DIM)
    state = {"mlp.fc1.weight": ref.fc1.weight, "mlp.fc1.bias": ref.fc1.bias, "mlp.fc2.weight": ref.fc2.weight,
             "mlp.fc2.bias": ref.fc2.bias}
    with torch.no_grad():
        want = ref(x)
        ours = archspec.build_text(text.replace("LAYOUT", "value_first"), weights=state).eval()
        assert relative(ours(x), want) <= TOL
        other = archspec.build_text(text.replace("LAYOUT", "halves"), weights=state).eval()
        assert relative(other(x), want) > 0.1


def test_flops_count_the_router_and_the_shared_experts():
    report = archspec.check_text(spec_text(VARIANTS["deepseek_v3"][2], "deepseek_v3").replace(
        "mappings: [moe_deepseek_v3.yaml]\n", ""))
    n, c, h, e = TOKENS, DIM, 32, 8
    expert = 2 * n * c * 2 * h + 2 * n * h * c
    assert report.flops == e * expert + 2 * n * c * e + expert  # the experts (dense), the router, one shared


@pytest.mark.parametrize("options, message", [
    ("hidden: 8, router_score: sigmoid", "router_score goes with experts"),
    ("hidden: 8, shared_experts: 1", "shared_experts goes with experts"),
    ("hidden: 8, shared_gate: true", "shared_gate goes with experts"),
    ("hidden: 8, experts: 4, top_k: 2, shared_gate: true", "shared_gate gates the shared experts' output; this "
                                                          "mixture has no shared experts"),
    ("hidden: 8, experts: 4, top_k: 2, gate_limit: 1.0", "gate_limit goes with gated: true"),
    ("hidden: 8, gate_layout: interleaved", "gate_layout goes with gated: true"),
    ("hidden: 8, experts: 8, top_k: 2, router_groups: 3, router_top_groups: 1", "do not split into 3 equal groups"),
    ("hidden: 8, experts: 8, top_k: 2, router_groups: 8, router_top_groups: 1", "at least 2 experts"),
    ("hidden: 8, experts: 8, top_k: 2, router_groups: 4", "needs router_top_groups"),
    ("hidden: 8, experts: 8, top_k: 2, router_top_groups: 2", "router_top_groups goes with router_groups"),
    ("hidden: 8, experts: 8, top_k: 2, router_groups: 4, router_top_groups: 5", "more than the 4 groups"),
    ("hidden: 8, experts: 8, top_k: 5, router_groups: 4, router_top_groups: 2", "more than the 4 experts"),
    ("hidden: 8, experts: 4, top_k: 2, router_score: relu", "router_score"),
    ("hidden: 8, experts: 4, top_k: 2, router_scale: 0", "router_scale"),
    ("hidden: 8, experts: 4, top_k: 2, gated: true, gate_limit: -1", "gate_limit"),
    ("hidden: 8, experts: 4, top_k: 2, router_score: softmax_chosen, router_normalize: true",
     "router_normalize does nothing with router_score: softmax_chosen"),
])
def test_options_that_do_not_go_together_are_located_errors(options, message):
    text = f"name: bad\ninputs:\n  x: [B, 6, 16]\ngraph:\n  - mlp: {{{options}}}\n"
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    diagnostic = info.value.diagnostics[0]
    assert message in diagnostic.message, diagnostic.message
    assert diagnostic.loc is not None


def test_group_limited_greedy_scores_each_group_by_its_largest_as_deepseek_v2():
    """The DeepSeek-V2 trial: V2's topk_method group_limited_greedy scores a group by its largest
    score, the options scored it by its top 2 summed (V3's rule): 9.3 off in logits at full size,
    without a word. `router_group_score: max` is V2's router: the same experts and weights as
    Hugging Face's DeepseekV2TopkRouter on 512 tokens, where the V3 rule picks others."""
    from transformers import DeepseekV2Config
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2TopkRouter

    from archspec.compiler.modules.router import Router

    config = DeepseekV2Config(hidden_size=DIM, n_routed_experts=16, num_experts_per_tok=3, n_group=4, topk_group=2,
                              topk_method="group_limited_greedy", routed_scaling_factor=16.0)
    torch.manual_seed(0)
    ref = DeepseekV2TopkRouter(config)
    torch.nn.init.normal_(ref.weight, std=0.5)
    x = torch.randn(512, DIM, generator=torch.Generator().manual_seed(1))
    _, top, chosen = ref(x)
    want = torch.zeros(512, 16).scatter(-1, chosen, top)
    got = {}
    for rule in ("max", "top2_sum"):
        ours = Router(DIM, 16, 3, score="softmax", groups=4, top_groups=2, normalize=False, scale=16.0,
                      group_score=rule)
        with torch.no_grad():
            ours.weight.copy_(ref.weight)
            got[rule] = ours.weights(ours(x))
    assert torch.allclose(got["max"], want, atol=1e-5)
    assert not torch.equal(got["top2_sum"] != 0, want != 0)  # the V3 rule keeps other groups on some tokens
    with pytest.raises(archspec.SpecError, match="router_group_score goes with router_groups"):
        archspec.check_text(f"name: m\ninputs:\n  x: [B, 4, {DIM}]\ngraph:\n  - mlp: {{hidden: 8, experts: 8, top_k: 2, "
                            "router_group_score: max}\n")
