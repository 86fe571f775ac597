"""Train a spec: `python -m archspec.train SPEC [options]`, in one process or under torchrun.

    python -m archspec.train specs/vit_ti16.yaml --set img=64 --steps 50
    torchrun --nproc-per-node 2 -m archspec.train specs/swin_t.yaml --fsdp --steps 50
    torchrun --nproc-per-node 2 -m archspec.train specs/gpt2.yaml --ddp --bf16 --checkpointing

What it optimises: the spec's objectives (`objectives:`; targets are drawn to fit each target's
type), else cross-entropy for a classify head (labels) or a language-model head (next token).
Data: a small synthetic dataset drawn once from a seed (no downloads), cycled, so the loss goes
down as the model fits it. Each step takes a global batch; under torchrun each process takes
its share (the global batch must divide evenly), so one step under FSDP2 or DDP equals one step
in one process.

    --optimizer       adamw (default) or sgd
    --fsdp            FSDP2: fully_shard on every block (the innermost repetitions) and the root
    --ddp             DistributedDataParallel
    --bf16            bfloat16 autocast (forward and loss; parameters and optimizer stay fp32)
    --checkpointing   activation checkpointing per block (model.set_grad_checkpointing)
    --save FILE / --resume FILE   model and optimizer state, and the step reached

On CPU the processes talk over gloo. Progress is one line per step (rank 0); --json prints a
summary (losses, seconds per step) at the end.
"""

from __future__ import annotations

import argparse
import os

from ..core.errors import UsageError
from .options import DATASET, Options  # noqa: F401  (the package's API)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC", help="path of a YAML spec")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a param (repeatable)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps (default 20)")
    parser.add_argument("--batch", type=int, default=8, help="global batch per step (default 8)")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw", help="default adamw")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and the synthetic data")
    parser.add_argument("--fsdp", action="store_true", help="FSDP2: fully_shard every block and the root")
    parser.add_argument("--ddp", action="store_true", help="DistributedDataParallel (under torchrun)")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    parser.add_argument("--checkpointing", action="store_true", help="activation checkpointing per block")
    parser.add_argument("--save", metavar="FILE", help="save model and optimizer state at the end")
    parser.add_argument("--resume", metavar="FILE", help="resume from a file written by --save")
    parser.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    parser.add_argument("--dump", metavar="FILE", help=argparse.SUPPRESS)


def options_of(args) -> Options:
    from ..cli.commands.common import overrides_of

    if args.steps < 1 or args.batch < 1:
        raise UsageError("--steps and --batch must be at least 1")
    if args.resume and not os.path.isfile(args.resume):
        raise UsageError(f"--resume: no such file: {args.resume}")
    return Options(args.spec, overrides_of(args), args.steps, args.batch, args.lr, args.weight_decay, args.optimizer,
                   args.seed, args.fsdp, args.ddp, args.bf16, args.checkpointing, args.save, args.resume, args.json,
                   args.dump)


def train(options: Options) -> dict:
    """Train as the options say (in this process, or as one of torchrun's); a summary of the run."""
    from .loop import run

    return run(options)
