"""Where the mlp drops out in training: `dropout` after fc2 and, unless `hidden_dropout` says
otherwise, after the activation too (timm's Mlp drop1 and drop2, torch's Transformer, T5);
`hidden_dropout: 0.0` drops once, after fc2, as Hugging Face's GPT-2, BERT and ALBERT. The
StarCoder2 user trial found the shipped gpt2 spec dropping the 3072-wide activations too: the
same network in eval, another in training. opt.yaml had no dropout at all, where OPTConfig's
default drops 0.1 after the attention and after fc2.

Each against its reference in train mode from the same seed (one dropout call each where they
agree, so the masks are the same draws)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import archspec

from tests.conftest import ROOT

MLP = """
archspec: 1
name: m
inputs:
  x: [B, 5, 16]
graph:
  - {id: mlp, mlp: {hidden: 64, act: gelu_tanh, norm: none, residual: false, dropout: 0.3 HIDDEN}}
"""


def built(hidden: str):
    model = archspec.build_text(MLP.replace("HIDDEN", hidden), seed=0).train()
    return model, model.get_submodule("mlp")


def test_hidden_dropout_zero_drops_once_as_hugging_faces_gpt2_mlp():
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

    model, mlp = built(", hidden_dropout: 0.0")
    ref = GPT2MLP(64, transformers.GPT2Config(n_embd=16, resid_pdrop=0.3, activation_function="gelu_new")).train()
    with torch.no_grad():  # Conv1D keeps [in, out]
        ref.c_fc.weight.copy_(mlp.fc1.weight.t()), ref.c_fc.bias.copy_(mlp.fc1.bias)
        ref.c_proj.weight.copy_(mlp.fc2.weight.t()), ref.c_proj.bias.copy_(mlp.fc2.bias)
    x = torch.randn(2, 5, 16)
    torch.manual_seed(7)
    ours = model(x)
    torch.manual_seed(7)
    assert torch.allclose(ours, ref(x), atol=1e-6)


def test_by_default_it_drops_twice_as_timms_mlp():
    timm = pytest.importorskip("timm")
    model, mlp = built("")
    ref = timm.layers.Mlp(16, 64, act_layer=lambda: torch.nn.GELU(approximate="tanh"), drop=0.3).train()
    ref.load_state_dict({k: v for k, v in mlp.state_dict().items() if k.startswith(("fc1", "fc2"))})
    x = torch.randn(2, 5, 16)
    torch.manual_seed(7)
    ours = model(x)
    torch.manual_seed(7)
    assert torch.allclose(ours, ref(x), atol=1e-6)
    torch.manual_seed(7)
    once = F.dropout(mlp.fc2(F.gelu(mlp.fc1(x), approximate="tanh")), 0.3)
    assert not torch.allclose(ours, once)  # the two placements differ, so the tests can tell them apart


@pytest.mark.parametrize("spec", ["gpt2", "bert_base", "albert_base", "opt"])
def test_the_shipped_hugging_face_specs_drop_once_in_their_mlps(spec):
    overrides = {"depth": 1} if spec == "gpt2" else {"dropout": 0.1} if spec == "albert_base" else {}
    model = archspec.build(str(ROOT / "specs" / f"{spec}.yaml"), overrides)
    mlps = [m for name, m in model.named_modules() if name.endswith("mlp") and hasattr(m, "hidden_drop")]
    assert mlps and all(m.hidden_drop is None and m.drop is not None for m in mlps)
