"""archspec: transformer architectures as YAML graph specs, checked and compiled.

    import archspec
    report = archspec.check("specs/swin_t.yaml")          # shapes, params, FLOPs (no torch)
    model = archspec.build("specs/swin_t.yaml", seed=0)   # a torch.fx.GraphModule

`spec` is a path or YAML text; `overrides` maps param names to values, like `--set`.
"""

from __future__ import annotations

from typing import Any, Mapping

from .diagnostics import Diagnostic, Loc, SpecError

__version__ = "0.1.0"
__all__ = ["check", "build", "SpecError", "Diagnostic", "Loc", "__version__"]


def check(spec, overrides: Mapping[str, Any] | None = None):
    """Check a spec: every shape, parameter count and FLOP count. Raises SpecError."""
    from compiler.pipeline import check_spec

    return check_spec(spec, overrides)


def build(spec, overrides: Mapping[str, Any] | None = None, seed: int = 0, weights=None):
    """Build a spec into a torch.fx.GraphModule (eval mode off: a fresh, trainable model)."""
    from compiler.pipeline import build_spec

    return build_spec(spec, overrides, seed=seed, weights=weights)
