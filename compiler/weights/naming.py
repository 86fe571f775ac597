"""A naming: how one family of checkpoints names its tensors, as rules that turn its state dict
into archspec's. archspec's own naming has no rules; the others are read from mapping files
(mapping_file.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .patterns import KeyPattern
from .rules import Converted, Rule, convert


@dataclass(frozen=True)
class Naming:
    name: str  # "timm swin": what messages call it
    rules: tuple[Rule, ...] = ()
    identify: tuple[KeyPattern, ...] = ()  # each must match some key of a checkpoint in this naming
    keep: tuple[KeyPattern, ...] = ()  # our tensors this naming does not have: they keep their initial values
    file: str | None = None  # the mapping file it was read from
    doc: str = ""

    def applies_to(self, state: dict) -> bool:
        """Whether `state` has the keys that identify this naming."""
        return all(any(p.search(key) for key in state) for p in self.identify)

    def convert(self, state: dict, ours: dict | None = None) -> Converted:
        """`state` in archspec's naming; `ours`, the model's state dict, is what create rules make."""
        return convert(state, self.rules, ours)

    def keeps(self, key: str) -> bool:
        return any(p.search(key) for p in self.keep)


ARCHSPEC = Naming("archspec", doc="archspec's own naming: the dotted node paths of the spec")
