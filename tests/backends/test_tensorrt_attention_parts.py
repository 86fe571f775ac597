"""TensorRT coverage of the new attention parts (issue 36): a score graph (`mod`), sinks, a
bidirectional window (`local_window`) and cross attention with `kdim` convert fully, op by op,
at a static batch and a batch range (the written-out attention: products, softmax, where)."""

from __future__ import annotations

import importlib.util

import pytest

import archspec
from archspec.compiler.backends import tensorrt as T
from archspec.compiler.lower import lower

from tests.backends.test_tensorrt import RANGE, STATIC
from tests.primitives.test_cross_kdim import PERCEIVER
from tests.primitives.test_local_window import LOCAL
from tests.primitives.test_score_mod import CAPPED_BIAS
from tests.primitives.test_sinks import spec as sinks_spec

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None,
                                reason="torch-tensorrt is not installed")

SPECS = {"mod": CAPPED_BIAS, "sinks": sinks_spec("sliding", "L"), "local_window": LOCAL, "kdim": PERCEIVER}


@pytest.mark.parametrize("batch", [STATIC, RANGE], ids=["static", "range"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_op_of_the_new_parts_converts(name, batch):
    T.load_torch_tensorrt()
    report = archspec.check_text(SPECS[name])
    program = T.export_for_tensorrt(lower(report.graph, seed=0), report.graph, "fp32", batch)
    coverage = T.check_coverage(program, report.graph, "fp32", batch)
    assert coverage.complete and coverage.total > 0, coverage.summary()
