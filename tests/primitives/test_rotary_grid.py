"""The `rotary_grid` score part (2-D axial rotary positions over a token grid, prefix tokens left
unrotated), against timm code we did not write: its sin | cos table against timm's
`RotaryEmbeddingCat.get_embed()`, one attention layer against timm's `AttentionRope` and
`EvaAttention` fed that table, and two whole tiny timm `Eva` models: RoPE-ViT's configuration
(`vit_small_patch16_rope_224`: rope_grid_indexing xy, rope_temperature 100, a class token, no
absolute positions, LayerScale) and timm SBB's (`vit_base_patch16_rope_reg1_gap_256`: a register
token, q/v biases, ref_feat_shape, average pooling with fc_norm). Also: it stays one fused SDPA,
exports with a dynamic batch, costs 0 parameters, no FLOPs (FlopCounterMode) and its table as
buffer bytes, and every misuse is an error located at `scores` with a hint."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.modules.attention.scores.rotary_grid import RotaryGrid
from archspec.core.errors import SpecError

from tests.conftest import standalone_copy

eva = pytest.importorskip("timm.models.eva")
attention_layers = pytest.importorskip("timm.layers.attention")
sincos = pytest.importorskip("timm.layers.pos_embed_sincos")

DIM, HEADS = 64, 4  # head width 16: 4 frequencies per axis
HEAD = DIM // HEADS
GRID = (3, 4)  # not square: rows and columns cannot be confused


def timm_table(grid, dim=HEAD, theta=10000.0, half=False, indexing="ij", ref=None):
    """timm's RotaryEmbeddingCat as Eva builds it (in_pixels=False): [H*W, 2*dim], sin | cos."""
    rope = sincos.RotaryEmbeddingCat(dim, temperature=theta, in_pixels=False, feat_shape=list(grid),
                                     ref_feat_shape=list(ref) if ref else None, grid_indexing=indexing,
                                     rotate_half=half)
    return rope.get_embed()


def perturbed(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Noise on every parameter (timm starts q/v biases at zeros, LayerScale at 1e-5)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return module.eval()


def counted(model, *args) -> int:
    """FlopCounterMode's count, with SDPA as its math kernel (matmuls it counts on CPU)."""
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(*args)
    return counter.get_total_flops()


# -- the table == timm's ------------------------------------------------------------------------

@pytest.mark.parametrize("theta, half, indexing, ref", [
    (10000.0, False, "ij", None), (100.0, False, "xy", None), (10000.0, True, "ij", None),
    (100.0, True, "xy", None), (10000.0, False, "ij", (16, 16)), (10000.0, False, "xy", (6, 10)),
], ids=["eva", "rope-vit", "half", "half-xy", "ref-grid", "ref-grid-xy"])
def test_the_table_equals_timms_rotary_embedding_cat(theta, half, indexing, ref):
    ours = RotaryGrid(GRID, HEAD, theta=theta, interleaved=not half, indexing=indexing, ref_grid=ref)
    assert ours.pos_embed.shape == (GRID[0] * GRID[1], 2 * HEAD)
    assert torch.equal(ours.pos_embed, timm_table(GRID, theta=theta, half=half, indexing=indexing, ref=ref))


def test_the_axes_and_the_layout_matter():
    """Each option changes the table (a test that could not tell them apart would pass anything)."""
    tables = [RotaryGrid(GRID, HEAD, theta=t, interleaved=i, indexing=x).pos_embed
              for t, i, x in [(10000.0, True, "ij"), (10000.0, True, "xy"), (10000.0, False, "ij"), (100.0, True, "ij")]]
    for a in range(len(tables)):
        for b in range(a + 1, len(tables)):
            assert not torch.allclose(tables[a], tables[b])


# -- one attention layer == timm's, fed timm's table ----------------------------------------------

def spec(attention: str, prefix: int = 1, grid=GRID) -> str:
    """One attention node over tokens on a grid, after `prefix` learned tokens."""
    h, w = grid
    tokens = f"  - {{id: cls, from: x, tokens: {{count: {prefix}}}}}\n" if prefix else ""
    return (f"name: t\ninputs:\n  x: {{shape: [B, {h * w}, {DIM}], grid: [{h}, {w}]}}\ngraph:\n{tokens}"
            f"  - {{id: attn, attention: {attention}}}\noutputs: [attn]\n")


def attention(part: str | None, qkv_bias: str = "true") -> str:
    scores = f", scores: [{part}]" if part else ""
    return f"{{kind: global, heads: {HEADS}, qkv_bias: {qkv_bias}, norm: none, residual: false{scores}}}"


def run_both(ref, rope, text, prefix):
    """Our node with timm's weights (and our prefix tokens fed to timm) -> (ours, timm's)."""
    model = perturbed(archspec.build_text(text), seed=1)
    state = {"attn." + k: v for k, v in ref.state_dict().items() if k != "k_bias"}
    if prefix:
        state["cls.tokens"] = model.cls.tokens.detach()
    model.load_state_dict(state, strict=True)
    x = torch.randn(2, GRID[0] * GRID[1], DIM)
    with torch.no_grad():
        front = model.cls.tokens.expand(2, -1, -1) if prefix else x[:, :0]
        return model(x), ref(torch.cat((front, x), dim=1), rope=rope)


@pytest.mark.parametrize("fused", [True, False], ids=["timm-fused", "timm-explicit"])
@pytest.mark.parametrize("theta, half, indexing, prefix", [
    (100.0, False, "xy", 1), (10000.0, False, "ij", 1), (10000.0, True, "ij", 2), (100.0, True, "xy", 0),
], ids=["rope-vit", "eva", "half-two-prefix", "half-xy-no-prefix"])
def test_attention_with_the_part_equals_timms_attention_rope(theta, half, indexing, prefix, fused):
    ref = perturbed(attention_layers.AttentionRope(DIM, HEADS, qkv_bias=True, num_prefix_tokens=prefix,
                                                   rotate_half=half))
    ref.fused_attn = fused
    part = f"{{rotary_grid: {{theta: {theta}, interleaved: {str(not half).lower()}, indexing: {indexing}}}}}"
    ours, expected = run_both(ref, timm_table(GRID, theta=theta, half=half, indexing=indexing),
                              spec(attention(part), prefix), prefix)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=0), (ours - expected).abs().max()


def test_attention_with_q_v_biases_and_a_reference_grid_equals_timms_eva_attention():
    ref = perturbed(eva.EvaAttention(DIM, HEADS, qkv_bias=True, num_prefix_tokens=1, scale_norm=False))
    part = "{rotary_grid: {ref_grid: [16, 16]}}"
    ours, expected = run_both(ref, timm_table(GRID, ref=(16, 16)), spec(attention(part, "qv")), 1)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=0), (ours - expected).abs().max()


def test_partial_dims_rotate_only_the_first_dims_as_timm_would_over_them():
    """`dims: 8` of 16: timm's apply_rot_embed_cat with an 8-wide table on q[..., :8] and k[..., :8]."""
    rope = timm_table(GRID, dim=8)
    q, k = torch.randn(2, HEADS, 1 + GRID[0] * GRID[1], HEAD), torch.randn(2, HEADS, 1 + GRID[0] * GRID[1], HEAD)
    turned_q, turned_k = RotaryGrid(GRID, 8, prefix=1).rotate(q, k)
    for ours, x in ((turned_q, q), (turned_k, k)):
        want = torch.cat((x[:, :, 1:, :8].clone(), x[:, :, 1:, 8:]), dim=-1)
        want[..., :8] = sincos.apply_rot_embed_cat(x[:, :, 1:, :8], rope)
        assert torch.equal(ours[:, :, :1], x[:, :, :1])  # the class token is not rotated
        assert torch.allclose(ours[:, :, 1:], want, atol=1e-6, rtol=0)


# -- whole tiny timm Eva models == the spec, weights mapped by hand -------------------------------

ROPE_VIT = dict(attn_type="rope", qkv_bias=True, init_values=1e-5, class_token=True, global_pool="token",
                use_abs_pos_emb=False, use_rot_pos_emb=True, rope_grid_indexing="xy", rope_temperature=100.0)
SBB = dict(qkv_fused=True, qkv_bias=True, init_values=1e-5, class_token=False, num_reg_tokens=1,
           use_rot_pos_emb=True, use_abs_pos_emb=False, ref_feat_shape=(16, 16))

MODEL = """name: tiny_rope_vit
inputs:
  image: [B, 3, 48, 64]
graph:
  - {{id: patch_embed, patchify: {{patch: 16, dim: {dim}, cls_token: true, pos: none}}}}
  - id: blocks
    repeat: 2
    graph:
      - id: attn
        attention: {{kind: global, heads: {heads}, qkv_bias: {qkv_bias}, norm_eps: 1.0e-6, layer_scale: 1.0e-5,
                    scores: [{{rotary_grid: {part}}}]}}
      - id: mlp
        mlp: {{ratio: 4, norm_eps: 1.0e-6, layer_scale: 1.0e-5}}
{tail}outputs: [head]
"""
ROPE_VIT_SPEC = MODEL.format(dim=DIM, heads=HEADS, qkv_bias="true", part="{theta: 100.0, indexing: xy}",
                             tail="  - {id: norm, norm: {eps: 1.0e-6}}\n"
                                  "  - {id: head, head: {kind: classify, pool: cls, classes: 10}}\n")
SBB_SPEC = MODEL.format(dim=DIM, heads=HEADS, qkv_bias="qv", part="{ref_grid: [16, 16]}",
                        tail="  - {id: head, head: {kind: classify, pool: mean, norm: true, norm_eps: 1.0e-6, "
                             "classes: 10}}\n")


def eva_to_ours(state: dict) -> dict:
    """timm Eva names -> the spec's, by hand."""
    renames = [("cls_token", "patch_embed.cls_token"), ("reg_token", "patch_embed.cls_token"),
               (".norm1.", ".attn.norm."), (".norm2.", ".mlp.norm."), (".gamma_1", ".attn.layer_scale.gamma"),
               (".gamma_2", ".mlp.layer_scale.gamma"), ("fc_norm.", "head.norm."), ("head.", "head.fc.")]
    out = {}
    for k, v in state.items():
        if k.endswith("k_bias"):
            continue
        for old, new in renames:
            if k.startswith(old) or (old.startswith(".") and old in k):
                k = new + k[len(old):] if k.startswith(old) else k.replace(old, new)
                break
        out[k] = v
    return out


@pytest.mark.parametrize("config, text", [(ROPE_VIT, ROPE_VIT_SPEC), (SBB, SBB_SPEC)], ids=["rope-vit", "sbb"])
def test_a_tiny_timm_eva_equals_the_spec(config, text):
    ref = perturbed(eva.Eva(img_size=(48, 64), patch_size=16, embed_dim=DIM, depth=2, num_heads=HEADS,
                            num_classes=10, **config))
    model = archspec.build_text(text).eval()
    model.load_state_dict(eva_to_ours(ref.state_dict()), strict=True)
    assert archspec.check_text(text).params == sum(p.numel() for p in ref.parameters())
    x = torch.randn(2, 3, 48, 64)
    with torch.no_grad():
        ours, expected = model(x), ref(x)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=0), (ours - expected).abs().max()


# -- fused, exported, costed ----------------------------------------------------------------------

ROPE_VIT_ATTN = spec(attention("{rotary_grid: {theta: 100.0, indexing: xy}}"))


def test_it_stays_one_fused_attention_and_exports_with_a_dynamic_batch():
    report = archspec.check_text(ROPE_VIT_ATTN)
    model = perturbed(archspec.build_text(ROPE_VIT_ATTN))
    assert not model.attn.mixes_scores() and model.attn.position_bias(None, None, None) is None  # SDPA, no mask
    program = export_program(model, report.graph)
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert any("scaled_dot_product_attention" in op for op in ops) and not any("softmax" in op for op in ops), ops
    x = torch.randn(5, GRID[0] * GRID[1], DIM)
    with torch.no_grad():
        assert torch.allclose(program.module()(x), model(x), atol=1e-5, rtol=0)


def test_the_table_is_not_saved():
    model = archspec.build_text(ROPE_VIT_ATTN)
    assert not any("pos_embed" in k for k in model.state_dict())  # rebuilt from the grid, as timm's
    assert model.attn.rotary_grid.pos_embed.shape == (GRID[0] * GRID[1], 2 * HEAD)


@pytest.mark.parametrize("part, prefix", [("{rotary_grid: {theta: 100.0, indexing: xy}}", 1),
                                          ("{rotary_grid: {dims: 8}}", 0)], ids=["all-dims", "dims-8"])
def test_no_params_no_flops_and_the_table_as_buffer_bytes(part, prefix):
    text = spec(attention(part), prefix)
    report, model = archspec.check_text(text), archspec.build_text(text).eval()
    assert report.params == sum(p.numel() for p in model.parameters())
    assert report.flops == counted(model, torch.randn(1, GRID[0] * GRID[1], DIM))
    plain = archspec.check_text(spec(attention(None), prefix))
    assert (report.params, report.flops) == (plain.params, plain.flops)
    held = sum(b.numel() * b.element_size() for _, b in model.named_buffers())
    assert sum(row.buffer_bytes for row in report.nodes) - sum(row.buffer_bytes for row in plain.nodes) == held


# -- located errors -------------------------------------------------------------------------------

PART = "{rotary_grid: {theta: 100.0}}"
SEQUENCE = (f"name: t\ninputs:\n  x: [B, 10, {DIM}]\ngraph:\n"
            f"  - {{id: attn, from: x, attention: {attention(PART)}}}\n")
CROSS = (f"name: t\ninputs:\n  x: {{shape: [B, 12, {DIM}], grid: [3, 4]}}\n  m: [B, 5, {DIM}]\ngraph:\n"
         f"  - {{id: attn, from: [x, m], attention: {attention(PART).replace('global', 'cross')}}}\n")
WINDOW = spec(f"{{kind: window, heads: {HEADS}, window: 4, scores: [{PART}]}}", prefix=0, grid=(4, 4))


@pytest.mark.parametrize("text, message, hint", [
    (SEQUENCE, "2-D rotary positions need tokens on a grid", "1-D positions are `rope_theta`"),
    (CROSS, "need the keys on the queries' 3x4 grid, but there are 5 keys for 12 queries", "self-attention"),
    (WINDOW, "does not take parts that do", "global attention"),
    (spec(attention(PART).replace("scores:", "rope_theta: 10000.0, rope_flat: true, scores:")),
     "rope_theta would rotate them again", "drop rope_theta"),
    (spec(attention("{rotary_grid: {dims: 6}}")), "dims 6 to be a multiple of 4", "multiple of 4 up to 16"),
    (spec(attention("{rotary_grid: {dims: 20}}")), "at most the head width 16", "up to 16"),
    (spec(attention("rotary_grid").replace(f"heads: {HEADS}", "heads: 8, head_dim: 6")),
     "the head width 6 (all of it rotates by default)", "up to 4"),
    (spec(attention("rotary_grid").replace(f"heads: {HEADS}", "heads: 8, head_dim: 2")),
     "the head width 2 (all of it rotates by default)", "fewer heads"),  # the DINOv3 trial: "up to 0"
    (spec(attention("{rotary_grid: {indexing: yx}}")), "score part 'rotary_grid': indexing", None),
    (spec(attention("{rotary_grid: {temperature: 100}}")), "score part 'rotary_grid' has no option 'temperature'",
     "its options: dims, frequencies, indexing, interleaved, positions, prefix_angles, ref_grid, theta"),
], ids=["no-grid", "cross", "window", "with-rope-theta", "dims-not-4", "dims-too-wide", "head-not-4",
        "head-below-4", "bad-indexing", "unknown-option"])
def test_bad_uses_are_located_errors(text, message, hint):
    with pytest.raises(SpecError) as e:
        archspec.check_text(text)
    diagnostic = e.value.diagnostics[0]
    assert message in diagnostic.message, diagnostic.message
    assert diagnostic.path == "attn"
    if hint is not None:
        assert hint in diagnostic.hint, diagnostic.hint
    line = text.splitlines()[diagnostic.loc.line - 1]
    at = line[diagnostic.loc.col - 1:]  # at `scores:`, at the part's entry, or at the part's option it is about
    before = line[:diagnostic.loc.col - 1].rstrip()
    assert before.endswith("scores:") or at.startswith(("rotary_grid", "indexing", "temperature")), \
        (line, diagnostic.loc.col)


def test_the_standalone_model_py_rotates_the_same(tmp_path):
    """model.py (the module classes' source copied, with the helpers they call) builds the part
    again from its arguments and gives the same output."""
    report = archspec.check_text(ROPE_VIT_SPEC)
    gm = perturbed(archspec.build_text(ROPE_VIT_SPEC))
    model = standalone_copy(gm, report.name, report.file, tmp_path)
    model.load_state_dict(gm.state_dict())
    x = torch.randn(2, 3, 48, 64)
    with torch.no_grad():
        assert torch.equal(model(x), gm(x))
