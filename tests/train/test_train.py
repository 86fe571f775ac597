"""Training what you author: the module tree is the call tree (hooks per block fire once, with
the block's output), the timm-style interface, activation checkpointing, bf16 autocast, weights
resampled to another size as timm does, and `python -m archspec.train` in one process and under
`torchrun --nproc-per-node 2` (gloo on CPU) with FSDP2 and DDP, which give the same step.

Small configurations of vit_ti16 and swin_t keep it quick.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import archspec

from tests.conftest import ROOT

VIT = str(ROOT / "specs" / "vit_ti16.yaml")
SWIN = str(ROOT / "specs" / "swin_t.yaml")
PVT = str(ROOT / "specs" / "pvt_v2_b0.yaml")
VIT_SMALL = {"img": 32, "depth": 2}
SWIN_SMALL = {"img": 64, "window": 4, "depths": [2, 2, 2, 2], "dims": [16, 32, 64, 128], "heads": [1, 2, 4, 8],
              "classes": 10}
PVT_SMALL = {"img": 64, "depths": [1, 1, 1, 1]}
SMALL = {VIT: VIT_SMALL, SWIN: SWIN_SMALL}


def overrides_args(overrides: dict) -> list[str]:
    return [arg for k, v in overrides.items() for arg in ("--set", f"{k}={json.dumps(v)}")]


# -- the module tree is the call tree ----------------------------------------------------------------


@pytest.mark.parametrize("spec", [VIT, SWIN], ids=["vit_ti16", "swin_t"])
def test_a_hook_on_each_block_fires_once_with_the_blocks_output(spec):
    report = archspec.check(spec, SMALL[spec])
    model = archspec.build(spec, SMALL[spec]).eval()
    blocks = model.facts.blocks
    assert blocks and all(isinstance(model.get_submodule(b), torch.nn.Module) for b in blocks)
    calls: dict[str, list] = {b: [] for b in blocks}
    for path in blocks:
        model.get_submodule(path).register_forward_hook(lambda m, a, out, path=path: calls[path].append(out.shape))
    with torch.no_grad():
        model(torch.randn(2, 3, SMALL[spec]["img"], SMALL[spec]["img"]))
    for path, shapes in calls.items():
        last = [n.name for n in report.graph.nodes() if n.name.startswith(path + ".")][-1]
        expected = [2 if str(d) == "B" else d for d in report.graph.type_of(last).shape]
        assert [list(s) for s in shapes] == [expected], path  # exactly once, with the block's output


def test_a_sublayer_module_computes_norm_body_and_residual():
    model = archspec.build(VIT, VIT_SMALL).eval()
    attn = model.blocks[0].attn
    x = torch.randn(2, 5, 192)
    with torch.no_grad():
        assert torch.allclose(attn(x), x + attn.body(attn.norm(x)), atol=1e-6)  # pre-norm, as the spec says


def test_repeats_index_like_module_lists():
    model = archspec.build(SWIN, SWIN_SMALL)
    assert len(model.stages) == 4 and len(model.stages[2].blocks) == 2
    assert model.stages[-1] is model.stages[3] and [type(b).__name__ for b in model.stages[0].blocks] == \
        ["SwinBlock", "SwinBlock"]


# -- the timm interface -------------------------------------------------------------------------------


def test_features_head_and_reset_classifier():
    model = archspec.build(VIT, VIT_SMALL).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        features = model.forward_features(x)
        assert features.shape == (2, 5, 192)
        assert torch.equal(model.forward_head(features), model(x))
        pooled = model.forward_head(features, pre_logits=True)
        assert torch.equal(pooled, features[:, 0])  # the class token (pool: cls)
    assert model.num_classes == 1000
    model.reset_classifier(7)
    assert model.num_classes == 7 and model(x).shape == (2, 7)
    model.reset_classifier(0)
    assert model(x).shape == (2, 192)


def test_no_weight_decay_and_layer_decay_groups_as_timm():
    from timm.optim._param_groups import param_groups_layer_decay

    model = archspec.build(VIT, {"img": 32, "depth": 4})
    skip = model.no_weight_decay()
    assert {"patch_embed.pos_embed", "patch_embed.cls_token", "norm.weight", "blocks.0.attn.qkv.bias"} <= skip
    assert "blocks.0.attn.qkv.weight" not in skip
    groups = param_groups_layer_decay(model, layer_decay=0.5)
    scales = sorted({g["lr_scale"] for g in groups})
    assert len(scales) == 4 + 2  # the stem, each block, the head (timm's ViT: depth + 2 layers)
    ordinal = model.group_matcher()
    assert ordinal("patch_embed.proj.weight") == (0,) and ordinal("blocks.3.mlp.fc1.weight") == (1, 3)
    assert ordinal("norm.weight") == (1, 3, 99999)  # the final norm belongs to the last block, as timm's


def test_swin_groups_a_merge_with_the_next_block():
    ordinal = archspec.build(SWIN, SWIN_SMALL).group_matcher()
    assert ordinal("stages.1.downsample.reduction.weight") == ordinal("stages.1.blocks.0.attn.qkv.weight") == (1, 2)
    assert archspec.build(SWIN, SWIN_SMALL).group_matcher(coarse=True)("stages.2.blocks.1.mlp.fc1.weight") == (1, 2)


@pytest.mark.parametrize("spec, overrides", [(SWIN, SWIN_SMALL), (PVT, PVT_SMALL), (VIT, VIT_SMALL)],
                         ids=["swin_t", "pvt_v2_b0", "vit_ti16"])
def test_forward_intermediates_are_the_checkers_stages_as_images(spec, overrides):
    report = archspec.check(spec, overrides)
    model = archspec.build(spec, overrides).eval()
    with torch.no_grad():
        out, features = model.forward_intermediates(torch.randn(2, 3, overrides["img"], overrides["img"]))
    stages = model.facts.stages
    assert len(features) == len(stages) > 1
    for stage, f in zip(stages, features):
        t = report.graph.type_of(stage.node)
        assert list(f.shape) == [2, t.channels, *t.grid]  # NCHW, prefix tokens dropped
    last_two = model.forward_intermediates(torch.randn(1, 3, overrides["img"], overrides["img"]), indices=2,
                                           intermediates_only=True)
    assert len(last_two) == 2


# -- checkpointing, bf16 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [VIT, SWIN], ids=["vit_ti16", "swin_t"])
def test_checkpointing_gives_the_same_gradients(spec):
    x = torch.randn(2, 3, SMALL[spec]["img"], SMALL[spec]["img"])
    grads = []
    for checkpointing in (False, True):
        model = archspec.build(spec, SMALL[spec], seed=3).train()
        model.set_grad_checkpointing(checkpointing)
        model(x).square().mean().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.allclose(grads[0][n], grads[1][n], atol=1e-6) for n in grads[0])


def test_bf16_autocast_runs_forward_and_backward():
    model = archspec.build(SWIN, SWIN_SMALL).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(torch.randn(2, 3, 64, 64))
        loss = out.float().square().mean()
    assert out.dtype == torch.bfloat16
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


# -- weights at another size ----------------------------------------------------------------------------


def test_vit_positions_resampled_as_timm_does():
    import timm
    from timm.models.vision_transformer import checkpoint_filter_fn

    state = {k: v + 0.02 * torch.randn_like(v) for k, v in
             timm.create_model("vit_tiny_patch16_224", pretrained=False).state_dict().items()}
    reference = checkpoint_filter_fn(dict(state), timm.create_model("vit_tiny_patch16_224", pretrained=False,
                                                                    img_size=384))
    model = archspec.build(VIT, {"img": 384}, weights=state)
    assert torch.equal(model.patch_embed.pos_embed.detach(), reference["pos_embed"])


def test_swin_bias_tables_resampled_as_timm_does():
    import timm
    from timm.models.swin_transformer import checkpoint_filter_fn

    state = {k: v + 0.02 * torch.randn_like(v) for k, v in
             timm.create_model("swin_tiny_patch4_window7_224", pretrained=False).state_dict().items()}
    target = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=384, window_size=12)
    reference = checkpoint_filter_fn(dict(state), target)
    model = archspec.build(SWIN, {"img": 384, "window": 12}, weights=state)
    for s, depth in enumerate((2, 2, 6, 2)):
        for b in range(depth):
            ours = model.stages[s].blocks[b].attn.position_bias.table.detach()
            assert torch.equal(ours, reference[f"layers.{s}.blocks.{b}.attn.relative_position_bias_table"]), (s, b)


def test_build_says_what_it_resampled(tmp_path):
    import timm

    path = tmp_path / "vit224.pth"
    torch.save(timm.create_model("vit_tiny_patch16_224", pretrained=False).state_dict(), path)
    result = subprocess.run([sys.executable, "-m", "archspec", "build", VIT, "--set", "img=384", "--weights", str(path),
                             "--target", "eager", "-o", str(tmp_path / "out")], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    assert "resampled 1 to this model's size as timm's loading does (position tables bicubic with antialias, relative-position tables on BEiT's grid: patch_embed.pos_embed (1, 197, 192) -> (1, 577, 192))" in result.stderr


# -- python -m archspec.train ------------------------------------------------------------------------------


def train(tmp_path, spec: str, name: str, *flags: str, processes: int = 1) -> dict:
    dump = tmp_path / f"{name}.pt"
    args = ["-m", "archspec.train", spec, *overrides_args(SMALL[spec]), "--steps", "2", "--batch", "4",
            "--dump", str(dump), *flags]
    command = ([sys.executable, *args] if processes == 1 else
               [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}", *args])
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    return torch.load(dump, weights_only=True)


@pytest.mark.parametrize("spec", [VIT, SWIN], ids=["vit_ti16", "swin_t"])
def test_fsdp2_and_ddp_take_the_same_step_as_one_process(spec, tmp_path):
    """One SGD step on a fixed global batch of 4: two processes of 2 each (FSDP2: every block and
    the root sharded; DDP) give the loss and the updated parameters of one process of 4. (SGD,
    because Adam's first step is lr * sign(gradient), which turns the last bit of a near-zero
    gradient's all-reduce into a difference of 2 lr.)"""
    step = ("--steps", "1", "--optimizer", "sgd", "--lr", "0.1")
    single = train(tmp_path, spec, "single", *step)
    for mode in ("--fsdp", "--ddp"):
        other = train(tmp_path, spec, mode.strip("-"), mode, *step, processes=2)
        assert other["losses"] == pytest.approx(single["losses"], abs=1e-5), mode
        assert single["model"].keys() == other["model"].keys()
        gaps = {k: float((single["model"][k] - other["model"][k]).abs().max()) for k in single["model"]}
        assert max(gaps.values()) < 1e-5, (mode, max(gaps.items(), key=lambda kv: kv[1]))


def test_training_resumes_where_it_stopped(tmp_path):
    straight = train(tmp_path, VIT, "straight", "--steps", "3")
    saved = tmp_path / "state.pt"
    train(tmp_path, VIT, "first", "--steps", "2", "--save", str(saved))
    resumed = train(tmp_path, VIT, "resumed", "--steps", "1", "--resume", str(saved))
    assert resumed["losses"] == pytest.approx(straight["losses"][2:], abs=1e-6)
    assert all(torch.allclose(straight["model"][k], resumed["model"][k], atol=1e-6) for k in straight["model"])


def test_the_loss_goes_down():
    from archspec.train import Options, train as run

    summary = run(Options(VIT, overrides=VIT_SMALL, steps=30, batch=8, lr=3e-3))
    assert summary["last_loss"] < summary["first_loss"] - 0.5


def test_loss_of_a_model_without_objectives_says_so_whatever_it_is_given():
    """The EdgeNeXt trial called model.loss(x, y) on a spec without objectives and was told it had
    given 2 tensors for 1; the missing objectives are the reason, said first."""
    model = archspec.build(VIT, VIT_SMALL)
    x = torch.randn(2, 3, 32, 32)
    for args in ((x,), (x, torch.zeros(2, dtype=torch.long))):
        with pytest.raises(TypeError, match="^this model declares no objectives"):
            model.loss(*args)


ROUNDED = """
name: rounded_lm
inputs:
  ids: {shape: [B, 16], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 32, dim: 8, pos: none}}
  - {id: w, param: {shape: [8]}}
  - {id: w_int, cast: {dtype: int64}}
  - {id: w_back, cast: {dtype: float32}}
  - {id: scaled, from: [embed, w_back], multiply: {}}
  - {id: head, head: {kind: lm, vocab: 32}}
"""


def test_a_learned_tensor_no_gradient_reaches_is_named_at_the_first_step(tmp_path, capsys):
    """The BitNet trial: weights rounded through a cast to int64 trained only through their
    scale, and `archspec.train` said nothing (w.grad stays None)."""
    from archspec.train import Options, train as run

    spec = tmp_path / "rounded.yaml"
    spec.write_text(ROUNDED)
    run(Options(str(spec), steps=2, batch=4))
    said = capsys.readouterr().err
    assert said.count("got no gradient at the first step") == 1 and "will not train: w.value" in said
    run(Options(VIT, overrides=VIT_SMALL, steps=1, batch=4))
    assert "got no gradient" not in capsys.readouterr().err
