"""Named outputs in the standalone model.py (compiler/backends/source.py): a spec with several
outputs gives, in eager and without archspec installed, the built module's ModelOutput (a tuple
that also answers by name, picklable, seen through by pytree), and the plain tuple under
torch.export, so exports of model.py keep working; a spec with one output is unchanged."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

import archspec
from archspec.compiler.backends.source import standalone_source

from tests.conftest import NO_ARCHSPEC

TINY_BERT = {"depth": 1, "dim": 32, "heads": 2, "ffn": 64, "vocab": 100, "context": 16}

SCRIPT = textwrap.dedent("""
    import pickle, torch, model
    cls = model.{cls}
    standalone = cls().eval()
    standalone.load_state_dict(torch.load("weights.pt", weights_only=True))
    inputs = torch.load("inputs.pt")
    with torch.no_grad():
        out = standalone(*inputs)
    assert isinstance(out, tuple) and type(out).__name__ == "ModelOutput", type(out)
    hidden, pooled = out  # unpacks as a tuple
    assert out["pooler_output"] is out.pooler_output is pooled and out.last_hidden_state is hidden
    assert pickle.loads(pickle.dumps(out)).keys() == out.keys()
    leaves, spec = torch.utils._pytree.tree_flatten(out)
    assert len(leaves) == 2 and torch.utils._pytree.tree_unflatten(leaves, spec).keys() == out.keys()
    program = torch.export.export(standalone, tuple(inputs))
    exported = program.module()(*inputs)
    assert type(exported) is tuple, type(exported)
    torch.save({{"keys": out.keys(), "eager": tuple(out), "exported": exported}}, "answers.pt")
""")


def test_model_py_of_a_named_output_spec_answers_by_name_and_exports_a_tuple(tmp_path):
    model = archspec.build("bert_base", TINY_BERT, seed=1).eval()
    (tmp_path / "model.py").write_text(standalone_source(model, "bert_base", "bert_base"))
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
    inputs = (ids, torch.zeros_like(ids), torch.ones_like(ids))
    torch.save(inputs, tmp_path / "inputs.pt")
    script = NO_ARCHSPEC + SCRIPT.format(cls=type(model).__name__)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    answers = torch.load(tmp_path / "answers.pt", weights_only=False)
    with torch.no_grad():
        expected = model(*inputs)
    assert answers["keys"] == expected.keys() == ("last_hidden_state", "pooler_output")
    for got, exported, want in zip(answers["eager"], answers["exported"], expected):
        assert torch.allclose(got, want, atol=1e-6) and torch.allclose(exported, want, atol=1e-5)


def test_model_py_of_a_one_output_spec_has_no_named_outputs():
    model = archspec.create_model("vit_ti16", img_size=32, depth=1)
    source = standalone_source(model, "vit_ti16", "vit_ti16")
    assert "class ModelOutput" not in source and "_output_names = " not in source
