"""attention kind=class (CaiT's class attention): queries from the class tokens, keys and values
from all tokens, out the class tokens. Checked against timm's ClassAttn and
LayerScaleBlockClassAttn (every parameter perturbed, loaded by name), its shape rule and located
errors, and its cost against the module's parameters and FlopCounterMode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.core.errors import SpecError

from tests.parity.test_vocabulary import TOL, close, count_flops, perturb_everything

cait = pytest.importorskip("timm.models.cait")

DIM, HEADS, PATCHES = 32, 4, 9


def spec(attention: str, prefix: int = 1, mlp: bool = False, extra: str = "", reads: str = "cls") -> str:
    """x [B, 9, 32] (a 3x3 grid), `prefix` learned class tokens in front, the class attention node
    (and an MLP after it, as CaiT's block)."""
    text = (f"name: t\ninputs:\n  x: {{shape: [B, {PATCHES}, {DIM}], grid: [3, 3]}}\ngraph:\n"
            f"  - {{id: cls, from: x, tokens: {{count: {prefix}}}}}\n{extra}"
            f"  - {{id: attn, from: {reads}, attention: {attention}}}\n")
    return text + "  - {id: mlp, mlp: {ratio: 4, layer_scale: 1.0e-5}}\n" if mlp else text


BARE = f"{{kind: class, heads: {HEADS}, norm: none, residual: false}}"
BLOCK = f"{{kind: class, heads: {HEADS}, layer_scale: 1.0e-5}}"


def timm_names(state: dict, prefix: str = "") -> dict:
    """timm's ClassAttn names (q, k, v, proj) -> ours (q, kv [k; v], proj), under `prefix`."""
    ours = {f"{prefix}{k}": v for k, v in state.items() if not k.startswith(("k.", "v."))}
    for part in ("weight", "bias"):
        ours[f"{prefix}kv.{part}"] = torch.cat((state[f"k.{part}"], state[f"v.{part}"]))  # rows [k; v]
    return ours


def class_tokens(model, batch: int) -> torch.Tensor:
    return model.cls.tokens.expand(batch, -1, -1)  # [1, prefix, C] -> [B, prefix, C]


# -- against timm ----------------------------------------------------------------------------------

def test_the_bare_kind_equals_timm_class_attn():
    ref = perturb_everything(cait.ClassAttn(DIM, HEADS, qkv_bias=True)).eval()
    model = perturb_everything(archspec.build_text(spec(BARE)), seed=1).eval()
    model.attn.load_state_dict(timm_names(ref.state_dict()), strict=True)
    x = torch.randn(3, PATCHES, DIM)
    with torch.no_grad():
        u = torch.cat((class_tokens(model, 3), x), dim=1)  # [B, 1 + N, C]
        ours, theirs = model(x), ref(u)
    assert ours.shape == theirs.shape == (3, 1, DIM)
    assert close(theirs, ours) < TOL


def test_the_sublayer_equals_timm_layer_scale_block_class_attn():
    """norm1, the attention, gamma_1 and the residual of the class token; then norm2, the MLP and
    gamma_2: timm's whole class-attention block."""
    ref = perturb_everything(cait.LayerScaleBlockClassAttn(DIM, HEADS, qkv_bias=True, init_values=1e-5)).eval()
    model = perturb_everything(archspec.build_text(spec(BLOCK, mlp=True)), seed=1).eval()
    state = ref.state_dict()
    attn = {k[len("attn."):]: v for k, v in state.items() if k.startswith("attn.")}
    ours = timm_names(attn, "attn.")
    ours.update({"attn.norm.weight": state["norm1.weight"], "attn.norm.bias": state["norm1.bias"],
                 "attn.layer_scale.gamma": state["gamma_1"], "mlp.layer_scale.gamma": state["gamma_2"],
                 "mlp.norm.weight": state["norm2.weight"], "mlp.norm.bias": state["norm2.bias"]})
    ours.update({f"mlp.{k[len('mlp.'):]}": v for k, v in state.items() if k.startswith("mlp.")})
    ours["cls.tokens"] = model.cls.tokens.detach().clone()
    model.load_state_dict(ours, strict=True)
    x = torch.randn(2, PATCHES, DIM)
    with torch.no_grad():
        theirs = ref(x, class_tokens(model, 2))
        assert close(theirs, model(x)) < TOL
        model.attn.layer_scale.gamma.mul_(2)  # the check can fail: a changed gamma_1 changes the output
        assert close(theirs, model(x)) > 100 * TOL


def test_each_of_two_class_tokens_attends_as_timm_would_alone():
    """With two class tokens, each is a query over every token: token 1's output is timm's
    ClassAttn with token 1 in front (the keys' order does not matter to attention)."""
    ref = perturb_everything(cait.ClassAttn(DIM, HEADS, qkv_bias=True)).eval()
    model = archspec.build_text(spec(BARE, prefix=2)).eval()
    model.attn.load_state_dict(timm_names(ref.state_dict()), strict=True)
    with torch.no_grad():
        model.cls.tokens.normal_()
        x = torch.randn(2, PATCHES, DIM)
        cls = class_tokens(model, 2)
        ours = model(x)  # [B, 2, C]
        first = ref(torch.cat((cls, x), dim=1))
        second = ref(torch.cat((cls[:, 1:], cls[:, :1], x), dim=1))
    assert ours.shape == (2, 2, DIM)
    assert close(first[:, 0], ours[:, 0]) < TOL and close(second[:, 0], ours[:, 1]) < TOL


# -- the shape rule and its errors --------------------------------------------------------------

def test_out_is_the_class_tokens_and_concat_puts_them_back_in_front_of_the_grid():
    text = spec(BLOCK, prefix=2) + ("  - {id: patches, from: x, slice: {}}\n"
                                    "  - {id: joined, from: [attn, patches], concat: {}}\n")
    report = archspec.check_text(text)
    types = {n.name: n.type for n in report.graph.nodes()}
    attn, joined = types["attn"], types["joined"]
    assert attn.shape[1:] == (2, DIM) and attn.prefix == 2 and attn.grid is None
    assert joined.shape[1:] == (2 + PATCHES, DIM) and joined.grid == (3, 3) and joined.prefix == 2


def located(text: str) -> str:
    with pytest.raises(SpecError) as e:
        archspec.check_text(text)
    (d,) = e.value.diagnostics
    assert d.path == "attn" and d.loc is not None and d.loc.line > 0 and d.hint
    return d.message


def test_tokens_without_class_tokens_are_a_located_error():
    message = located(spec(BARE, reads="x"))
    assert "class attention takes its queries from the class tokens" in message and "none" in message


def test_rotary_embeddings_are_refused():
    message = located(spec(f"{{kind: class, heads: {HEADS}, rope_theta: 10000.0}}"))
    assert "rotary embeddings" in message


@pytest.mark.parametrize("shape, ok", [([HEADS, 1, 1 + PATCHES], True), ([HEADS, 1 + PATCHES, 1 + PATCHES], False)])
def test_a_score_bias_has_one_row_per_class_token(shape, ok):
    text = spec(f"{{kind: class, heads: {HEADS}, bias: true}}", reads="[cls, table]",
                extra=f"  - {{id: table, param: {{shape: {shape}}}}}\n")
    if ok:
        archspec.check_text(text)
    else:
        with pytest.raises(SpecError, match="does not fit scores"):
            archspec.check_text(text)


def test_a_score_bias_is_added_to_the_class_tokens_scores():
    text = spec(f"{{kind: class, heads: {HEADS}, bias: true, norm: none, residual: false}}", reads="[cls, table]",
                extra=f"  - {{id: table, param: {{shape: [{HEADS}, 1, {1 + PATCHES}]}}}}\n")
    model = perturb_everything(archspec.build_text(text)).eval()
    attn, x = model.attn, torch.randn(2, PATCHES, DIM)
    with torch.no_grad():
        u = torch.cat((class_tokens(model, 2), x), dim=1)  # [B, 1 + N, C]
        q = F.linear(u[:, :1], attn.q.weight, attn.q.bias).reshape(2, 1, HEADS, -1).transpose(1, 2)
        k, v = (t.reshape(2, 1 + PATCHES, HEADS, -1).transpose(1, 2)
                for t in F.linear(u, attn.kv.weight, attn.kv.bias).chunk(2, dim=-1))
        scores = q @ k.transpose(-2, -1) * (DIM // HEADS) ** -0.5 + model.table.value  # [B, h, 1, 1 + N]
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 1, DIM)
        assert close(F.linear(out, attn.proj.weight, attn.proj.bias), model(x)) < TOL


# -- cost ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("attention", [BLOCK, f"{{kind: class, heads: {HEADS}, scores: [talking_heads]}}",
                                       f"{{kind: class, heads: {HEADS}, head_dim: 16, kv_heads: 2}}"],
                         ids=["block", "talking_heads", "head_dim_gqa"])
def test_params_and_flops_match_the_module_and_flop_counter(attention):
    text = spec(attention, prefix=2, mlp=True)
    report, model = archspec.check_text(text), archspec.build_text(text).eval()
    assert report.params == sum(p.numel() for p in model.parameters())
    assert report.flops == count_flops(lambda: model(torch.randn(1, PATCHES, DIM)))


def test_flops_match_timm_block_under_flop_counter():
    ref = cait.LayerScaleBlockClassAttn(DIM, HEADS, qkv_bias=True).eval().requires_grad_(False)
    report = archspec.check_text(spec(BLOCK, mlp=True))
    assert report.flops == count_flops(lambda: ref(torch.randn(1, PATCHES, DIM), torch.randn(1, 1, DIM)))
    assert report.params == sum(p.numel() for p in ref.parameters()) + DIM  # + the class token


# -- a learned query: cross attention whose queries are a param (SigLIP's attention pool) --------------

MAP_HEAD = """
name: map
inputs:
  x: [B, 16, 32]
graph:
  - {id: probe, param: {shape: [1, 32]}}                 # timm AttentionPoolLatent's latent [1, 1, C]
  - {id: pool, from: [probe, x], attention: {kind: cross, heads: 4, norm: none, residual: false}}
  - {id: mlp, mlp: {ratio: 4, norm_eps: 1.0e-5}}          # x + mlp(norm(x))
  - {id: out, select: {index: 0}}                        # pool_type 'token'
"""


def test_a_param_asks_every_samples_memory_as_timms_attention_pool():
    from timm.layers import AttentionPoolLatent

    ref = perturb_everything(AttentionPoolLatent(32, num_heads=4, mlp_ratio=4.0, norm_layer=torch.nn.LayerNorm)).eval()
    report = archspec.check_text(MAP_HEAD)
    assert [str(report.graph.node(n).type.shape[0]) for n in ("probe", "pool")] == ["1", "B"]
    ours = archspec.build_text(MAP_HEAD).eval()
    renamed = {"latent": "probe.value", "norm.weight": "mlp.norm.weight", "norm.bias": "mlp.norm.bias"}
    state = {renamed.get(k, k if k.startswith("mlp.") else f"pool.{k}"): v for k, v in ref.state_dict().items()}
    ours.load_state_dict(state)
    x = torch.randn(3, 16, 32)
    with torch.no_grad():
        assert close(ours(x), ref(x)) < TOL
        assert close(ours(x[:1]), ref(x[:1])) < TOL
    assert report.params == sum(p.numel() for p in ref.parameters())
