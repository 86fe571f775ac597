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

Every option is range-checked before anything runs (options.py: a usage error naming the option
and its range), a batch against the memory available (memory.py), a --resume file against the
model before it is loaded (state.py: read with weights_only=True, checked tensor by tensor). A
loss that is not finite stops the run at that step. --save writes a whole file or none.
"""

from __future__ import annotations

import argparse
import os

from .options import DATASET, Options, check_options  # noqa: F401  (the package's API)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC", help="path of a YAML spec, or a shipped spec's name (archspec models)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a param (repeatable)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps, 1 to 1,000,000 (default 20)")
    parser.add_argument("--batch", type=int, default=8,
                        help="global batch per step, 1 to 1024 per process and within memory (default 8)")
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate, finite and > 0 (default 1e-3)")
    parser.add_argument("--weight-decay", type=float, default=0.05, help="finite and >= 0 (default 0.05)")
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
    """The options the command line gives; SPEC a path or a shipped spec's name (rank 0 of
    torchrun's processes says which shipped spec it took)."""
    from ..cli.commands.common import overrides_of, spec_path

    spec = spec_path(args, announce=os.environ.get("RANK", "0") in ("", "0"))
    return Options(spec, overrides_of(args), args.steps, args.batch, args.lr, args.weight_decay, args.optimizer,
                   args.seed, args.fsdp, args.ddp, args.bf16, args.checkpointing, args.save, args.resume, args.json,
                   args.dump)


def train(options: Options) -> dict:
    """Train as the options say (in this process, or as one of torchrun's); a summary of the run.
    A UsageError for an option out of its range, a SpecError for a bad spec or resume file or a
    loss that stopped being finite."""
    check_options(options)
    from .loop import run  # torch, only once the options hold

    return run(options)
