"""Named outputs (issue 39): a spec with several outputs returns, in eager, a tuple that also
answers by name (Hugging Face's ModelOutput behaviour); torch.export, torch.compile and the
ONNX build keep the plain tuple; the standalone model.py answers by name too
(test_model_py_named_outputs.py)."""

from __future__ import annotations

import pickle

import pytest
import torch

import archspec
from archspec.cli import EXIT_OK, main
from archspec.compiler.model import ModelOutput

TINY_BERT = {"depth": 1, "dim": 32, "heads": 2, "ffn": 64, "vocab": 100, "context": 16}


@pytest.fixture(scope="module")
def bert():
    model = archspec.build("bert_base", TINY_BERT).eval()
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
    return model, (ids, torch.zeros_like(ids), torch.ones_like(ids))


def test_several_outputs_answer_by_name_index_and_unpacking(bert):
    model, inputs = bert
    with torch.no_grad():
        out = model(*inputs)
    assert isinstance(out, ModelOutput) and isinstance(out, tuple) and len(out) == 2
    hidden, pooled = out
    assert out["last_hidden_state"] is out.last_hidden_state is out[0] is hidden
    assert out["pooler_output"] is out.pooler_output is out[-1] is pooled
    assert out.keys() == ("last_hidden_state", "pooler_output") and "pooler_output" in out
    assert [n for n, _ in out.items()] == list(out.keys()) and type(out.to_tuple()) is tuple
    assert list(hidden.shape) == [2, 8, 32] and "last_hidden_state=Tensor[2, 8, 32]" in repr(out)
    with pytest.raises(KeyError, match="outputs are last_hidden_state, pooler_output"):
        out["logits"]
    with pytest.raises(AttributeError):
        out.logits
    again = pickle.loads(pickle.dumps(out))
    assert again.keys() == out.keys() and torch.equal(again.pooler_output, pooled)
    leaves, spec = torch.utils._pytree.tree_flatten(out)  # DDP and FSDP see through it
    assert len(leaves) == 2 and torch.utils._pytree.tree_unflatten(leaves, spec).keys() == out.keys()


def test_a_single_output_stays_a_tensor():
    model = archspec.create_model("vit_ti16", img_size=32, depth=1)
    assert isinstance(model(torch.zeros(1, 3, 32, 32)), torch.Tensor)


def test_export_keeps_the_plain_tuple(bert):
    model, inputs = bert
    program = torch.export.export(model, inputs)
    with torch.no_grad():
        exported, eager = program.module()(*inputs), model(*inputs)
    assert type(exported) is tuple and torch.allclose(exported[1], eager.pooler_output, atol=1e-5)


def test_the_onnx_build_of_a_named_output_spec_passes(tmp_path, capsys):
    sets = [f"{k}={v}" for k, v in TINY_BERT.items()]
    code = main(["build", "bert_base", "--target", "onnx", "-o", str(tmp_path), *(a for s in sets for a in ("--set", s))])
    assert code == EXIT_OK, capsys.readouterr().err
    assert (tmp_path / "model.onnx").exists() and (tmp_path / "model.py").exists()
