"""Train a spec: `python -m archspec.train SPEC [options]`, in one process or under torchrun.

    python -m archspec.train specs/vit_ti16.yaml --set img=64 --steps 50
    torchrun --nproc-per-node 2 -m archspec.train specs/swin_t.yaml --fsdp --steps 50
    torchrun --nproc-per-node 2 -m archspec.train specs/gpt2.yaml --ddp --bf16 --checkpointing
    python -m archspec.train specs/vit_ti16.yaml --set img=32 --set classes=3 --data shapes/ --epochs 5

What it optimises: the spec's objectives (`objectives:`; targets are drawn to fit each target's
type), else cross-entropy for a classify head (labels) or a language-model head (next token).
Data: by default a small synthetic dataset drawn once from a seed (no downloads), cycled, so
the loss goes down as the model fits it (a smoke run). --data trains on real data (data.py):
a folder of train/ and val/ class folders (torchvision's ImageFolder, transforms fit to the
spec's image size, --aug; `pip install 'archspec-compiler[train]'`), a .npy/.bin token file (windows of the
spec's sequence length, the last --val-fraction for validation), or module:function, your own
torch Dataset (or (train, val) pair). Each step takes a global batch; under torchrun each
process takes its share (the global batch must divide evenly), so one step under FSDP2 or DDP
equals one step in one process.

    --optimizer       adamw (default) or sgd
    --fsdp            FSDP2: fully_shard on every block (the innermost repetitions) and the root
    --ddp             DistributedDataParallel
    --bf16            bfloat16 autocast (forward and loss; parameters and optimizer stay fp32)
    --checkpointing   activation checkpointing per block (model.set_grad_checkpointing)
    --save FILE / --resume FILE   model and optimizer state, and the step reached; under --fsdp
                      --save DIR writes a sharded torch.distributed.checkpoint folder, which
                      --resume DIR reads at any number of processes (dcp.py)
    --epochs N        instead of --steps: N passes over the training set (counted from step 0,
                      so a resumed run finishes them); --steps N: N more steps (default 20)
    --schedule        cosine (default with --data: warm-up, then cosine decay to 0) or constant
                      (default on the synthetic set); --warmup N linear warm-up steps (default 0)
    --clip-grad NORM  clip the gradients' global norm (default 1.0 with --data, else off; 0: off)
    --eval-every N    validate every N steps (default: each epoch) and at the end
    --aug, --mixup A, --cutmix A, --smoothing E, --ema DECAY   the recipe (docs/training.md)
    --save DIR/       keep last.pt, best.pt (by validation), epoch_N.pt (--save-every N) and
                      metrics.jsonl (--metrics FILE elsewhere) in DIR
    --workers N       DataLoader worker processes (default 0: read in the training process)

On CPU the processes talk over gloo. Progress is one line per step (rank 0; about 100 lines in
all for longer runs): step/total, loss, learning rate, seconds, samples/s, ETA; a line per
validation: val loss and top-1 (classify head) or perplexity (lm head), all on stderr, with --json
too. --json prints a summary (losses, learning rates, seconds per step, samples/s, the data's sizes,
every validation) at the end, on stdout alone (`> summary.json` keeps it apart from the progress).

Every option is range-checked before anything runs (options.py: a usage error naming the option
and its range), a batch against the memory available (memory.py), a --resume file against the
model before it is loaded (state.py: read with weights_only=True, checked tensor by tensor). A
loss that is not finite stops the run at that step. --save writes a whole file or none.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import fields

from .options import DATASET, Options, check_options  # noqa: F401  (the package's API)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC", help="path of a YAML spec, or a shipped spec's name (archspec models)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a param (repeatable)")
    parser.add_argument("--steps", type=int, default=None,
                        help="optimizer steps this run takes, 1 to 1,000,000 (default 20; not with --epochs)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="passes over the training set instead of --steps, 1 to 10,000 (counted from step 0)")
    parser.add_argument("--data", metavar="DIR|FILE|MODULE:FUNCTION",
                        help="real data: a folder of train/ and val/ class folders, a .npy/.bin token file, or "
                             "module:function returning a torch Dataset (default: the synthetic set)")
    parser.add_argument("--val-fraction", type=float, default=0.1,
                        help="of a token file (or a function's single dataset) kept for validation, 0 to 0.9 "
                             "(default 0.1)")
    parser.add_argument("--schedule", choices=["cosine", "constant"], default=None,
                        help="learning-rate schedule (default cosine with --data, constant without)")
    parser.add_argument("--warmup", type=int, default=0, help="linear warm-up steps (default 0)")
    parser.add_argument("--clip-grad", type=float, default=None, metavar="NORM",
                        help="clip the gradients' global norm; 0: off (default 1.0 with --data, else off)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes, 0 to 64 (default 0)")
    parser.add_argument("--eval-every", type=int, default=None, metavar="STEPS",
                        help="validate every STEPS steps (default: each epoch) and at the end")
    parser.add_argument("--aug", default=None, metavar="{none,basic,rand,trivial}",
                        help="training augmentation of an image folder: none, basic (images <= 64 px: shift by up "
                             "to 1/8 and flip; larger: timm's random-resized crop, flip, colour jitter), rand "
                             "(basic + RandAugment), trivial (basic + TrivialAugment); default none up to 64 px, "
                             "basic above")
    parser.add_argument("--mixup", type=float, default=0.0, metavar="ALPHA", help="mixup alpha (timm's Mixup; 0: off)")
    parser.add_argument("--cutmix", type=float, default=0.0, metavar="ALPHA", help="cutmix alpha (0: off)")
    parser.add_argument("--smoothing", type=float, default=0.0, metavar="EPS",
                        help="label smoothing of the training loss, 0 to below 1 (default 0)")
    parser.add_argument("--ema", type=float, default=None, metavar="DECAY",
                        help="keep an exponential moving average of the weights (e.g. 0.999), evaluated too")
    parser.add_argument("--save-every", type=int, default=None, metavar="EPOCHS",
                        help="with --save DIR/: also keep epoch_N.pt every EPOCHS epochs")
    parser.add_argument("--metrics", metavar="FILE",
                        help="a JSON line per evaluation (epoch, losses, top-1, lr, seconds); default "
                             "DIR/metrics.jsonl with --save DIR/")
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
    parser.add_argument("--save", metavar="FILE|DIR/",
                        help="save model and optimizer state at the end (under --fsdp: a sharded folder); DIR/ "
                             "(a trailing /) keeps last.pt each epoch, best.pt by validation and metrics.jsonl")
    parser.add_argument("--resume", metavar="FILE|DIR",
                        help="resume from what --save wrote (a checkpoint folder: its last.pt)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary at the end on stdout (progress stays on stderr)")
    parser.add_argument("--dump", metavar="FILE", help=argparse.SUPPRESS)


def options_of(args) -> Options:
    """The options the command line gives; SPEC a path or a shipped spec's name (rank 0 of
    torchrun's processes says which shipped spec it took)."""
    from ..arguments import overrides_of, spec_path

    spec = spec_path(args, announce=os.environ.get("RANK", "0") in ("", "0"))
    given = {f.name: getattr(args, f.name) for f in fields(Options) if f.name not in ("spec", "overrides", "as_json")}
    return Options(spec, overrides=overrides_of(args), as_json=args.json, **given)  # each option by its name


def train(options: Options) -> dict:
    """Train as the options say (in this process, or as one of torchrun's); a summary of the run.
    A UsageError for an option out of its range, a SpecError for a bad spec or resume file or a
    loss that stopped being finite."""
    check_options(options)
    from .loop import run  # torch, only once the options hold

    return run(options)
