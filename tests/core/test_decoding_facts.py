"""What generate() and training ask of every op are facts (archspec/primitives/decoding.py):
DECODE (how the op behaves when the tokens come one at a time) and ROLE (what its output is to
a user). Every op answers both; a toy attention kind that registers its DECODE fact from its own
file (tests/plugins/toy_attention/) caches, loads a checkpoint and exports (torch.export, a dynamic batch) with no edit elsewhere, and one that does
not fails naming the op and the fact. A spec whose target side holds a node that mixes the tokens
is refused naming that node; ops after the lm head (a final soft-cap) decode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import archspec
from archspec.core.errors import SpecError
from archspec.primitives import registry
from archspec.primitives.decoding import CLASSES, DECODE, LOGITS, ROLE, Decode, Mixes, SelfCache, decode_of
from archspec.primitives.kv_cache import cached_layers, logits_output, refusal

from tests.conftest import ROOT

TOY = ROOT / "tests" / "plugins" / "toy_attention"

LM = """
archspec: 1
name: small_lm
params: {middle: causal, cap: false}
dims:
  L: [1, 64]
inputs:
  ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 50, dim: 32, pos: learned, max_len: 64}}
  - {id: a0, attention: {kind: causal, heads: 2}}
  - {id: a1, attention: {kind: "${middle}", heads: 2}}
  - {id: mlp, mlp: {ratio: 2}}
  - {id: norm, norm: {}}
  - {id: head, head: {kind: lm, tie: embed}}
  - {id: squash, if: "${cap}", scale: {factor: 0.1}}
  - {id: tanh, if: "${cap}", activation: {fn: tanh}}
  - {id: logits, if: "${cap}", scale: {factor: 10.0}}
"""


def uncached_greedy(model, ids, new: int):
    with torch.no_grad():
        for _ in range(new):
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def test_every_op_answers_decode_and_role():
    missing = [(op.label, fact.name) for op in registry.ops() for fact in (DECODE, ROLE)
               if op not in fact.registered()]
    assert not missing, f"ops without a registered fact: {missing}"
    for op in registry.ops():
        decode = DECODE.of(op)
        assert isinstance(decode, Decode) or callable(decode), op.label
    assert ROLE.of(registry.op("head", "lm")) == LOGITS
    assert ROLE.of(registry.op("head", "classify")) == CLASSES
    assert isinstance(DECODE.of(registry.op("attention", "global")), Mixes)
    graph = archspec.check_text(LM).graph  # causal attention caches unless one of its score parts refuses
    assert isinstance(decode_of(graph.record("a0")), SelfCache)
    parted = archspec.check_text(LM.replace("{kind: causal, heads: 2}", "{kind: causal, heads: 2, scores: [talking_heads]}"))
    why = decode_of(parted.graph.record("a0"))
    assert isinstance(why, Mixes) and why.why.startswith("its score part talking_heads")


def test_a_sliding_layer_keeps_its_window_from_its_fact():
    mistral = archspec.check(str(ROOT / "specs" / "mistral.yaml")).graph
    assert {layer.window for layer in cached_layers(mistral)} == {8}


def test_attention_that_sees_later_tokens_decodes_without_a_cache_naming_the_node(caplog):
    """No cache (refusal names the node), so generate runs the whole sequence each step, as
    forward does, and says why on the archspec logger; compile and padded prompts need a cache."""
    graph = archspec.check_text(LM, {"middle": "global"}).graph
    assert refusal(graph) == ("a1", DECODE.of(registry.op("attention", "global")).why)
    model = archspec.build_text(LM, {"middle": "global"}, seed=0).eval()
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with caplog.at_level("WARNING", logger="archspec"):
        got = model.generate(ids, max_new_tokens=4)
    assert any("decodes without a cache ('a1': it lets a token see later tokens" in r.getMessage()
               for r in caplog.records)
    with torch.no_grad():
        expected = ids
        for _ in range(4):  # greedy over forward, the whole sequence each step
            expected = torch.cat([expected, model(expected)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(got, expected)
    with pytest.raises(ValueError, match="decodes without a cache .* leave it out"):
        model.generate(ids, max_new_tokens=2, compile=True)
    with pytest.raises(ValueError, match="takes prompts of one length"):
        model.generate(ids, max_new_tokens=2, attention_mask=torch.tensor([[0, 1, 1], [1, 1, 1]]))


def test_a_fixed_table_of_tokens_on_the_target_side_is_refused():
    """An add of a learned [1, 8, 32] table to the tokens: generate brings one token at a time, so
    the table cannot line up (before, generate ran it and gave other tokens than forward)."""
    text = LM.replace("dims:\n  L: [1, 64]\n", "").replace("[B, L]", "[B, 8]").replace(
        "  - {id: a0,", "  - {id: table, param: {shape: [8, 32]}}\n  - {id: placed, add: {}, from: [embed, table]}\n"
                       "  - {id: a0,")
    graph = archspec.check_text(text).graph
    node, why = refusal(graph)
    assert node == "placed" and "'table', 8 tokens made apart from the target" in why
    assert cached_layers(graph) == []


def test_ops_after_the_lm_head_decode():
    """A final soft-cap (Gemma 2): scale, tanh, scale after the lm head; generate reads the capped logits."""
    graph = archspec.check_text(LM, {"cap": True}).graph
    assert logits_output(graph) == (0, "head") and refusal(graph) is None
    model = archspec.build_text(LM, {"cap": True}, seed=3)
    model.eval()
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    assert torch.equal(model.generate(ids, max_new_tokens=6), uncached_greedy(model, ids, 6))


TOY_RUN = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import toy_attention  # registers the two kinds, as an installed plugin's entry point would
import archspec
from archspec.compiler.backends.export import export_program
text = sys.argv[2]
model = archspec.build_text(text.replace("KIND", "toy_causal"), seed=1).eval()
ids = torch.tensor([[3, 1, 4, 1, 5], [2, 7, 1, 8, 2]])
out = model.generate(ids, max_new_tokens=5)
with torch.no_grad():
    plain = ids
    for _ in range(5):
        plain = torch.cat([plain, model(plain)[:, -1].argmax(-1, keepdim=True)], dim=1)
layers = [name for name, m in model.named_modules() if getattr(m, "takes_cache", False)]
batch = torch.export.Dim("batch", min=1, max=8)
program = torch.export.export(model, (ids,), dynamic_shapes=({0: batch},))
wider = torch.randint(0, 50, (3, 5))
with torch.no_grad():
    exported = torch.equal(program.module()(wider), model(wider))
reloaded = archspec.build_text(text.replace("KIND", "toy_causal"), seed=2, weights=model.state_dict()).eval()
with torch.no_grad():
    loaded = torch.equal(reloaded(wider), model(wider))
found = {"same": torch.equal(out, plain), "layers": layers, "exported": exported, "loaded": loaded}
forgetful = text.replace("KIND", "toy_forgetful")
try:
    archspec.build_text(forgetful).generate(ids, max_new_tokens=2)
except Exception as exc:
    found["forgetful"] = f"{type(exc).__name__}: {exc}"
features = "archspec: 1\\nname: f\\ninputs:\\n  x: [B, 8, 32]\\ngraph:\\n  - attention: {kind: toy_forgetful, heads: 2}\\n"
try:  # token features in, not ids: generate's DECODE is not asked, loading asks RESAMPLE
    archspec.build_text(features, weights=archspec.build_text(features).state_dict())
except Exception as exc:
    found["forgetful_weights"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(found))
"""


def test_a_toy_attention_kind_caches_with_its_own_fact_or_fails_naming_it():
    text = LM.replace('kind: "${middle}"', "kind: KIND")
    result = subprocess.run([sys.executable, "-c", TOY_RUN, str(TOY), text], capture_output=True, text=True,
                            cwd=ROOT, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["same"] and len(found["layers"]) == 2 and found["exported"] and found["loaded"]
    assert "attention/toy_forgetful has no DECODE registered" in found["forgetful"]
    assert "attention/toy_forgetful has no RESAMPLE registered" in found["forgetful_weights"]
