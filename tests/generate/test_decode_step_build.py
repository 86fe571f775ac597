"""`build` of a decoder-only spec that generates ships its decode programs: prefill.pt2 and
decode_step.pt2 (--target export), prefill.onnx and decode_step.onnx (--target onnx), the KV
cache as inputs and outputs under Hugging Face's names. Decoding greedily through the shipped files gives the
tokens the built model's own generate() gives."""

from __future__ import annotations

import json

import pytest
import torch

import archspec
from archspec.cli import main

from tests.conftest import ROOT, scratch

TINY_LM = str(ROOT / "specs" / "examples" / "tiny_lm.yaml")
SMALL = {"vocab": 97, "dim": 32, "depth": 2, "heads": 2}
SETS = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
NEW = 6


def prompt():
    """A left-padded batch of two: the second prompt is two tokens shorter."""
    ids = torch.tensor([[5, 17, 3, 44, 9], [0, 0, 61, 2, 30]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    return ids, mask


def greedy(prefill, step, ids, mask, cache_shapes):
    """Greedy decoding through the shipped programs: the prefill once, the step per new token."""
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    empty = [torch.zeros(s) for s in cache_shapes]
    logits, *cache = prefill(ids, mask, positions, *empty)
    for i in range(NEW):
        chosen = torch.as_tensor(logits)[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, chosen], dim=1)
        if i + 1 == NEW:
            return ids
        mask, positions = torch.cat([mask, torch.ones_like(chosen)], dim=1), positions[:, -1:] + 1
        logits, *cache = step(chosen, mask, positions, *[torch.as_tensor(c) for c in cache])


@pytest.fixture(scope="module")
def built(request, tmp_path_factory):
    out = scratch(request, tmp_path_factory, "lm") / "out"
    assert main(["build", TINY_LM, *SETS, "--target", "onnx", "-o", str(out)]) == 0
    model = archspec.build(TINY_LM, SMALL, seed=0).eval()  # the build's weights: seed 0
    return out, model


def test_the_export_target_ships_a_prefill_and_a_decode_step_that_decode_as_generate(built):
    from archspec.compiler.generate.step import DecodeStep

    out, model = built
    prefill = torch.export.load(out / "prefill.pt2").module()
    step = torch.export.load(out / "decode_step.pt2").module()
    ids, mask = prompt()
    shapes = DecodeStep(model).cache_shapes(2, 0)  # [B, h_kv, 0, d] per key and value
    with torch.no_grad():
        shipped = greedy(prefill, step, ids, mask, shapes)
        expected = model.generate(ids, max_new_tokens=NEW, attention_mask=mask)
    assert shipped.shape == (2, 5 + NEW) and torch.equal(shipped, expected)


def test_the_onnx_target_ships_a_decode_step_that_onnx_runtime_decodes_with(built):
    ort = pytest.importorskip("onnxruntime")
    from archspec.compiler.generate.step import DecodeStep

    out, model = built
    session = ort.InferenceSession(str(out / "decode_step.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    assert names[:4] == ["input_ids", "attention_mask", "position_ids", "past_key_values.0.key"]
    assert [o.name for o in session.get_outputs()][:2] == ["logits", "present.0.key"]
    order = DecodeStep(model).names()[0]

    def step(*args):
        return session.run(None, {n: args[order.index(n)].numpy() for n in names})

    prefill = torch.export.load(out / "prefill.pt2").module()
    ids, mask = prompt()
    with torch.no_grad():
        shipped = greedy(prefill, step, ids, mask, DecodeStep(model).cache_shapes(2, 0))
        expected = model.generate(ids, max_new_tokens=NEW, attention_mask=mask)
    assert torch.equal(shipped, expected)


def onnx_program(path, order):
    """The ONNX file at `path` in an ONNX Runtime session, called with the step's inputs in `order`."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda *args: session.run(None, {n: args[order.index(n)].numpy() for n in names})


def test_the_onnx_target_ships_a_prefill_so_onnx_runtime_alone_decodes_as_generate(built):
    pytest.importorskip("onnxruntime")
    from archspec.compiler.generate.step import DecodeStep

    out, model = built
    order = DecodeStep(model).names()[0]
    prefill, step = onnx_program(out / "prefill.onnx", order), onnx_program(out / "decode_step.onnx", order)
    ids, mask = prompt()
    with torch.no_grad():
        shipped = greedy(prefill, step, ids, mask, DecodeStep(model).cache_shapes(2, 0))
        expected = model.generate(ids, max_new_tokens=NEW, attention_mask=mask)
    assert torch.equal(shipped, expected)
    onnx = json.loads((out / "report.json").read_text())["onnx"]
    assert onnx["prefill_gap"] < 1e-4 and onnx["decode_step_gap"] < 1e-4


def test_a_spec_that_does_not_generate_ships_no_decode_step(tmp_path):
    out = tmp_path / "vit"
    assert main(["build", "vit_ti16", "--set", "img=32", "--set", "depth=1", "-o", str(out)]) == 0
    assert not (out / "decode_step.pt2").exists() and not (out / "prefill.pt2").exists()
