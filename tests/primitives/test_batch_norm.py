"""norm kind=batch against timm's LeViT pieces: ConvNorm (a conv and BatchNorm2d on an image) and
LinearNorm (a linear and BatchNorm1d over the flattened tokens), the same weights and running
statistics loaded from timm's state dict by renames alone; in eval (the running statistics) and
in training (the batch's statistics, and the running statistics updated alike), and exported."""

from __future__ import annotations

import pytest
import torch

import archspec

levit = pytest.importorskip("timm.models.levit")

SPEC = """
archspec: 1
name: conv_linear_bn
inputs:
  image: [B, 3, 16, 16]
graph:
  - {id: conv, conv: {out: 8, kernel: 3, stride: 2, padding: 1, bias: false}}
  - {id: conv_bn, norm: {kind: batch}}
  - {id: tokens, to_tokens: {}}
  - {id: linear, linear: {dim: 12, bias: false}}
  - {id: linear_bn, norm: {kind: batch}}
"""


class Reference(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = levit.ConvNorm(3, 8, 3, 2, 1)
        self.proj = levit.LinearNorm(8, 12)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)  # [B, 8, 8, 8] -> [B, 64, 8]
        return self.proj(x)  # [B, 64, 12]


def perturbed_reference() -> Reference:
    torch.manual_seed(0)
    ref = Reference()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, t in ref.state_dict().items():
            if t.is_floating_point():
                noise = torch.randn(t.shape, generator=generator)
                t.copy_(t + 0.3 * noise if "running_var" not in name else 0.5 + noise.abs())
    return ref


def ours_with(ref: Reference):
    renames = {"stem.linear.": "conv.conv.", "stem.bn.": "conv_bn.", "proj.linear.": "linear.", "proj.bn.": "linear_bn."}
    state = {}
    for key, value in ref.state_dict().items():
        for theirs, mine in renames.items():
            if key.startswith(theirs):
                state[mine + key[len(theirs):]] = value.clone()
    return archspec.build_text(SPEC, weights=state)


def test_eval_and_training_match_levits_conv_norm_and_linear_norm():
    ref = perturbed_reference()
    ours = ours_with(ref)
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    ref.eval(), ours.eval()
    with torch.no_grad():
        assert torch.allclose(ours(x), ref(x), atol=1e-5, rtol=0)
    ref.train(), ours.train()
    with torch.no_grad():
        assert torch.allclose(ours(x), ref(x), atol=1e-5, rtol=0)  # the batch's statistics
    for theirs, mine in (("stem.bn", "conv_bn"), ("proj.bn", "linear_bn")):
        for stat in ("running_mean", "running_var", "num_batches_tracked"):
            assert torch.allclose(ours.get_buffer(f"{mine}.{stat}").float(), ref.get_buffer(f"{theirs}.{stat}").float(),
                                  atol=1e-6), (mine, stat)


def test_the_running_statistics_matter_in_eval():
    """The check can fail: other running statistics give other outputs."""
    ref = perturbed_reference().eval()
    ours = ours_with(ref).eval()
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        before = ours(x)
        ours.get_buffer("linear_bn.running_mean").add_(1.0)
        assert (ours(x) - before).abs().max() > 0.1


def test_the_checker_counts_the_weights_and_the_export_keeps_eval_semantics():
    report = archspec.check_text(SPEC)
    ours = ours_with(perturbed_reference()).eval()
    assert report.params == sum(p.numel() for p in ours.parameters()) == 216 + 16 + 96 + 24
    x = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(4))
    program = torch.export.export(ours, (x,))
    with torch.no_grad():
        assert torch.allclose(program.module()(x), ours(x), atol=1e-6)
