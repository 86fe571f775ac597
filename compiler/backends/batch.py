"""The batch sizes an artifact accepts: one size, or a range MIN:OPT:MAX (OPT is what
TensorRT tunes for). One type for every backend and the command line."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT = (1, 8, 64)


@dataclass(frozen=True)
class BatchRange:
    min: int
    opt: int
    max: int

    @classmethod
    def parse(cls, text: str | None) -> "BatchRange":
        """'8' -> 8:8:8; '1:8:64' -> 1:8:64; None -> the default 1:8:64. ValueError if malformed."""
        if text is None:
            return cls(*DEFAULT)
        try:
            values = [int(p) for p in text.split(":")]
        except ValueError:
            raise ValueError(f"--batch takes N or MIN:OPT:MAX, got {text!r}") from None
        if len(values) == 1:
            values = values * 3
        if len(values) != 3 or not 1 <= values[0] <= values[1] <= values[2]:
            raise ValueError(f"--batch takes N or MIN:OPT:MAX with 1 <= MIN <= OPT <= MAX, got {text!r}")
        return cls(*values)

    @classmethod
    def of(cls, batch) -> "BatchRange":
        """None (1:8:64), 'N', 'MIN:OPT:MAX', an int, a (min, opt, max) tuple or a BatchRange."""
        if isinstance(batch, BatchRange):
            return batch
        if isinstance(batch, int):
            return cls(batch, batch, batch)
        if batch is None or isinstance(batch, str):
            return cls.parse(batch)
        lo, opt, hi = batch
        return cls(int(lo), int(opt), int(hi))

    @property
    def static(self) -> bool:
        return self.min == self.max

    @property
    def example(self) -> int:
        """The batch to trace with: inside the range and, when dynamic, not 1 (which
        torch.export would specialise on)."""
        return self.min if self.static else max(self.min, min(self.max, max(self.opt, 2)))

    def __str__(self) -> str:
        return str(self.min) if self.static else f"{self.min}:{self.opt}:{self.max}"

    def describe(self) -> str:
        return f"static batch {self.min}" if self.static else f"batch {self}"
