"""Quiet torch's C++ tooling while it compiles: `quiet_cpp_extension()` silences the
"No CUDA runtime is found" warning torch.utils.cpp_extension logs on every CPU machine when
inductor first builds C++ (torch.compile, AOTInductor), which would otherwise land in the middle
of a build's progress lines or of the tokens `archspec generate` prints.

A filter on that logger, not its level: `Logger.setLevel` clears the cache of every logger in
the process (torch has hundreds), twice around each compiled decode step: about 0.1 ms a step
for the shipped llama in bf16."""

from __future__ import annotations

import contextlib
import logging


def at_least_error(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


@contextlib.contextmanager
def quiet_cpp_extension():
    chatty = logging.getLogger("torch.utils.cpp_extension")
    chatty.addFilter(at_least_error)
    try:
        yield
    finally:
        chatty.removeFilter(at_least_error)
