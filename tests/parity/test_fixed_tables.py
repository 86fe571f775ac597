"""What a reference does not train is not trainable here (issue 35): for each shipped spec that
a parity test compares with a reference (MAE against HF's ViTMAEModel, ViT, SAM, BEiT and Swin
against timm), every tensor ours loads from a reference parameter has that parameter's
`requires_grad` (MAE's fixed 2-D sin-cos position table is frozen in both), and the trainable
and total parameter counts are the reference's.

How the flags are compared through the mapping files (which rename, fuse and split tensors):
every reference parameter is filled with one marker value, TRAINED or FROZEN (buffers keep
their values), that state dict is loaded into ours with the spec's own mapping, and then each of
our parameters must hold FROZEN alone where it does not train, and no FROZEN value where it
does. Small configurations of each reference, CPU fp32."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch

import archspec
from archspec.compiler.weights.load import load_weights

from tests.conftest import ROOT

TRAINED, FROZEN = 7.25, -3.5


def timm_model(name: str, **kwargs):
    timm = pytest.importorskip("timm")
    return timm.create_model(name, pretrained=False, **kwargs)


def hf_mae(**config):
    transformers = pytest.importorskip("transformers")
    return transformers.ViTMAEModel(transformers.ViTMAEConfig(**config))


@dataclass(frozen=True)
class Case:
    spec: str
    overrides: dict | None
    reference: Callable

    def __repr__(self):
        return self.spec


CASES = [
    Case("mae_b16", {"img": 64, "depth": 2, "dim": 64, "heads": 4},
         lambda: hf_mae(image_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256)),
    Case("mae_ti16", {"img": 64}, lambda: hf_mae(image_size=64, hidden_size=192, num_attention_heads=3,
                                                 intermediate_size=768)),
    Case("vit_ti16", {"img": 64}, lambda: timm_model("vit_tiny_patch16_224", img_size=64)),
    Case("sam_vit_ti", None, lambda: timm_model("samvit_base_patch16", img_size=128, embed_dim=192, num_heads=3,
                                                depth=4, global_attn_indexes=[1, 3], window_size=3,
                                                neck_chans=64)),
    Case("beit_ti16", {"img": 64}, lambda: timm_model("beit_base_patch16_224", img_size=64, embed_dim=192,
                                                      num_heads=3)),
    Case("swin_t", None, lambda: timm_model("swin_tiny_patch4_window7_224")),
]


def counts(model) -> tuple[int, int]:
    """(trainable, total) parameters."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def flagged_state(ref) -> dict:
    """The reference's state dict with each parameter filled with its requires_grad marker."""
    state = dict(ref.state_dict())
    for name, p in ref.named_parameters():
        state[name] = torch.full_like(p.detach(), TRAINED if p.requires_grad else FROZEN)
    return state


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_what_the_reference_does_not_train_is_not_trainable(case):
    torch.manual_seed(0)
    ref = case.reference().eval()
    path = str(ROOT / "specs" / f"{case.spec}.yaml")
    ours = archspec.build(path, case.overrides).eval()
    assert counts(ours) == counts(ref)
    assert archspec.check(path, case.overrides).params == counts(ref)[1]
    load_weights(ours, flagged_state(ref))
    wrong = []
    for name, p in ours.named_parameters():
        frozen = (p.detach() == FROZEN)
        if p.requires_grad and bool(frozen.any()):
            wrong.append(f"{name} trains, the reference's does not")
        if not p.requires_grad and not bool(frozen.all()):
            wrong.append(f"{name} is frozen, the reference's trains")
    assert not wrong, wrong


def test_maes_position_table_is_the_fixed_sincos_table_and_loads():
    """mae_ti16's table at build: HF's 2-D sin-cos (the class token's row zeros), frozen; a
    checkpoint's table loads into it, and a training step leaves it as it was."""
    ref = hf_mae(image_size=64, hidden_size=192, num_attention_heads=3, intermediate_size=768).eval()
    ours = archspec.build(str(ROOT / "specs" / "mae_ti16.yaml"), {"img": 64})
    table = ours.patch_embed.pos_embed
    assert not table.requires_grad and table.shape == ref.embeddings.position_embeddings.shape == (1, 17, 192)
    from transformers.models.vit_mae.modeling_vit_mae import build_2d_sinusoidal_position_embedding

    # as ViTMAEEmbeddings.initialize_weights makes it: the halves swapped to the original MAE's [w | h] layout
    want = build_2d_sinusoidal_position_embedding(height=4, width=4, embed_dim=192, cls_token=True)
    want = torch.cat([want[..., 96:], want[..., :96]], dim=-1)
    assert torch.allclose(table[0], want, atol=1e-6)
    state = {k: v + 0.5 if k == "embeddings.position_embeddings" else v for k, v in ref.state_dict().items()}
    load_weights(ours, state)
    loaded = ours.patch_embed.pos_embed.detach().clone()
    assert torch.equal(loaded, ref.embeddings.position_embeddings + 0.5)
    optimizer = torch.optim.AdamW(ours.parameters(), lr=0.1, weight_decay=0.1)
    image, noise = torch.randn(2, 3, 64, 64), torch.rand(2, 16)
    ours.train()
    hidden, _, _ = ours(image, noise)
    hidden.square().mean().backward()
    optimizer.step()
    assert ours.patch_embed.pos_embed.grad is None and torch.equal(ours.patch_embed.pos_embed, loaded)
    assert ours.patch_embed.proj.weight.grad is not None


def test_pos_frozen_needs_the_sincos_table():
    text = ("name: t\ninputs:\n  image: [B, 3, 32, 32]\ngraph:\n"
            "  - {patchify: {patch: 16, dim: 32, pos: learned, pos_frozen: true}}\n")
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    assert "`pos_frozen` freezes the fixed sin-cos table, but pos is learned" in info.value.diagnostics[0].message


def test_a_sincos_buffer_stays_a_buffer():
    """Without pos_frozen, the sin-cos table is a buffer, not in the state dict or the parameters."""
    text = ("name: t\ninputs:\n  image: [B, 3, 32, 32]\ngraph:\n"
            "  - {id: p, patchify: {patch: 16, dim: 32, pos: sincos, cls_token: true}}\n")
    frozen = text.replace("cls_token: true", "cls_token: true, pos_frozen: true")
    plain, fixed = archspec.build_text(text), archspec.build_text(frozen)
    assert "p.pos_embed" not in plain.state_dict() and "p.pos_embed" in fixed.state_dict()
    assert archspec.check_text(frozen).params - archspec.check_text(text).params == 5 * 32
    x = torch.randn(2, 3, 32, 32)
    fixed.p.proj.load_state_dict(plain.p.proj.state_dict())
    fixed.p.cls_token.data.copy_(plain.p.cls_token)
    with torch.no_grad():
        assert torch.equal(plain(x), fixed(x))
