"""The options of a training run (torch-free, so the command line can offer them cheaply)."""

from __future__ import annotations

from dataclasses import dataclass

DATASET = 64  # synthetic samples


@dataclass
class Options:
    spec: str
    overrides: dict | None = None
    steps: int = 20
    batch: int = 8
    lr: float = 1e-3
    weight_decay: float = 0.05
    optimizer: str = "adamw"
    seed: int = 0
    fsdp: bool = False
    ddp: bool = False
    bf16: bool = False
    checkpointing: bool = False
    save: str | None = None
    resume: str | None = None
    as_json: bool = False
    dump: str | None = None  # write the final loss and parameters (tests compare runs)
