"""Quiet a library's advice while it works, so that it does not land in the middle of a build's
progress lines or of the tokens `archspec generate` prints: `quiet_logger(name)` drops what the
named logger itself logs below ERROR. `quiet_cpp_extension()` is the one for torch's C++ tooling
(the "No CUDA runtime is found" warning torch.utils.cpp_extension logs on every CPU machine when
inductor first builds C++: torch.compile, AOTInductor); precision.py quiets ONNX Runtime's
quantizer, which advises pre-processing on the root logger.

A filter on the logger, not its level: `Logger.setLevel` clears the cache of every logger in
the process (torch has hundreds); around each call of the torch.compile decode step this
project had, that cost about 0.1 ms a token for the shipped llama in bf16."""

from __future__ import annotations

import contextlib
import logging


def at_least_error(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


@contextlib.contextmanager
def quiet_logger(name: str):
    """Within the block, the logger `name` ("" for the root) keeps only its errors."""
    chatty = logging.getLogger(name)
    chatty.addFilter(at_least_error)
    try:
        yield
    finally:
        chatty.removeFilter(at_least_error)


def quiet_cpp_extension():
    return quiet_logger("torch.utils.cpp_extension")
