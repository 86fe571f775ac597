"""attention kind=nystrom against Hugging Face's NystromformerAttention (self-attention through
segment-mean landmarks, the iterative pseudo-inverse, the values' depthwise conv, then the output
dense and a post-norm), every parameter perturbed: the landmark form, the plain form (as many
landmarks as tokens), both first scales of the inverse, a batch of several (Hugging Face's default
scale is the whole batch's), a padding mask; FLOPs as torch counts them; one exported program and
ONNX Runtime; and the located errors (the Nystromformer trial wrote 70 nodes a layer by hand)."""

from __future__ import annotations

import pytest
import torch

import archspec

pytest.importorskip("transformers")

SPEC = """
name: nystrom_layer
params: {tokens: 16, landmarks: 4, conv: 5, init: original}
inputs:
  x: [B, tokens, 32]
graph:
  - id: attn
    attention: {kind: nystrom, heads: 4, landmarks: "${landmarks}", conv_kernel: "${conv}", pinv_init: "${init}",
                norm: post, norm_eps: 1.0e-5}
"""

MASKED = SPEC.replace("  x: [B, tokens, 32]", "  x: [B, tokens, 32]\n  attention_mask: {shape: [B, tokens], dtype: int64}").replace(
    "  - id: attn", "  - id: attn\n    from: [x, attention_mask]").replace("norm_eps: 1.0e-5}", "norm_eps: 1.0e-5, padding_mask: true}")


def reference(tokens: int, landmarks: int, conv: int | None, exact: bool, monkeypatch=None):
    from transformers import NystromformerConfig
    from transformers.models.nystromformer.modeling_nystromformer import NystromformerAttention

    config = NystromformerConfig(hidden_size=32, num_attention_heads=4, segment_means_seq_len=tokens,
                                 num_landmarks=landmarks, conv_kernel_size=conv, layer_norm_eps=1e-5,
                                 inv_coeff_init_option=exact, attention_probs_dropout_prob=0.0,
                                 hidden_dropout_prob=0.0)
    if exact:  # Hugging Face reads the option by item, which its config class does not answer
        config.inv_init_coeff_option = "exact"
        monkeypatch.setattr(NystromformerConfig, "__getitem__", lambda self, key: getattr(self, key), raising=False)
    module = NystromformerAttention(config).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return module


def ours_from(ref, overrides, text=SPEC):
    model = archspec.build_text(text, overrides, seed=0).eval()
    s, o = ref.self, ref.output
    state = {"attn.qkv.weight": torch.cat([s.query.weight, s.key.weight, s.value.weight]),
             "attn.qkv.bias": torch.cat([s.query.bias, s.key.bias, s.value.bias]),
             "attn.proj.weight": o.dense.weight, "attn.proj.bias": o.dense.bias,
             "attn.norm.weight": o.LayerNorm.weight, "attn.norm.bias": o.LayerNorm.bias}
    if s.conv_kernel_size is not None:
        state["attn.conv.weight"] = s.conv.weight
    model.load_state_dict(state)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    return model


@pytest.mark.parametrize("tokens, landmarks, conv, init", [
    (16, 4, 5, "original"), (32, 8, 3, "original"), (24, 3, 7, "original"), (16, 4, 5, "exact"),
    (16, 16, 5, "original"),  # as many landmarks as tokens: plain softmax attention
], ids=["16-4-k5", "32-8-k3", "24-3-k7", "exact-init", "plain"])
def test_it_is_hugging_faces_nystromformer_attention(tokens, landmarks, conv, init, monkeypatch):
    ref = reference(tokens, landmarks, conv, init == "exact", monkeypatch)
    assert ref.self.init_option == init
    ours = ours_from(ref, {"tokens": tokens, "landmarks": landmarks, "conv": conv, "init": init})
    x = torch.randn(3, tokens, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(x)[0]  # the whole batch at once, as Hugging Face's first scale reads it
        got = ours(x)
    assert (got - want).abs().max() < 1e-5


def test_a_padding_mask_hides_keys_as_hugging_faces_additive_mask():
    ref = reference(16, 4, 5, False)
    ours = ours_from(ref, {}, MASKED)
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 11:] = 0
    additive = (1 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min  # [B, 1, 1, N]
    with torch.no_grad():
        want = ref(x, attention_mask=additive)[0]
        got = ours(x, mask)
        assert (got - want).abs().max() < 1e-5
        assert (ours(x, torch.ones_like(mask)) - got).abs().max() > 1e-3  # the mask matters


def test_flops_are_torchs_count():
    from torch.utils.flop_counter import FlopCounterMode

    for overrides in ({}, {"landmarks": 16}, {"conv": None, "tokens": 32, "landmarks": 8}):
        report = archspec.check_text(SPEC, overrides)
        model = archspec.build_text(SPEC, overrides, seed=0).eval()
        x = torch.randn(1, report.graph.type_of("x").shape[1], 32)
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(x)
        assert report.flops == counter.get_total_flops(), overrides


def test_export_and_onnx_runtime_give_the_same(tmp_path):
    pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.export import example_inputs, export_program
    from archspec.compiler.backends.onnx import export_onnx

    report = archspec.check_text(SPEC, {"init": "exact"})
    model = archspec.build_text(SPEC, {"init": "exact"}, seed=0).eval()
    program = export_program(model, report.graph, batch_range=(1, 4))
    (x,) = example_inputs(report.graph, batch=3)
    with torch.no_grad():
        assert (program.module()(x) - model(x)).abs().max() < 1e-5
    result = export_onnx(model, report.graph, str(tmp_path / "nystrom.onnx"), verify=True)
    assert result.max_difference is not None and result.max_difference < 1e-4, result.summary()


@pytest.mark.parametrize("overrides, says, field", [
    ({"landmarks": 5}, "5 landmarks do not divide the 16 tokens into equal segments", "landmarks"),
    ({"conv": 4}, "conv_kernel 4 is even", "conv_kernel"),
])
def test_landmarks_that_do_not_divide_and_an_even_conv_are_located_errors(overrides, says, field):
    with pytest.raises(archspec.SpecError) as error:
        archspec.check_text(SPEC, overrides)
    message = str(error.value)
    assert says in message and "attn" in message


@pytest.mark.parametrize("option, says", [("rope_theta: 10000.0", "rotary positions"),
                                          ("kv_heads: 2", "grouped key/value heads"),
                                          ("scores: [talking_heads]", "score parts")])
def test_what_nystromformer_has_not_is_refused(option, says):
    with pytest.raises(archspec.SpecError, match=f"nystrom attention takes no {says}"):
        archspec.check_text(SPEC.replace("norm: post,", f"norm: post, {option},"))


def test_a_sequence_of_any_length_is_refused_with_why():
    text = SPEC.replace("x: [B, tokens, 32]", "x: [B, L, 32]").replace("name: nystrom_layer", "name: nystrom_layer\ndims: {L: [1, 64]}")
    with pytest.raises(archspec.SpecError, match="nystrom attention needs a fixed number of tokens"):
        archspec.check_text(text)
