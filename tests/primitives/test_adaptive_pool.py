"""pool with `output`: adaptive pooling to a fixed grid from any input size (torch's
adaptive_avg_pool2d / adaptive_max_pool2d), the word the UperNet trial wrote 17 nodes for. Against
torch's functions; a pyramid pooling module written with it against Hugging Face's
UperNetPyramidPoolingModule with the same (perturbed) weights; one program for every image size
under a dynamic export; ONNX Runtime; and the located errors for a pool with neither or both."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.compiler.backends.export import SizeRange, example_inputs, export_program

POOLED = """
name: pooled
params: {img: 13, fn: mean, output: 6}
inputs:
  image: [B, 8, img, img]
graph:
  - {id: pooled, pool: {fn: "${fn}", output: "${output}"}}
"""


@pytest.mark.parametrize("fn, torch_fn", [("mean", F.adaptive_avg_pool2d), ("max", F.adaptive_max_pool2d)])
@pytest.mark.parametrize("output", [1, 6, [2, 5]])
def test_it_is_torchs_adaptive_pooling(fn, torch_fn, output):
    model = archspec.build_text(POOLED, {"fn": fn, "output": output}, seed=0).eval()
    x = torch.randn(2, 8, 13, 13, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(x), torch_fn(x, output))
    h, w = (output, output) if isinstance(output, int) else output
    assert [str(d) for d in archspec.check_text(POOLED, {"fn": fn, "output": output}).graph.type_of("pooled").shape] \
        == ["B", "8", str(h), str(w)]


def test_on_a_token_grid_it_gives_tokens():
    text = POOLED.replace("image: [B, 8, img, img]", "image: [B, 8, img, img]\n").replace(
        "  - {id: pooled,", "  - {id: tokens, to_tokens: {}}\n  - {id: pooled,")
    model = archspec.build_text(text, {"output": [2, 3]}, seed=0).eval()
    x = torch.randn(2, 8, 13, 13, generator=torch.Generator().manual_seed(2))
    want = F.adaptive_avg_pool2d(x, (2, 3)).flatten(2).transpose(1, 2)  # [B, 6, 8]
    with torch.no_grad():
        assert torch.equal(model(x), want)


PPM = """
name: ppm
params: {img: 13, channels: 8}
inputs:
  image: [B, 16, img, img]
graph:
""" + "".join(f"""  - {{id: pool{i}, from: image, pool: {{fn: mean, output: {scale}}}}}
  - {{id: conv{i}, conv: {{out: "${{channels}}", kernel: 1, bias: false}}}}
  - {{id: norm{i}, norm: {{kind: batch}}}}
  - {{id: act{i}, activation: {{fn: relu}}}}
  - {{id: up{i}, from: [act{i}, image], resize: {{like: true, mode: bilinear, align_corners: false}}}}
""" for i, scale in enumerate((1, 2, 3, 6))) + """  - {id: joined, from: [up0, up1, up2, up3], concat: {along: channels}}
"""


def test_a_pyramid_pooling_module_is_hugging_faces():
    from transformers.models.upernet.modeling_upernet import UperNetPyramidPoolingModule

    reference = UperNetPyramidPoolingModule((1, 2, 3, 6), in_channels=16, channels=8, align_corners=False)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for tensor in reference.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.3 * torch.randn(tensor.shape, generator=generator).abs())  # running_var stays > 0
    reference.train()
    reference(torch.randn(4, 16, 13, 13, generator=generator))  # running statistics of their own
    reference.eval()
    state = {}
    for i in range(4):
        state[f"conv{i}.conv.weight"] = reference.state_dict()[f"{i}.1.conv.weight"]
        for key in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
            state[f"norm{i}.{key}"] = reference.state_dict()[f"{i}.1.batch_norm.{key}"]
    model = archspec.build_text(PPM, seed=0).eval()
    model.load_state_dict(state)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())
    x = torch.randn(2, 16, 13, 13, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = torch.cat(reference(x), dim=1)  # [B, 32, 13, 13]
        assert (model(x) - want).abs().max() < 1e-5


def test_one_program_serves_every_image_size():
    report = archspec.check_text(PPM)
    model = archspec.build_text(PPM, seed=0).eval()
    program = export_program(model, report.graph, batch_range=(1, 4), size_range=SizeRange(8, 40, 1))
    for side in (8, 13, 29, 40):
        eager = archspec.build_text(PPM, {"img": side}, seed=0).eval()
        eager.load_state_dict(model.state_dict())
        (x,) = example_inputs(report.graph, batch=2, size=side)
        with torch.no_grad():
            assert (program.module()(x) - eager(x)).abs().max() < 1e-5


def test_onnx_runtime_gives_the_same(tmp_path):
    pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.onnx import export_onnx

    report = archspec.check_text(PPM)
    model = archspec.build_text(PPM, seed=0).eval()
    result = export_onnx(model, report.graph, str(tmp_path / "ppm.onnx"), verify=True)
    assert result.max_difference is not None and result.max_difference < 1e-4, result.summary()


@pytest.mark.parametrize("pool, says, column", [
    ("{fn: mean}", "pool needs a kernel (a window), or an output size (adaptive pooling)", "kernel"),
    ("{fn: mean, output: 2, kernel: 2}", "`output` (adaptive pooling) takes no kernel", "kernel"),
    ("{fn: max, output: 2, stride: 1}", "`output` (adaptive pooling) takes no stride", "stride"),
])
def test_neither_or_both_is_a_located_error(pool, says, column):
    text = POOLED.replace('{fn: "${fn}", output: "${output}"}', pool)
    with pytest.raises(archspec.SpecError) as error:
        archspec.check_text(text)
    message = str(error.value)
    assert says in message and "pooled" in message
