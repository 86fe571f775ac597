"""What the backends and the model interface must know about each op, declared here (the torch
floor) so that every op's torch file in compiler/modules/ fills them beside its lowering, but for
ONNX_FUSION, which the ONNX backend registers for every built-in op from its own file:

    register_facts(MERGE_CONV, grid=conv_grid_of, classifier=None, resample=None)   # compiler/modules/merge/conv.py
    ONNX_FUSION.register(MLP, gelu_fusion)                      # compiler/backends/onnx_fusions.py

TOKEN_GRID   how the op maps the token grid of its first input (or an image's height and width,
             which count as its grid here), (H, W) as ints or as torch SymInts while exporting
             with a dynamic image size (export.grids_for): `KEEPS`
             (its output, when it has a grid, has its input's grid, or the height and width of
             the image it reads), or a function (params, grid) -> grid.
ONNX_FUSION  which fused ONNX Runtime op the node becomes (onnx.expected_fusions): "attention",
             "gelu", None, or a function (params) -> one of them. A plugin, which has no line
             in the ONNX backend's table, gives it as register_facts(..., fusion=...).
CLASSIFIER   the layers of a head that is the model's classifier, for the timm-style model
             interface (interface.py, model.py) and loading a checkpoint with other classes: a
             `Classifier`, or None. (What an op's output is to a user, logits, classes or
             features, is its ROLE: archspec/primitives/decoding.py.)
RESAMPLE     how weights made for another input size are brought to the model's (timm's
             checkpoint filters; compiler/weights/resample.py): None (no weight of the op depends
             on the size), or a function (the node's module) -> {state-dict key under the node:
             a function of the checkpoint's tensor giving the model's}.

Every op has all four (tests/core/test_facts.py checks it); a lookup of a fact nobody
registered fails naming the op (archspec/primitives/facts.py).

FEATURE_NORM True where the op, when the classifier reads it, is the final norm that
             forward_intermediates(norm=True) applies to each stage's tokens (interface.py's
             head): the norms register it (compiler/modules/norm/); an op that did not is none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from archspec.primitives.base import Op
from archspec.primitives.facts import Fact

from .lowering_rules import load_torch_side_of

WHERE = "the op's torch file (compiler/modules/<op>.py, or a plugin's torch side), beside its lowering"
KEEPS = "keeps"  # TOKEN_GRID: the op passes its input's grid on
ONNX_FUSIONS = ("attention", "gelu")  # ONNX_FUSION: the fused ONNX Runtime ops archspec expects


@dataclass(frozen=True)
class Classifier:
    """CLASSIFIER of a head that is the model's classifier: `layers`, the attributes of its
    module holding the linear maps to the classes (num_classes reads the first,
    reset_classifier replaces each); `pre_logits(head module, features)`, what those layers
    read (forward_head(x, pre_logits=True)). A module-level function, so the model pickles."""

    layers: tuple[str, ...]
    pre_logits: Callable


TOKEN_GRID = Fact("TOKEN_GRID", "how the op maps its input's token grid (KEEPS or a function (params, grid) -> grid)",
                  WHERE, load=load_torch_side_of)
ONNX_FUSION = Fact("ONNX_FUSION", "the fused ONNX Runtime op the node becomes (\"attention\", \"gelu\", None, or a "
                   "function of the params)", "the ONNX backend's table (compiler/backends/onnx_fusions.py); a "
                   "plugin's torch side: register_facts(..., fusion=...)", load=load_torch_side_of)
CLASSIFIER = Fact("CLASSIFIER", "the layers of the model's classifier, when the op is one (a Classifier, or None)",
                  WHERE, load=load_torch_side_of)
RESAMPLE = Fact("RESAMPLE", "how the op's weights made for another input size are resampled (None, or a function "
                "(module) -> {key under the node: resampler})", WHERE, load=load_torch_side_of)
BACKEND_FACTS = (TOKEN_GRID, ONNX_FUSION, CLASSIFIER, RESAMPLE)
FEATURE_NORM = Fact("FEATURE_NORM", "True where the op, read by the model's classifier, is the final norm that "
                    "forward_intermediates(norm=True) applies to each stage's tokens of its width (timm's `norm`); "
                    "registered by the norms alone: an op without it is no such norm", WHERE, load=load_torch_side_of)


BY_THE_BACKEND = "by the backend"  # register_facts: ONNX_FUSION is the ONNX backend's (a built-in op)


def register_facts(op: Op, *, grid, classifier: Classifier | None, resample: Callable | None,
                   fusion=BY_THE_BACKEND) -> None:
    """Register the facts of `op` (grid, classifier and resample must be given: none has a default). A built-in
    op's ONNX_FUSION is registered by compiler/backends/onnx_fusions.py; a plugin's op gives it
    here as `fusion` (unless it registers ONNX_FUSION itself): where nobody does, it is missing."""
    if fusion is not BY_THE_BACKEND and fusion not in ONNX_FUSIONS + (None,) and not callable(fusion):
        raise ValueError(f"{op.label}: ONNX_FUSION is one of {ONNX_FUSIONS}, None or a function, got {fusion!r}")
    if grid != KEEPS and not callable(grid):
        raise ValueError(f"{op.label}: TOKEN_GRID is KEEPS or a function, got {grid!r}")
    TOKEN_GRID.register(op, grid)
    if fusion is not BY_THE_BACKEND:
        ONNX_FUSION.register(op, fusion)
    if resample is not None and not callable(resample):
        raise ValueError(f"{op.label}: RESAMPLE is None or a function, got {resample!r}")
    CLASSIFIER.register(op, classifier)
    RESAMPLE.register(op, resample)
