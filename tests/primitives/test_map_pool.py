"""The classify head's `pool: map`: timm's AttentionPoolLatent (VisionTransformer's global_pool
'map', SigLIP): a learned latent query attends over the tokens (class tokens left out), a
projection, a pre-norm MLP with a residual, then the classifier.

Against timm's VisionTransformer with the same weights (every parameter perturbed by seeded
noise, loaded through the shipped timm_vit mapping): parameter counts, logits, forward_features
(timm's tokens, not the pooled vector), pre_logits, FLOPs against torch's FlopCounterMode, and
the optimizer's layer-decay groups; a mean pool and a pool that keeps the class token give other
logits, so the comparison can fail; options that would do nothing are located errors.
"""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.parity.test_vocabulary import count_flops

timm = pytest.importorskip("timm")

SPEC = """\
archspec: 1
name: siglip_tiny
params: {dim: 64, heads: 4, depth: 2, eps: 1.0e-6, cls: false, pool: map}
inputs:
  image: [B, 3, 32, 32]
graph:
  - id: patch_embed
    patchify: {patch: 8, dim: "${dim}", cls_token: "${cls}", pos: learned}
  - id: blocks
    repeat: ${depth}
    graph:
      - id: attn
        attention: {kind: global, heads: "${heads}", norm_eps: "${eps}"}
      - id: mlp
        mlp: {ratio: 4.0, norm_eps: "${eps}"}
  - id: norm
    norm: {eps: "${eps}"}
  - id: head
    head: {kind: classify, pool: "${pool}", POOL_OPTIONS classes: 10}
mappings: [timm_vit]
"""
MAP_OPTIONS = 'pool_heads: "${heads}", pool_mlp_ratio: 2.0,'


def reference(cls: bool):
    torch.manual_seed(0)
    ref = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, class_token=cls, global_pool="map",
        num_classes=10)
    ref.attn_pool.mlp = timm.layers.Mlp(64, 128)  # pool_mlp_ratio 2 (timm's ViT passes its own mlp_ratio)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    return ref.eval()


def built(tmp_path, cls: bool, pool: str = "map", options: str = MAP_OPTIONS, ref=None):
    spec = tmp_path / "siglip.yaml"
    spec.write_text(SPEC.replace("POOL_OPTIONS", options))
    weights = None
    if ref is not None:
        weights = tmp_path / "ref.pt"
        torch.save(ref.state_dict(), weights)
    overrides = {"cls": cls, "pool": pool}
    return archspec.build(str(spec), overrides, weights=str(weights) if weights else None).eval()


@pytest.mark.parametrize("cls", [False, True])
def test_map_pool_equals_timms_vision_transformer(tmp_path, cls):
    ref = reference(cls)
    ours = built(tmp_path, cls, ref=ref)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    assert archspec.check_text(SPEC.replace("POOL_OPTIONS", MAP_OPTIONS), {"cls": cls}).params == \
        sum(p.numel() for p in ref.parameters())
    with torch.no_grad():
        logits = ref(x)
        assert (ours(x) - logits).abs().max() < 1e-5
        assert (ours.forward_features(x) - ref.forward_features(x)).abs().max() < 1e-5  # the tokens, [B, N, C]
        ours_pre = ours.forward_head(ours.forward_features(x), pre_logits=True)
        assert (ours_pre - ref.forward_head(ref.forward_features(x), pre_logits=True)).abs().max() < 1e-5
    report = archspec.check_text(SPEC.replace("POOL_OPTIONS", MAP_OPTIONS), {"cls": cls})
    ref.requires_grad_(False)  # FlopCounterMode's module tracker trips over the latent's expand otherwise
    assert report.flops == count_flops(lambda: ref(x[:1]))

    mean = built(tmp_path, cls, pool="mean", options="")
    mean.load_state_dict({k: v for k, v in ours.state_dict().items() if "attn_pool" not in k})
    with torch.no_grad():
        assert (mean(x) - logits).abs().max() > 1e-2  # the comparison can fail


def test_the_optimizer_groups_are_timms(tmp_path):
    from timm.optim import param_groups_layer_decay

    ref = reference(False)
    ours = built(tmp_path, False, ref=ref)

    def groups(model, strip=""):
        names = {id(p): n.replace(strip, "") for n, p in model.named_parameters()}
        return sorted((g["lr_scale"], g["weight_decay"], tuple(sorted(names[id(p)] for p in g["params"])))
                      for g in param_groups_layer_decay(model, 0.05, layer_decay=0.75))

    theirs = [(s, d, tuple(n.replace("attn_pool.", "head.attn_pool.") for n in names))
              for s, d, names in groups(ref)]
    renamed = {"cls_token": "patch_embed.cls_token", "pos_embed": "patch_embed.pos_embed",
               "head.weight": "head.fc.weight", "head.bias": "head.fc.bias"}
    pool_groups = [g for g in theirs if any("attn_pool" in n for n in g[2])]
    ours_groups = [g for g in groups(ours) if any("attn_pool" in n for n in g[2])]
    assert [(s, d, tuple(renamed.get(n, n) for n in names)) for s, d, names in pool_groups] == ours_groups


@pytest.mark.parametrize("pool,options,words", [
    ("map", "", "pool: map needs pool_heads"),
    ("mean", 'pool_heads: 4,', "pool_heads goes with pool: map"),
    ("map", 'pool_heads: 3,', "pool_heads 3 does not divide the width 64"),
    ("cls", 'pool_eps: 1.0e-5,', "pool_eps goes with pool: map"),
])
def test_pool_options_that_do_nothing_or_cannot_work_are_located_errors(pool, options, words):
    text = SPEC.replace("POOL_OPTIONS", options)
    with pytest.raises(SpecError) as info:
        archspec.check_text(text, {"pool": pool, "cls": pool == "cls"}, name="siglip.yaml")
    message = str(info.value)
    assert words in message and "siglip.yaml:" in message


def test_model_py_pools_as_the_built_module(tmp_path):
    """The standalone model.py (its ClassifierHead and MapPool copied): forward and pre_logits equal."""
    from archspec.compiler.backends.source import standalone_source

    ours = built(tmp_path, False, ref=reference(False))
    namespace: dict = {}
    source = standalone_source(ours, "siglip_tiny", str(tmp_path / "siglip.yaml"))
    exec(compile(source, "model.py", "exec"), namespace)  # noqa: S102 - our output
    standalone = namespace[type(ours).__name__]().eval()
    standalone.load_state_dict(ours.state_dict())
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(standalone(x), ours(x))
        assert torch.equal(standalone.forward_head(standalone.forward_features(x), pre_logits=True),
                           ours.forward_head(ours.forward_features(x), pre_logits=True))


def test_the_features_head_pools_by_map_without_a_classifier(tmp_path):
    """SigLIP2's trial: HF's pooler_output (the attention pool alone) had no word but a hand-made
    probe, cross attention and mlp; `head: {kind: features, pool: map}` is timm's ViT with
    global_pool 'map' and num_classes 0, the same weights, the same parameter count."""
    torch.manual_seed(0)
    ref = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, class_token=False, global_pool="map",
        num_classes=0)
    ref.attn_pool.mlp = timm.layers.Mlp(64, 128)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    spec = tmp_path / "siglip_features.yaml"
    text = SPEC.replace("head: {kind: classify, pool: \"${pool}\", POOL_OPTIONS classes: 10}",
                        "head: {kind: features, pool: map, pool_heads: \"${heads}\", pool_mlp_ratio: 2.0}")
    spec.write_text(text)
    torch.save(ref.state_dict(), tmp_path / "ref.pt")
    ours = archspec.build(str(spec), weights=str(tmp_path / "ref.pt")).eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = ref.eval()(x)
        assert want.shape == (2, 64) and (ours(x) - want).abs().max() < 1e-5
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters()) == \
        archspec.check(str(spec)).params
    with pytest.raises(SpecError, match="pool_heads goes with pool: map"):
        archspec.check_text(text.replace("pool: map,", "pool: mean,"))
