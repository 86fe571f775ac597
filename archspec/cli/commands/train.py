"""`archspec train SPEC`: train in this process, on synthetic data or on real data with --data
(the same as `python -m archspec.train`; several processes: `torchrun ... -m archspec.train SPEC
--fsdp`)."""

from __future__ import annotations

NAME = "train"
HELP = "train the spec on synthetic data or --data (torchrun -m archspec.train for FSDP2/DDP)"


def add_arguments(parser) -> None:
    from ...train import add_arguments as train_arguments  # torch-free: the loop imports torch

    train_arguments(parser)


def run(args) -> int:
    import json

    from ...train import options_of, train

    summary = train(options_of(args))
    if args.json:
        print(json.dumps(summary, indent=2))
    return 0
