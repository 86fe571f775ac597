"""Shared fixtures: the shipped specs, and one built model per spec reused by a test class."""

from __future__ import annotations

import functools
import os
import re
import shutil
import textwrap
from pathlib import Path

import pytest

# Under pytest-xdist (README's test command runs two workers, one per core of CI's machine) each
# worker computes on one thread: two workers of two threads each on two cores wait on each other.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

# A hint searches sizes and values for 0.2 s; on a busy machine (two workers, other jobs) it finds
# fewer, and the tests that read a hint's sizes would depend on the load.
os.environ.setdefault("ARCHSPEC_HINT_SECONDS", "5")

# Compiled decode steps are not kept on disk (compiler/generate/kept_steps.py) unless a test asks:
# each test that compiles one compiles it, and none writes to the user's ~/.cache.
os.environ["ARCHSPEC_CACHE"] = "off"

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")  # what torchrun sets
SPECS = sorted((ROOT / "specs").glob("*.yaml"))
EXAMPLES = sorted((ROOT / "specs" / "examples").glob("*.yaml"))
ALL_SPECS = SPECS + EXAMPLES

# Wider or deeper copies of a smaller shipped spec, made of the same primitives and kinds
# (tests/parity/test_shipped.py checks every one against its reference at full size, and
# test_larger_siblings_use_only_what_their_sibling_uses that they add nothing): the tests marked
# `pipeline` (export, ONNX, TensorRT coverage, compile, standalone source of every spec) run
# them only in the slow tier, their smaller sibling in every run.
LARGER_SIBLINGS = {"swin_s": "swin_t", "swin_b": "swin_t", "vit_s16": "vit_ti16", "vit_b16": "vit_ti16",
                   "pvt_v2_b2": "pvt_v2_b0", "mae_b16": "mae_ti16",
                   "beit_b16": "beit_ti16", "t5_small": "t5_tiny",
                   "sam_vit_b": "sam_vit_ti", "mvitv2_t": "mvitv2_xt"}

# Specs whose every op another spec takes through the `pipeline` tests in every run (or, for the
# newer tensor ops, tests/primitives/test_every_op.py's EVERY_OP and tests/primitives/test_pad.py, which export them,
# run them in ONNX Runtime and check TensorRT's coverage): their pipeline tests run in the slow
# tier only, their parity tests in every run (tests/parity/test_shipped.py's
# test_pipeline_elsewhere_specs_use_only_ops_run_elsewhere checks the claim). albert_base's sharing and
# gpt_oss's sinks, YaRN and MoE options go through export, ONNX Runtime and TensorRT in their own
# tests (tests/parity/test_albert.py, tests/primitives/test_sinks.py, test_rope_yarn.py, test_moe.py).
# deepseek_v3's latent attention: tests/primitives/test_latent_attention.py (export, ONNX Runtime, TensorRT).
# timesformer's folded batches: tests/language/test_video_axes.py (a small video model: export, ONNX Runtime, TensorRT).
# volo_d1's outlook attention: tests/primitives/test_outlook_attention.py (export, ONNX Runtime, TensorRT).
# mvitv2_xt's pooled attention: tests/primitives/test_pooled_attention.py (export, ONNX Runtime, TensorRT, model.py).
PIPELINE_ELSEWHERE = {"convit_tiny", "davit_tiny", "xcit_nano_12_p16", "albert_base", "gpt_oss", "volo_d1",
                      "deepseek_v3", "timesformer", "mvitv2_xt"}

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
                                              if p and p in model.facts.node_paths]
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


def build_counted(text: str, seed: int = 0):
    """(check's report, the built model in eval mode) of a spec text, the module's parameter count
    equal to the checker's."""
    import archspec

    report = archspec.check_text(text)
    model = archspec.build_text(text, seed=seed).eval()
    assert sum(p.numel() for p in model.parameters()) == report.params, "checker and module disagree on params"
    return report, model


def checks_shapes(report, model, args, sizes: dict | None = None, dtypes: bool = False):
    """Every node's module gives the checker's shape (read with forward hooks): a symbolic size is
    read from `sizes` by name (default: B, the first input's batch); with `dtypes` the checker's
    dtype too."""
    _, outputs = run_capturing(model, args)
    assert outputs
    sizes = {"B": args[0].shape[0]} if sizes is None else sizes
    for name, out in outputs.items():
        node_type = report.graph.type_of(name)
        assert list(out.shape) == [sizes.get(str(d), d) for d in node_type.shape], name
        if dtypes:
            assert str(out.dtype) == f"torch.{node_type.dtype}", name


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


# -- the slow tier -------------------------------------------------------------------------------------


def slow_selected(config) -> bool:
    """`-m slow` (or an expression that asks for slow tests) or ARCHSPEC_SLOW=1 (everything)."""
    expr = config.getoption("markexpr") or ""
    return os.environ.get("ARCHSPEC_SLOW") == "1" or re.search(r"(?<!not )\bslow\b", expr) is not None


def pytest_collection_modifyitems(config, items):
    """Tests marked slow, and `pipeline` tests of a larger sibling or of a spec whose ops run
    elsewhere, are skipped unless the slow tier is selected."""
    skip = pytest.mark.skip(reason="slow tier: run with -m slow or ARCHSPEC_SLOW=1")
    for item in items:
        if item.get_closest_marker("pipeline") and (sibling_spec(item) in LARGER_SIBLINGS
                                                    or sibling_spec(item) in PIPELINE_ELSEWHERE):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") and not slow_selected(config):
            item.add_marker(skip)


def sibling_spec(item) -> str | None:
    params = getattr(item, "callspec", None)
    path = params.params.get("spec_path") if params else None
    return spec_id(Path(path)) if path is not None else None


def scratch(request, tmp_path_factory, name: str) -> Path:
    """A folder for a module- or class-scoped fixture (`request` is that fixture's), removed when
    the fixture is torn down: checkpoints and builds a whole run makes come to many GB, more than
    a CI machine's free disk where they stay until the session ends."""
    path = tmp_path_factory.mktemp(name)
    request.addfinalizer(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


@pytest.fixture
def outside_torchrun(monkeypatch):
    """The test runs as one process, whatever torchrun variables the shell holds (training tests)."""
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def standalone_copy(model, name: str, file: str | None, tmp_path):
    """`model` as the standalone model.py a build writes makes it: the file written under
    `tmp_path`, imported, its class instantiated (with its own initial weights), in eval mode."""
    import importlib.util

    from archspec.compiler.backends.source import standalone_source

    path = tmp_path / "model.py"
    path.write_text(standalone_source(model, name, file))
    loaded = importlib.util.spec_from_file_location(f"{name}_standalone", path)
    source = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(source)
    return getattr(source, type(model).__name__)().eval()


def checks_tensorrt_coverage(text: str, tmp_path, capsys, batch: str | None = None) -> None:
    """`archspec check SPEC --target tensorrt` on a spec's text passes and says that every op
    converts (nothing falls back to PyTorch): the TensorRT coverage check each op harness runs."""
    from archspec.cli import main

    path = tmp_path / "spec.yaml"
    path.write_text(text)
    assert main(["check", str(path), "--target", "tensorrt", *(["--batch", batch] if batch else [])]) == 0
    assert "nothing falls back to PyTorch" in capsys.readouterr().out
