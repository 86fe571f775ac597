"""Batch-1 matrix-vector products over a model's weight matrices, two ways: F.linear on the
weights as they are (MKL's or oneDNN's GEMV, as torch dispatches it), and oneDNN on weights
packed once into its blocked layout for one row (what inductor's freezing makes of a linear
when it prepacks). Which is faster depends on the CPU and the dtype: on an Intel Xeon without
AMX, fp32 gpt2's matrices took 17.0 ms through F.linear and 20.8 ms packed, bf16 17.1 and 11.9;
on an AMD EPYC the packed fp32 pass streamed 34-61 GiB/s, F.linear 16-25. So the compiled
decode step (generate/compiled.py) times both on its model's matrices before it compiles, and
lets inductor pack the weights only where packing is faster (`packing_pays`). Where it packs, the
step offers inductor's own C++ GEMM kernels beside oneDNN's (frozen.TUNED_LINEARS), a third way
(`tuned_floor_pass`); `archspec bench --generate` takes the fastest of the three as its floor
(backends/bench_generate.py).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .frozen import TUNED_LINEARS, compile_frozen, load_frozen

CHOICE_ROUNDS = 7  # timed rounds of both ways when choosing; their medians are compared


def weight_matrices(model: nn.Module) -> list[torch.Tensor]:
    """Every weight matrix a decoded token is multiplied by: 2-D parameters, but embedding
    tables (a token reads one row of them), except a table that is also the tied lm head."""
    from ..modules.embed import TokenEmbed

    tables = {id(m.tokens.weight) for m in model.modules() if isinstance(m, TokenEmbed) and m.tokens is not None}
    tables |= {id(m.pos.weight) for m in model.modules() if isinstance(m, TokenEmbed) and m.pos is not None}
    found, seen = [], set()
    for m in model.modules():
        for p in m.parameters(recurse=False):
            if p.dim() == 2 and id(p) not in seen and (id(p) not in tables or not isinstance(m, nn.Embedding)):
                seen.add(id(p))
                found.append(p.detach())
    for m in model.modules():  # a tied head multiplies by the token table
        table = getattr(m, "table", None)
        if isinstance(table, nn.Embedding) and id(table.weight) not in seen:
            seen.add(id(table.weight))
            found.append(table.weight.detach())
    return found


def floor_pass(weights: list[torch.Tensor]) -> Callable[[], float]:
    """A function timing one batch-1 pass of matrix-vector products over `weights` (in their
    own dtype) with F.linear, in seconds."""
    inputs = [torch.randn(1, w.shape[1], dtype=w.dtype, device=w.device) for w in weights]

    def once() -> float:
        with torch.no_grad():
            start = time.perf_counter()
            for x, w in zip(inputs, weights):
                F.linear(x, w)
            return time.perf_counter() - start

    return once


def onednn_packs(weights: list[torch.Tensor]) -> bool:
    """Whether oneDNN can run `weights` packed: on the CPU, in float32 or bfloat16, oneDNN there."""
    return all(w.device.type == "cpu" and w.dtype in (torch.float32, torch.bfloat16) for w in weights) and (
        torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available())


def packed_products(weights: list[torch.Tensor]) -> Callable[[list[torch.Tensor]], list[torch.Tensor]] | None:
    """The same matrix-vector products on weights packed once into oneDNN's blocked layout for
    one row (what inductor's freezing makes of a linear), or None where oneDNN cannot run them
    (onednn_packs)."""
    if not onednn_packs(weights):
        return None
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, 1) for w in weights]

    def products(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "") for x, p in zip(inputs, packed)]

    return products


def packed_floor_pass(weights: list[torch.Tensor]) -> Callable[[], float] | None:
    """floor_pass on the weights packed for oneDNN (packed_products), or None where it cannot run."""
    products = packed_products(weights)
    if products is None:
        return None
    inputs = [torch.randn(1, w.shape[1], dtype=w.dtype) for w in weights]

    def once() -> float:
        with torch.no_grad():
            start = time.perf_counter()
            products(inputs)
            return time.perf_counter() - start

    return once


class Products(nn.Module):
    """Each weight matrix times its own vector: forward(x_1 [1, in_1], ...) -> [y_1 [1, out_1], ...]."""

    def __init__(self, weights: list[torch.Tensor]):
        super().__init__()
        self.weights = nn.ParameterList([nn.Parameter(w, requires_grad=False) for w in weights])

    def forward(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        return [F.linear(x, w) for x, w in zip(inputs, self.weights)]  # [1, in] -> [1, out] each


def tuned_floor_pass(weights: list[torch.Tensor]) -> Callable[[], float] | None:
    """floor_pass as one AOTInductor program compiled as the decode step compiles its linears
    where it packs them (frozen, each product oneDNN's or inductor's own C++ GEMM kernel, the
    faster at its shape: frozen.TUNED_LINEARS; a compile of some seconds a distinct shape), or
    None where oneDNN cannot run the weights (onednn_packs)."""
    if not onednn_packs(weights):
        return None
    inputs = tuple(torch.randn(1, w.shape[1], dtype=w.dtype) for w in weights)
    with tempfile.TemporaryDirectory(prefix="archspec-floor-") as folder, torch.no_grad():
        program = torch.export.export(Products(weights).eval(), inputs, strict=False)
        products = load_frozen(compile_frozen(program, os.path.join(folder, "products.pt2"), TUNED_LINEARS))

    def once() -> float:
        start = time.perf_counter()
        products(*inputs)
        return time.perf_counter() - start

    return once


def packing_pays(weights: list[torch.Tensor], rounds: int = CHOICE_ROUNDS) -> bool | None:
    """Whether oneDNN on packed weights runs one pass of matrix-vector products over `weights`
    faster than F.linear: the medians of `rounds` rounds, each one pass of both ways, after two
    warm-up rounds (a fresh process's first F.linear calls are slow). None where oneDNN cannot
    run them (no weights, not on the CPU, another dtype): inductor's own choice stands."""
    packed = packed_floor_pass(weights) if weights else None
    if packed is None:
        return None
    plain = floor_pass(weights)
    for _ in range(2):
        plain(), packed()
    times = [(plain(), packed()) for _ in range(rounds)]
    return statistics.median(t[1] for t in times) < statistics.median(t[0] for t in times)
