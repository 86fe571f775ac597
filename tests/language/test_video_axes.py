"""Video inputs [B, T, C, H, W] and axes folded into the batch and back (rearrange's `(b t)`).

A float input of rank 5 is a video; `b t c h w -> (b t) c h w` folds its frames into the batch,
so that the image primitives (patchify, conv, attention) run per frame, and `(b t) n c -> (b n)
t c` refolds per patch position, the batch staying symbolic (`B*4`, `B*17`). The small model
here has TimeSformer's structure (specs/timesformer.yaml, whose pipeline tests run in the slow
tier only: tests/parity/test_shipped.py counts this model's ops as run elsewhere): the class
token averaged over the frames and copied back per frame (reduce, expand, concat). Checked here:
the checker's shapes against the modules at two batch sizes, each fold against torch's own
reshape and permute, attention over a folded batch against the same attention run frame by
frame, FLOPs per sample against FlopCounterMode, the located errors (a factor that does not
divide, a folded and an unfolded batch meeting, a video given to an image primitive, a
symbolic axis folded), torch.export with a dynamic batch, ONNX Runtime and TensorRT's coverage.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.cli import EXIT_SPEC, main
from archspec.compiler.backends.export import export_program
from archspec.compiler.backends.onnx import export_onnx

from tests.conftest import checks_tensorrt_coverage, run_capturing

TOL = 1e-5
FRAMES, SIDE, PATCH, DIM = 4, 16, 4, 16
PATCHES = (SIDE // PATCH) ** 2

VIDEO = f"""\
name: video
params: {{frames: {FRAMES}, dim: {DIM}}}
inputs:
  video: [B, frames, 3, {SIDE}, {SIDE}]
graph:
  - {{id: frame_images, rearrange: {{pattern: "b t c h w -> (b t) c h w", as: image}}}}
  - {{id: patch_embed, patchify: {{patch: {PATCH}, dim: "${{dim}}", cls_token: true, pos: learned}}}}
  - {{id: spatial, attention: {{kind: global, heads: 2}}}}
  - {{id: cls_rows, slice: {{stop: 1}}}}
  - {{id: cls_by_frame, rearrange: {{pattern: "(b t) 1 c -> b t c", sizes: {{t: "${{frames}}"}}, as: tokens}}}}
  - {{id: cls, reduce: {{fn: mean, axes: [1], keepdim: true}}}}
  - {{id: cls_copies, expand: {{shape: [-1, "${{frames}}", -1]}}}}
  - {{id: cls_per_frame, rearrange: {{pattern: "b t c -> (b t) 1 c", as: tokens}}}}
  - {{id: patches, from: spatial, slice: {{start: 1}}}}
  - {{id: frame_tokens, from: [cls_per_frame, patches], concat: {{}}}}
  - {{id: by_time, rearrange: {{pattern: "(b t) n c -> (b n) t c", sizes: {{t: "${{frames}}"}}, as: tokens}}}}
  - {{id: temporal, attention: {{kind: global, heads: 2}}}}
  - {{id: by_patch, rearrange: {{pattern: "(b n) t c -> b (n t) c", sizes: {{n: {PATCHES + 1}}}, as: tokens}}}}
  - {{id: joined, from: [cls, by_patch], concat: {{}}}}
  - {{id: mlp, mlp: {{ratio: 2}}}}
"""


def build(text: str = VIDEO):
    report = archspec.check_text(text)
    model = archspec.build_text(text, seed=0).eval()
    return report, model


def video(batch: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, FRAMES, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(seed))


def test_the_checker_folds_the_batch_symbolically():
    report, _ = build()
    shapes = {name: str(list(map(str, report.graph.type_of(name).shape))) for name in
              ("frame_images", "patch_embed", "cls_by_frame", "cls", "cls_per_frame", "by_time", "temporal",
               "by_patch", "joined")}
    assert shapes == {"frame_images": "['B*4', '3', '16', '16']", "patch_embed": "['B*4', '17', '16']",
                      "cls_by_frame": "['B', '4', '16']", "cls": "['B', '1', '16']",
                      "cls_per_frame": "['B*4', '1', '16']", "by_time": "['B*17', '4', '16']",
                      "temporal": "['B*17', '4', '16']", "by_patch": "['B', '68', '16']",
                      "joined": "['B', '69', '16']"}
    assert report.graph.type_of("patch_embed").grid == (4, 4)  # the frame's token grid survives the fold


@pytest.mark.parametrize("batch", [1, 3])
def test_every_node_has_the_checkers_shape(batch):
    report, model = build()
    _, outputs = run_capturing(model, (video(batch),))
    for name, out in outputs.items():
        rows = {"B": 1, "B*4": FRAMES, "B*17": PATCHES + 1}
        dims = report.graph.type_of(name).shape
        expected = [batch * rows[str(d)] if str(d) in rows else d for d in dims]
        assert list(out.shape) == expected, name


def test_the_folds_are_torchs_reshapes():
    text = f"""\
name: folds
inputs:
  video: [B, {FRAMES}, 3, 6, 10]
graph:
  - {{id: frames_, rearrange: {{pattern: "b t c h w -> (b t) c h w", as: image}}}}
  - {{id: back, rearrange: {{pattern: "(b t) c h w -> b t c h w", sizes: {{t: {FRAMES}}}}}}}
  - {{id: per_row, from: frames_, rearrange: {{pattern: "(b t) c h w -> (b h) t c w", sizes: {{t: {FRAMES}}}}}}}
  - {{id: per_pixel, from: video, rearrange: {{pattern: "b t c h w -> (b h w) t c"}}}}
outputs: {{frames: frames_, back: back, per_row: per_row, per_pixel: per_pixel}}
"""
    report = archspec.check_text(text)
    assert [str(report.graph.type_of(n).shape[0]) for n in ("frames_", "back", "per_row", "per_pixel")] == \
        ["B*4", "B", "B*6", "B*60"]
    model = archspec.build_text(text).eval()
    x = torch.randn(2, FRAMES, 3, 6, 10)
    frames, back, per_row, per_pixel = model(x)
    assert torch.equal(frames, x.reshape(2 * FRAMES, 3, 6, 10))
    assert torch.equal(back, x)
    assert torch.equal(per_row, x.permute(0, 3, 1, 2, 4).reshape(2 * 6, FRAMES, 3, 10))
    assert torch.equal(per_pixel, x.permute(0, 3, 4, 1, 2).reshape(2 * 60, FRAMES, 3))


def test_attention_over_a_folded_batch_is_attention_per_frame():
    """The folded rows are independent sequences: each frame's output is what the same modules
    give that frame alone (a batch of one image)."""
    _, model = build()
    x = video(2)
    _, whole = run_capturing(model, (x,), ("spatial",))
    for sample in range(2):
        for frame in range(FRAMES):
            one = x[sample, frame][None]  # [1, 3, H, W]
            alone = model.spatial(model.patch_embed(one))
            assert torch.allclose(whole["spatial"][sample * FRAMES + frame], alone[0], atol=TOL)


def test_flops_are_per_sample():
    """A folded node does its work once per frame (or patch position) of each sample."""
    report, model = build()
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter:  # (not under no_grad: FlopCounterMode then misses the conv)
        model(video(1))
    assert report.flops == pytest.approx(counter.get_total_flops(), rel=0.01)


FOLDED = """
name: folded
inputs:
  x: [B, 32, 64]
graph:
  - {id: fold, rearrange: {pattern: "b (t n) c -> (b t) n c", sizes: {t: 2}, as: tokens}}
  - {id: lin, linear: {dim: 64}}
  - {id: mlp, mlp: {ratio: 2}}
  - {id: conv, conv: {dim: 1, kernel: 3, padding: same}}
  - {id: attn, attention: {kind: global, heads: 4}}
  - {id: unfold, rearrange: {pattern: "(b t) n c -> b (t n) c", sizes: {t: 2}, as: tokens}}
  - {id: lin_unfolded, linear: {dim: 64}}
"""


def test_linear_mlp_and_conv_over_a_folded_batch_count_each_row_once():
    """The Qwen2-VL trial: a linear or an mlp over frames folded into the batch counted its FLOPs
    once per frame twice over (the fold squared), in check, report.json and the model card."""
    report = archspec.check_text(FOLDED)
    flops = {n.name: n.meta["cost"].flops for n in report.graph.nodes() if not n.is_input}
    assert flops["lin"] == flops["lin_unfolded"] == 2 * 32 * 64 * 64
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter:
        archspec.build_text(FOLDED, seed=0)(torch.randn(1, 32, 64))
    assert report.flops == pytest.approx(counter.get_total_flops(), rel=0.01)


def spec_with(graph: str) -> str:
    return f"name: bad\ninputs:\n  video: [B, {FRAMES}, 3, {SIDE}, {SIDE}]\n  x: [B, 8, 16]\ngraph:\n{graph}"


@pytest.mark.parametrize("graph, line, column, message, hint", [
    ('  - {from: video, patchify: {patch: 4, dim: 8}}\n', 6, 12, "patchify needs an image or a token grid, got a "
     "rank-5 tensor", "fold the frames into the batch first: a rearrange 'b t c h w -> (b t) c h w'"),
    ('  - {from: video, rearrange: {pattern: "b t c h w -> (b t) c h w", as: image}}\n'
     '  - {rearrange: {pattern: "(b t) c h w -> b t c h w", sizes: {t: 3}}}\n', 7, 62,
     "'(b t)' unfolds 3 rows per sample (t=3) out of the batch B*4", "give sizes whose product divides 4"),
    ('  - {id: f, from: x, rearrange: {pattern: "b (t n) c -> (b t) n c", sizes: {t: 2}}}\n'
     '  - {from: [f, x], add: {}}\n', 7, 12, "reads tensors of batch B*2 and of batch B", "unfold the folded one"),
    ('  - {from: x, rearrange: {pattern: "b n c -> n (b c)"}}\n', 6, 36,
     "moves the batch axis 'b' out of the first dimension", None),
    ('  - {from: x, rearrange: {pattern: "(b t) n c -> b t n c", sizes: {b: 2, t: 2}}}\n', 6, 67,
     "`sizes` gives every axis of '(b t)'", "leave the batch axis"),
])
def test_bad_folds_are_located_errors(graph, line, column, message, hint):
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(spec_with(graph), name="bad.yaml")
    error = info.value
    assert message in error.message, error.message
    assert hint is None or hint in error.hint, error.hint
    assert (error.loc.file, error.loc.line, error.loc.col) == ("bad.yaml", line, column)


def test_a_symbolic_axis_does_not_fold():
    text = "name: t\ndims:\n  L: [1, 32]\ninputs:\n  x: [B, L, 8]\ngraph:\n" \
           '  - {rearrange: {pattern: "b l c -> (b l) c"}}\n'
    with pytest.raises(archspec.SpecError, match="axis 'l' has the symbolic size L; '\\(b l\\)' would fold it into"):
        archspec.check_text(text)


@pytest.mark.parametrize("shape, message", [
    ("[B, T, 3, 16, 16]", "a video's frames, channels and size must be fixed numbers"),
    ("[B, 2, 2, 3, 16, 16]", "has rank 6; inputs are videos [B,T,C,H,W]"),
])
def test_bad_video_inputs_are_located_errors(shape, message, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: t\ndims:\n  T: [1, 8]\ninputs:\n  video: {shape}\ngraph:\n"
                    '  - {rearrange: {pattern: "b t c h w -> (b t) c h w"}}\n')
    assert main(["check", str(path)]) == EXIT_SPEC == 1
    err = capsys.readouterr().err
    assert f"{path}:5:" in err and message in err and "Traceback" not in err


def test_exported_with_a_dynamic_batch():
    report, model = build()
    program = export_program(model, report.graph)
    for batch in (1, 3, 5):
        x = video(batch, seed=batch)
        with torch.no_grad():
            assert torch.allclose(program.module()(x), model(x), atol=TOL)


def test_onnx_runtime_matches(tmp_path):
    pytest.importorskip("onnxruntime")
    report, model = build()
    result = export_onnx(model, report.graph, str(tmp_path / "video.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4  # at batch 3, traced at another


@pytest.mark.slow  # 11 s here; the op harnesses check every op's coverage in every run
@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_every_node(tmp_path, capsys):
    checks_tensorrt_coverage(VIDEO, tmp_path, capsys)


FOLD_THEN_UNFOLD = """name: fold
inputs: {x: [B, 8, 4, 6]}
graph:
  - {id: folded, rearrange: {pattern: "b t n c -> (b t n) c", as: tensor}}
  - {id: back, rearrange: {pattern: "UNFOLD c -> b t n c", sizes: {n: 4, t: 8}, as: tensor}}
"""


@pytest.mark.parametrize("unfold, message", [
    ("(n t b)", "puts the batch axis 'b' after 'n'"),       # across the samples (the PatchTST trial's (c b))
    ("(b n t)", "unfolds 4 x 8 (n t) out of a batch whose rows were folded as 8 x 4"),  # within each sample
])
def test_an_unfold_in_another_order_than_the_fold_is_a_located_error(unfold, message):
    """Both built silently before: the folded batch knew only its factor, B*32, and '(c b)' read
    the rows of several samples as one (the PatchTST trial: sample 1 moved sample 0's output by 7)."""
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(FOLD_THEN_UNFOLD.replace("UNFOLD", unfold), name="fold.yaml")
    assert message in info.value.message
    assert info.value.loc.line == 5


def test_an_unfold_in_the_folds_order_or_finer_is_the_inverse():
    text = FOLD_THEN_UNFOLD.replace("UNFOLD", "(b t n)") + \
        '  - {id: refold, rearrange: {pattern: "b t n c -> (b t n) c", as: tensor}}\n' \
        '  - {id: inner, rearrange: {pattern: "(b n) c -> b n c", sizes: {n: 4}, as: tensor}}\n' \
        '  - {id: split, rearrange: {pattern: "(b t1 t2) n c -> b t1 t2 n c", sizes: {t1: 2, t2: 4}, as: tensor}}\n'
    model = archspec.build_text(text.replace("\n  - {id: refold", "\n  - {id: refold, from: back"))
    x = torch.randn(3, 8, 4, 6)
    assert torch.equal(model(x), x.reshape(3, 2, 4, 4, 6))


def test_unfolding_axes_of_one_size_swapped_is_a_located_error():
    """The Qwen2.5-VL trial: (b wh ww) folded and (b ww wh) unfolded, wh = ww = 2, checked as sizes
    alone, and the windows came out transposed (1.4 off) without a word."""
    text = """name: swap
inputs: {x: [B, 16, 1]}
graph:
  - {id: fold, rearrange: {pattern: "b (wh ww n) d -> (b wh ww) n d", sizes: {wh: 2, ww: 2}, as: tokens}}
  - {id: unfold, rearrange: {pattern: "(b ww wh) n d -> b (wh ww n) d", sizes: {wh: 2, ww: 2}, as: tokens}}
"""
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    assert "unfolds ww wh out of a batch into which they were folded as wh ww" in info.value.message
    model = archspec.build_text(text.replace("(b ww wh) n d", "(b wh ww) n d"))
    x = torch.arange(32.0).view(2, 16, 1)
    assert torch.equal(model(x), x)


def test_a_group_norm_over_a_folded_batch_warns():
    """The MobileViT v2 trial: GroupNorm(1) per folded row, 0.54 off timm's per sample, no word."""
    report = archspec.check_text("""name: gn
inputs: {image: [B, 8, 4, 4]}
graph:
  - {rearrange: {pattern: "b c (nh ph) (nw pw) -> (b ph pw) (nh nw) c", sizes: {ph: 2, pw: 2}, as: tokens}}
  - {id: gn, norm: {kind: group, groups: 1}}
""")
    (warning,) = report.warnings
    assert "its statistics run over each row, not over the whole sample" in warning.message
