"""Quiet torch's C++ tooling while it compiles: `quiet_cpp_extension()` silences the
"No CUDA runtime is found" warning torch.utils.cpp_extension logs on every CPU machine when
inductor first builds C++ (torch.compile, AOTInductor), which would otherwise land in the middle
of a build's progress lines or of the tokens `archspec generate` prints."""

from __future__ import annotations

import contextlib
import logging


@contextlib.contextmanager
def quiet_cpp_extension():
    chatty = logging.getLogger("torch.utils.cpp_extension")
    level = chatty.level
    chatty.setLevel(logging.ERROR)
    try:
        yield
    finally:
        chatty.setLevel(level)
