"""What this CPU can do for the figures bench prints: its model name and the vector and matrix
extensions that decide how fast fp32, bf16 and int8 run (AVX2, AVX-512, AVX512-BF16,
AVX512-VNNI, AMX), read from /proc/cpuinfo. A timing from a machine with AMX and one from a
machine with only AVX2 are not the same kind of figure: bench prints this line above them.

    isa = read_isa()
    isa.line()      'AMD EPYC 9654 96-Core Processor; ISA: AVX2, AVX-512, AVX512-BF16, AVX512-VNNI; no AMX'
    isa.to_json()   {'cpu': ..., 'flags': {'avx2': True, ..., 'amx_bf16': False}, 'bf16': True, ...}

No torch here: parsing text is all it does.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

# (the /proc/cpuinfo flag, how it is written in bench's output), in the order printed
FLAGS = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX512-BF16"), ("avx512_vnni", "AVX512-VNNI"),
         ("amx_bf16", "AMX-BF16"), ("amx_int8", "AMX-INT8"))
MODEL_KEYS = ("model name", "Model", "Hardware", "Processor", "cpu model")  # x86; then Arm and others


@dataclass(frozen=True)
class Isa:
    """A CPU's model name and which of FLAGS it has (None: the flags could not be read)."""

    cpu: str
    flags: frozenset | None

    def has(self, flag: str) -> bool:
        return self.flags is not None and flag in self.flags

    @property
    def extensions(self) -> list[str]:
        return [shown for flag, shown in FLAGS if self.has(flag)]

    @property
    def bf16(self) -> bool:
        """Native bf16 matmuls (AVX512-BF16 or AMX): what bf16 rows need to mean anything."""
        return self.has("avx512_bf16") or self.has("amx_bf16")

    def line(self) -> str:
        """One line: the CPU and its extensions, AMX named when it is absent (it changes bf16 and int8 most)."""
        if self.flags is None:
            return f"{self.cpu}; ISA: unknown (no x86 flags in /proc/cpuinfo)"
        shown = self.extensions
        amx = "" if self.has("amx_bf16") or self.has("amx_int8") else "; no AMX"
        return f"{self.cpu}; ISA: {', '.join(shown) or 'no AVX2'}{amx}"

    def to_json(self) -> dict:
        return {"cpu": self.cpu, "flags": None if self.flags is None else {f: self.has(f) for f, _ in FLAGS},
                "extensions": self.extensions, "bf16": self.bf16, "line": self.line()}


def parse_cpuinfo(text: str, fallback: str = "unknown CPU") -> Isa:
    """The first processor's model name and flags in the text of /proc/cpuinfo."""
    cpu, flags = None, None
    for raw in text.splitlines():
        key, sep, value = raw.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if cpu is None and key in MODEL_KEYS and value:
            cpu = value
        elif flags is None and key == "flags":
            flags = frozenset(value.split())
        if cpu is not None and flags is not None:
            break
    return Isa(cpu or fallback, flags)


def read_isa(path: str = "/proc/cpuinfo") -> Isa:
    """This machine's Isa (flags None where there is no /proc/cpuinfo)."""
    fallback = platform.processor() or platform.machine() or "unknown CPU"
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_cpuinfo(f.read(), fallback)
    except OSError:
        return Isa(fallback, None)
