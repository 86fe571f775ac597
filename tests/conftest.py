"""Shared fixtures: the shipped specs, and one built model per spec reused by a test class."""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.yaml"))
EXAMPLES = sorted((ROOT / "specs" / "examples").glob("*.yaml"))
ALL_SPECS = SPECS + EXAMPLES

# Prepended to a script run in a fresh interpreter: a loader that refuses archspec's packages, to
# prove an artifact (model.pt2, model.py, a TensorRT program) does not need them.
NO_ARCHSPEC = textwrap.dedent("""
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("archspec", "compiler"):
                raise ImportError(f"{name} must not be needed")
            return None
    sys.meta_path.insert(0, Block())
""")


def spec_id(path: Path) -> str:
    return path.stem if path.parent.name == "specs" else f"examples/{path.stem}"


def perturb_constants(model, seed: int = 0):
    """Noise on every parameter whose values are all equal (LayerNorm 1/0, zero biases,
    zero-initialised res-post norms, logit scales), so that the comparison sees them."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            flat = p.detach().flatten()
            if bool((flat == flat[0]).all()):
                p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return model


def run_capturing(model, args, names=None, grad: bool = False):
    """(the model's output, {node path: that node's output}) for the named IR nodes (default:
    every node with a module), read with forward hooks on the modules at their paths: the
    module tree is the call tree, so each node's module computes exactly that node. Without
    autograd unless `grad`."""
    import torch

    paths = names if names is not None else [p for p, _ in model.named_modules()
                                              if p and p in model.meta["archspec"]["node_paths"]]
    captured, hooks = {}, []
    for path in paths:
        def keep(module, inputs, output, path=path):
            captured[path] = output
        hooks.append(model.get_submodule(path).register_forward_hook(keep))
    try:
        with torch.set_grad_enabled(grad):
            out = model(*args)
    finally:
        for hook in hooks:
            hook.remove()
    missing = set(paths) - set(captured)
    assert not missing, f"no output seen for {sorted(missing)}"
    return out, captured


@functools.lru_cache(maxsize=1)
def built(path: str):
    """(report, GraphModule) of a spec, built once per spec (the last one is cached)."""
    import archspec
    from archspec.compiler.lower import lower

    report = archspec.check(path)
    return report, lower(report.graph, seed=0)


@pytest.fixture(scope="class", params=ALL_SPECS, ids=spec_id)
def spec_path(request) -> str:
    return str(request.param)
