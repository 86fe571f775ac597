"""Per-op facts (archspec/primitives/facts.py; the backend facts in compiler/facts.py): every
registered op and kind has each backend fact, a fact is registered once, a missing one fails
naming the op; a toy op that changes the token grid (tests/plugins/grid_pool/) exports with a
dynamic image size through its own TOKEN_GRID, and the same op without it fails naming it.

The toy ops run in a fresh interpreter, so that they never join this process's registry."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from archspec.compiler.facts import BACKEND_FACTS, KEEPS, TOKEN_GRID
from archspec.compiler.lowering_rules import load_lowerings
from archspec.core.errors import InternalError
from archspec.primitives import registry
from archspec.primitives.facts import Fact
from archspec.primitives.registry import RegistryError

from tests.conftest import ROOT

TOY = ROOT / "tests" / "plugins" / "grid_pool"


@pytest.mark.parametrize("fact", BACKEND_FACTS, ids=lambda f: f.name)
def test_every_op_and_kind_has_every_backend_fact(fact):
    load_lowerings()
    import archspec.compiler.backends.onnx_fusions  # noqa: F401  (the ONNX backend registers ONNX_FUSION)

    missing = [op.label for op in registry.ops() if op not in fact.registered()]
    assert registry.ops() and not missing, f"{fact.name} missing for {missing}"


def test_onnx_fusion_is_the_onnx_backends_word_not_the_op_files():
    """ONNX_FUSION of a built-in op is registered from compiler/backends/onnx_fusions.py; no op's
    torch file gives `fusion=` (a plugin, with no line there, may)."""
    from archspec.compiler.backends import onnx_fusions
    from archspec.compiler.facts import ONNX_FUSION

    givers = [str(path.relative_to(ROOT)) for path in (ROOT / "compiler" / "modules").rglob("*.py")
              if "fusion=" in path.read_text()]
    assert not givers, givers
    builtins = [op for op in registry.ops() if op.plugin is None]
    table = set(onnx_fusions.FUSES) | set(onnx_fusions.NO_FUSION)
    assert len(onnx_fusions.NO_FUSION) == len(set(onnx_fusions.NO_FUSION)) and not set(onnx_fusions.FUSES) & set(
        onnx_fusions.NO_FUSION)
    assert set(builtins) == table, sorted(op.label for op in set(builtins) ^ table)
    fused = {op.label for op, fusion in ONNX_FUSION.registered().items() if fusion is not None}
    kinds = ("alibi", "causal", "channel", "class", "convolutional", "cross", "differential", "global", "latent",
             "linear_sra", "pooled", "shifted", "sliding", "sra", "window", "xca")
    assert fused == {"attention/" + k for k in kinds} | {"mlp"}


def test_a_fact_is_registered_once():
    fact = Fact("EXAMPLE", "an example", "a test")
    op = registry.op("add")
    fact.register(op, 1)
    with pytest.raises(RegistryError, match="EXAMPLE of add is registered twice"):
        fact.register(op, 2)
    assert fact.of(op) == 1 and fact.registered() == {op: 1}


def test_a_missing_fact_names_the_op_the_fact_and_where_to_register_it():
    fact = Fact("EXAMPLE", "an example", "the op's own file")
    op = registry.op("merge", "conv")
    with pytest.raises(InternalError, match="merge/conv has no EXAMPLE") as caught:
        fact.of(op)
    assert "EXAMPLE.register(op, value) in the op's own file" in caught.value.hint
    assert fact.get(op, "absent") == "absent"


def test_the_grid_changing_ops_say_how():
    load_lowerings()
    changing = {op.label for op, rule in TOKEN_GRID.registered().items() if rule != KEEPS}
    # and the tensor ops that regroup axes
    assert changing >= {"patchify", "merge/conv", "merge/concat", "conv", "upsample", "pixel_shuffle"}
    assert all(callable(TOKEN_GRID.registered()[op]) for op in registry.ops() if op.label in changing)


TOY_RUN = """
import json, sys
import torch
import archspec
sys.path.insert(0, {toy!r})
import grid_pool, grid_pool_without_grid
from archspec.compiler.backends.export import SizeRange, example_inputs, export_program, grids_for, max_abs_difference

SPEC = '''
name: pooled
inputs:
  image: [B, 3, 64, 64]
graph:
  - id: patch_embed
    patchify: {{patch: 8, dim: 16, pos: none}}
  - id: pool
    OP: {{}}
  - id: mlp
    mlp: {{ratio: 2, dwconv: true}}
  - id: head
    head: {{kind: classify, classes: 3}}
'''
out = {{}}
for op in ("grid_pool", "grid_pool_without_grid"):
    text = SPEC.replace("OP", op)
    graph = archspec.check_text(text).graph
    gm = archspec.build_text(text, seed=0).eval()
    try:
        program = export_program(gm, graph, size_range=SizeRange(64, 128, 32))
    except Exception as exc:
        out[op] = {{"error": type(exc).__name__, "message": str(exc)}}
        continue
    gaps = []
    for size in (96, 128):
        eager = archspec.build_text(text.replace("64, 64", f"{{size}}, {{size}}"), seed=0).eval()
        eager.load_state_dict(gm.state_dict())
        (x,) = example_inputs(graph, batch=3, size=size)
        with torch.no_grad():
            gaps.append(max_abs_difference(program.module()(x), eager(x)))
    out[op] = {{"gaps": gaps, "grid": list(grids_for(graph, (96, 128))["pool"])}}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def toy():
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(TOY_RUN.format(toy=str(TOY)))],
                            capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_an_op_that_registers_its_grid_exports_with_a_dynamic_size(toy):
    assert toy["grid_pool"]["grid"] == [6, 8]  # 96x128 -> patches 12x16 -> pooled 6x8
    assert max(toy["grid_pool"]["gaps"]) < 1e-4


def test_the_same_op_without_its_grid_fails_naming_it(toy):
    failure = toy["grid_pool_without_grid"]
    assert failure["error"] == "InternalError"
    assert "grid_pool_without_grid has no TOKEN_GRID" in failure["message"] and "pool" in failure["message"]
