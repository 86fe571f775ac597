"""compiler/quiet.py: what a library logs below ERROR is kept out of the progress lines and the
streamed tokens while it works, with a filter on its logger (not its level: Logger.setLevel
clears the cache of every logger in the process, and ran twice around each compiled decode step)."""

from __future__ import annotations

import logging

from archspec.compiler.quiet import quiet_cpp_extension, quiet_logger


def test_a_quieted_logger_keeps_its_errors_and_speaks_again_after(caplog):
    chatty = logging.getLogger("archspec.test.chatty")
    with caplog.at_level(logging.INFO):
        with quiet_logger("archspec.test.chatty"):
            chatty.warning("advice nobody asked for")
            chatty.error("a real failure")
        chatty.warning("after the block")
    assert [r.getMessage() for r in caplog.records] == ["a real failure", "after the block"]
    assert chatty.level == logging.NOTSET and not chatty.filters  # its level never touched, its filter gone


def test_the_root_logger_is_quieted_as_onnx_runtimes_quantizer_uses_it(caplog):
    with caplog.at_level(logging.INFO):
        with quiet_logger(""):
            logging.warning("Please consider to run pre-processing before quantization.")
        logging.warning("after the block")
    assert [r.getMessage() for r in caplog.records] == ["after the block"]


def test_torchs_no_cuda_runtime_warning_is_quieted(caplog):
    with caplog.at_level(logging.INFO):
        with quiet_cpp_extension():
            logging.getLogger("torch.utils.cpp_extension").warning("No CUDA runtime is found")
    assert not caplog.records
