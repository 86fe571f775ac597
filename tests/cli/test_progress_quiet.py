"""A build step's progress line holds no library chatter (issue 39: 16 lines of onnxscript's
messages inside the ONNX step): the exporter's warnings and log records below ERROR are dropped
while a step runs; its errors, and everything of other libraries, still show."""

from __future__ import annotations

import io
import logging
import warnings

from archspec.cli.progress import Progress


def chatter():
    logging.getLogger("onnxscript.rewriter.fake").warning("Applied 3 of general pattern rewrite rules.")
    warnings.warn_explicit("The axis name: batch will not be used", UserWarning, "_onnx_program.py", 1,
                           module="torch.onnx._internal.exporter._onnx_program")
    logging.getLogger("onnxscript.fake").error("a real failure")
    logging.getLogger("somebody.else").warning("not ours to hide")
    return 1


def test_a_step_drops_the_exporters_advice_but_not_its_errors(caplog):
    stream = io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert Progress(1, stream=stream).run("ONNX", chatter) == 1
    shown = [r.getMessage() for r in caplog.records]  # what the root's handlers printed
    assert shown == ["a real failure", "not ours to hide"]
    assert not [w for w in caught if "axis name" in str(w.message)]
    assert stream.getvalue().startswith("[1/1] ONNX ...") and stream.getvalue().count("\n") == 1
