"""`attention: {kind: convolutional}`: CvT's convolutional projection attention, against Hugging
Face's CvtAttention (CvtSelfAttention and CvtSelfOutput): q, k and v each a depthwise 3x3 conv
and a BatchNorm of the token grid (keys and values at stride 2), the class token joining after
the convolutions, linear maps, attention at CvT's scale width^-0.5, the projection. The CvT user
trial wrote it from tensor ops: 20 nodes a layer, 25 with the class token (90 of its spec's 98),
no fused kernel; exact.

With every parameter and the BatchNorms' running statistics perturbed by seeded noise, loaded by
renaming: outputs in eval (with and without a class token, odd grids), in training (the batch's
statistics, the running statistics updated as the reference's), gradients, parameter counts
and FLOPs against FlopCounterMode; head_dim's scale or no class token gives other outputs, so the
comparison can fail; located errors.
"""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.parity.test_vocabulary import count_flops

transformers = pytest.importorskip("transformers")

WIDTH, HEADS = 32, 2

SPEC = """\
archspec: 1
name: cvt_attention
params: {side: 7, cls: 1, scale: ~}
inputs:
  image: [B, 32, "${side}", "${side}"]
graph:
  - {id: patches, to_tokens: {}}
  - {id: cls_token, if: "${cls > 0}", tokens: {count: 1}}
  - id: attn
    attention: {kind: convolutional, heads: 2, stride_kv: 2, norm: none, residual: false, scale: "${scale}"}
"""

RENAMES = {"attention.convolution_projection_query.convolution_projection.convolution.": "attn.conv_q.conv.",
           "attention.convolution_projection_query.convolution_projection.normalization.": "attn.conv_q.norm.",
           "attention.convolution_projection_key.convolution_projection.convolution.": "attn.conv_k.conv.",
           "attention.convolution_projection_key.convolution_projection.normalization.": "attn.conv_k.norm.",
           "attention.convolution_projection_value.convolution_projection.convolution.": "attn.conv_v.conv.",
           "attention.convolution_projection_value.convolution_projection.normalization.": "attn.conv_v.norm.",
           "attention.projection_query.": "attn.q.", "attention.projection_key.": "attn.k.",
           "attention.projection_value.": "attn.v.", "output.dense.": "attn.proj."}


def reference(cls: bool):
    from transformers.models.cvt.modeling_cvt import CvtAttention

    torch.manual_seed(0)
    ref = CvtAttention(HEADS, WIDTH, 3, 1, 1, 1, 2, "dw_bn", True, 0.0, 0.0, with_cls_token=cls)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, t in ref.state_dict().items():
            if t.is_floating_point():
                noise = 0.2 * torch.randn(t.shape, generator=generator)
                t.copy_(t + noise.abs() if name.endswith("running_var") else t + noise)
    return ref


def ours(ref, side: int, cls: bool, **overrides):
    model = archspec.build_text(SPEC, {"side": side, "cls": int(cls), **overrides})
    state = {}
    for name, t in ref.state_dict().items():
        for theirs, mine in RENAMES.items():
            if name.startswith(theirs):
                state[mine + name[len(theirs):]] = t
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert missing == ["cls_token.tokens"] * cls and not unexpected  # the class token is the spec's own
    return model


def inputs(model, side: int, cls: bool, batch: int = 3):
    """(the reference's tokens [B, (1 +) side^2, C], our image [B, C, side, side]): the same
    patches, after the class token our spec holds (a `tokens` node)."""
    image = torch.randn(batch, WIDTH, side, side, generator=torch.Generator().manual_seed(2))
    patches = image.flatten(2).transpose(1, 2)  # [B, C, H, W] -> [B, HW, C]
    if not cls:
        return patches, image
    return torch.cat((model.cls_token.tokens.detach().expand(batch, 1, WIDTH), patches), dim=1), image


@pytest.mark.parametrize("side", [7, 8])
@pytest.mark.parametrize("cls", [True, False])
def test_outputs_as_hugging_faces_in_eval(side, cls):
    ref = reference(cls).eval()
    model = ours(ref, side, cls).eval()
    x, image = inputs(model, side, cls)
    with torch.no_grad():
        assert (ref(x, side, side) - model(image)).abs().max() < 1e-5


def test_training_batch_statistics_and_gradients_as_hugging_faces():
    ref = reference(True).train()
    model = ours(ref, 7, True).train()
    x, image = inputs(model, 7, True)
    theirs, mine = ref(x, 7, 7), model(image)
    assert (theirs - mine).abs().max() < 1e-5
    theirs.square().sum().backward()
    mine.square().sum().backward()
    pairs = {mine_name: dict(ref.named_parameters())[name] for name in dict(ref.named_parameters())
             for theirs_prefix, mine_prefix in RENAMES.items() if name.startswith(theirs_prefix)
             for mine_name in [mine_prefix + name[len(theirs_prefix):]]}
    largest = max(float(p.grad.abs().max()) for p in ref.parameters())  # the key bias's is rounding (softmax
    for name, p in model.named_parameters():  # shifts each row by one number): measure against the largest
        if name.startswith("cls_token"):
            continue
        assert (p.grad - pairs[name].grad).abs().max() < 1e-5 * largest, name
    running = ref.attention.convolution_projection_key.convolution_projection.normalization.running_mean
    assert torch.allclose(model.attn.conv_k.norm.running_mean, running, atol=1e-6)


@pytest.mark.parametrize("cls", [True, False])
def test_counts_and_flops_as_torchs(cls):
    ref = reference(cls).eval()
    report = archspec.check_text(SPEC, {"side": 7, "cls": int(cls)})
    attention = {row.path: row for row in report.nodes}["attn"]
    assert attention.params == sum(p.numel() for p in ref.parameters())
    x, _ = inputs(ours(ref, 7, cls), 7, cls, batch=1)
    with torch.no_grad():
        measured = count_flops(lambda: ref(x, 7, 7))
    assert attention.flops == measured, (attention.flops, measured)


def test_head_dims_scale_gives_other_outputs():
    ref = reference(True).eval()
    model = ours(ref, 7, True, scale=(WIDTH // HEADS) ** -0.5).eval()
    x, image = inputs(model, 7, True)
    with torch.no_grad():
        gap = (ref(x, 7, 7) - model(image)).abs().max()
    assert gap > 1e-2


def test_even_kernel_is_a_located_error():
    with pytest.raises(SpecError, match=r"<spec>:\d+:\d+: error: attn: kernel_size 4 is even"):
        archspec.check_text(SPEC.replace("stride_kv: 2,", "stride_kv: 2, kernel_size: 4,"))
