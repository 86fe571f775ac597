"""The training loop behind `python -m archspec.train` (see the package's docstring).

The options are range-checked before this runs (options.py); here the batch's memory is
checked against the report before the model is built (memory.py), a resume file against the
built model and optimizer (state.py; a sharded folder: dcp.py), and a loss that is not finite
stops the run with the step and the last finite loss instead of training on to NaN.

The batches come from data.py; each step sets the learning rate (schedule.py), clips the
gradients' global norm when asked, and prints step/total, loss, lr, samples/s and the ETA
(every step up to PROGRESS_LINES steps, else about PROGRESS_LINES times in all). A validation
set is evaluated every --eval-every steps (default: at each epoch's end) and at the end: loss
and top-1 for a classify head, loss and perplexity for an lm head. The recipe (recipe.py):
mixup/cutmix and label smoothing of the training loss, an EMA of the weights evaluated beside
the model, --save DIR/'s last/best/epoch_N checkpoints and the metrics file's lines.
"""

from __future__ import annotations

import datetime
import math
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .. import build, check
from ..compiler.backends.export import value_bound
from ..core.errors import UsageError, error
from ..primitives.decoding import LOGITS, role_of
from . import data as datasets, dcp
from .batch_memory import check_batch_memory, size
from .options import DATASET, Options, resume_file
from .recipe import Ema, Metrics, Mixing, check_recipe_fits, training_loss
from .schedule import lr_factor
from .state import Expected, read_resume, write_whole

PROGRESS_LINES = 100


@dataclass
class World:
    rank: int = 0
    size: int = 1

    @property
    def distributed(self) -> bool:
        return self.size > 1


def join_world() -> World:
    """Under torchrun (RANK/WORLD_SIZE set): start the process group (gloo on CPU)."""
    if "RANK" not in os.environ:
        return World()
    import torch.distributed as dist

    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    return World(dist.get_rank(), dist.get_world_size())


def seed_everything(seed: int) -> None:
    """torch's and Python's global generators, which transforms and dropout draw from."""
    import random

    torch.manual_seed(seed)
    random.seed(seed)


# -- data and objective ------------------------------------------------------------------------------


def synthetic_dataset(graph, seed: int) -> dict[str, torch.Tensor]:
    """DATASET samples for every input and target, drawn once: images and tokens as normal
    noise, integers within what their readers accept (vocabularies, classes, 0/1 masks)."""
    generator = torch.Generator().manual_seed(seed)
    data = {}
    for node in graph.inputs() + graph.targets():
        shape = [DATASET] + [size(d) for d in node.type.shape[1:]]
        if node.type.dtype == "int64":
            data[node.name] = torch.randint(0, value_bound(graph, node.name), shape, generator=generator)
        else:
            data[node.name] = torch.randn(shape, generator=generator)
    return data


class Objective:
    """What a step minimises, from the model's outputs and the batch."""

    def __init__(self, model, graph):
        self.model, self.graph = model, graph
        facts = model.facts
        self.inputs, self.targets = facts.inputs, facts.targets
        if facts.objectives:
            self.kind = "objectives"
        elif facts.head is not None:
            self.kind = "classify"
            self.classes = graph.type_of(graph.outputs[0].node).channels
        elif len(graph.outputs) == 1 and role_of(graph.record(graph.outputs[0].node)) == LOGITS:
            self.kind = "lm"
        else:
            raise UsageError("nothing to train on: the spec has no objectives (`objectives:`), classify head or "
                             "lm head; declare its losses under `objectives:`")

    def labels(self, batch: dict, generator) -> torch.Tensor:
        first = batch[self.inputs[0]]
        return torch.randint(0, self.classes, (first.shape[0],), generator=generator)

    def __call__(self, outputs, batch: dict) -> torch.Tensor:
        args = [batch[n] for n in self.inputs]
        if self.kind == "objectives":
            return self.model_for_losses.losses_from(outputs, *args, *[batch[n] for n in self.targets])["loss"]
        if self.kind == "classify":
            return F.cross_entropy(outputs.float(), batch["__labels__"])
        if "__next__" in batch:  # a token file's windows: each position's next token
            return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]).float(), batch["__next__"].reshape(-1))
        ids = batch[self.inputs[0]]  # lm: position t predicts token t + 1
        return F.cross_entropy(outputs[:, :-1].reshape(-1, outputs.shape[-1]).float(), ids[:, 1:].reshape(-1))


# -- the run --------------------------------------------------------------------------------------------


@dataclass
class Trainer:
    options: Options
    world: World = field(default_factory=World)
    losses: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)

    def setup(self) -> None:
        o = self.options
        self.report = check(o.spec, o.overrides)
        check_batch_memory(self.report, o.batch, self.world.size, longest=o.data is not None)
        self.model = build(o.spec, o.overrides, seed=o.seed).train()
        self.objective = Objective(self.model, self.report.graph)
        self.objective.model_for_losses = self.model
        check_recipe_fits(o, self.objective.kind, len(self.report.graph.inputs()[0].type.shape))
        seed_everything(o.seed)  # augmentations, dropout, the loader's workers
        self.data = datasets.load_data(o, datasets.needs_of(self.report.graph, self.objective), self.synthetic())
        if o.checkpointing:
            self.model.set_grad_checkpointing(True)
        self.network = self.wrap(self.model)
        groups = self.param_groups()
        self.optimizer = (torch.optim.SGD(groups, lr=o.lr) if o.optimizer == "sgd" else
                          torch.optim.AdamW(groups, lr=o.lr))
        self.resumed_ema = None
        self.start = self.load() if o.resume else 0
        self.ema = Ema(self.model, o.ema) if o.ema else None
        if self.ema is not None and self.resumed_ema is not None:
            self.ema.load_state_dict(self.resumed_ema)
        self.mixing = (Mixing(o, self.objective.classes, self.objective.inputs[0], datasets.LABELS)
                       if o.mixing else None)
        self.best, self.kept = self.previous_best(), []
        if o.save_folder and self.world.rank == 0:
            os.makedirs(o.save_folder, exist_ok=True)
        self.metrics = Metrics(o.metrics_file) if o.metrics_file and self.world.rank == 0 else None
        if o.resume:
            self.say(f"resumed from {o.resume}: model and optimizer at step {self.start}")
        self.per_epoch = datasets.steps_per_epoch(self.data, o.batch)
        self.end = o.epochs * self.per_epoch if o.epochs else self.start + o.steps
        if self.end <= self.start:
            raise UsageError(f"--epochs {o.epochs} ({self.end} steps) are done: --resume reached step {self.start}; "
                             f"give more --epochs")
        if o.warmup > self.end:
            raise UsageError(f"--warmup {o.warmup} is longer than the run's {self.end} steps; give at most {self.end}")

    def synthetic(self) -> dict[str, torch.Tensor]:
        o = self.options
        tensors = synthetic_dataset(self.report.graph, o.seed)
        if self.objective.kind == "classify":
            tensors["__labels__"] = torch.randint(0, self.objective.classes, (DATASET,),
                                                  generator=torch.Generator().manual_seed((o.seed + 1) % 2**64))
        return tensors

    def wrap(self, model):
        o = self.options
        if o.fsdp:
            from torch.distributed.fsdp import fully_shard

            for path in model.facts.blocks:
                fully_shard(model.get_submodule(path))
            fully_shard(model)
            return model
        if o.ddp:
            from torch.nn.parallel import DistributedDataParallel

            return DistributedDataParallel(model)
        return model

    def param_groups(self) -> list[dict]:
        """Decayed and not decayed parameters; their names, in order, are kept in group_names."""
        skip = self.model.no_weight_decay()
        decay, no_decay = {}, {}
        for name, p in self.model.named_parameters():
            (no_decay if name in skip else decay)[name] = p
        self.group_names = [list(decay), list(no_decay)]
        return [{"params": list(decay.values()), "weight_decay": self.options.weight_decay},
                {"params": list(no_decay.values()), "weight_decay": 0.0}]

    def step(self, step: int, batch: dict) -> float:
        o = self.options
        for group in self.optimizer.param_groups:
            group["lr"] = o.lr * lr_factor(step, self.end, o.warmup, o.schedule_name)
        self.optimizer.zero_grad(set_to_none=True)
        if self.mixing is not None:
            batch = self.mixing(batch)
        with self.autocast():
            outputs = self.network(*[batch[n] for n in self.objective.inputs])
            loss = self.training_loss(outputs, batch)
        loss.backward()
        if step == self.start:
            self.warn_untrained()
        if o.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.network.parameters(), o.clip_norm)
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update(self.model)
        return self.global_mean(loss.detach().float())

    def warn_untrained(self) -> None:
        """Once, after the first backward: the learned tensors of called modules that got no
        gradient, which the run will not train. Nothing on their way to the loss passes one (a
        cast to an integer, a comparison, argmax: the BitNet trial's rounded weights trained only
        through their scale, without a word), or the loss does not read what they make."""
        skipped = tuple(self.model.__dict__.get("meta", {}).get("archspec_uncalled", ()))
        untrained = [name for name, p in self.model.named_parameters()
                     if p.requires_grad and p.grad is None and not name.startswith(tuple(f"{s}." for s in skipped))]
        if untrained:
            shown = ", ".join(untrained[:6]) + (f" and {len(untrained) - 6} more" if len(untrained) > 6 else "")
            self.say(f"warning: {len(untrained)} learned tensor(s) got no gradient at the first step and will not "
                     f"train: {shown} (nothing on their way to the loss passes one: a cast to an integer, a "
                     f"comparison or argmax stops it; or the loss does not read what they make)")

    def training_loss(self, outputs, batch: dict) -> torch.Tensor:
        """The objective, with --smoothing and mixup's soft targets where asked (validation: plain)."""
        kind, smoothing = self.objective.kind, self.options.smoothing
        if kind == "classify" and (smoothing or self.mixing is not None):
            return training_loss(outputs, batch[datasets.LABELS], smoothing)
        if kind == "lm" and smoothing:
            if datasets.NEXT in batch:
                return training_loss(outputs, batch[datasets.NEXT], smoothing)
            ids = batch[self.objective.inputs[0]]
            return training_loss(outputs[:, :-1], ids[:, 1:], smoothing)  # position t predicts token t + 1
        return self.objective(outputs, batch)

    def autocast(self):
        return torch.autocast("cpu", dtype=torch.bfloat16) if self.options.bf16 else nullcontext()

    def global_mean(self, value: torch.Tensor) -> float:
        if self.world.distributed:
            import torch.distributed as dist

            value = value.clone()
            dist.all_reduce(value)
            value /= self.world.size
        return float(value)

    def run(self) -> None:
        o = self.options
        batches = datasets.training_batches(self.data, o, self.start, self.end, self.world.rank, self.world.size)
        every = max(1, math.ceil((self.end - self.start) / PROGRESS_LINES))
        step = self.start
        begin = self.since = time.perf_counter()
        self.recent = []  # training losses since the last metrics line
        for batch in self.read(batches):
            loss = self.step(step, batch)
            if not math.isfinite(loss):
                raise self.diverged(step, loss)
            now = time.perf_counter()
            self.seconds.append(now - begin)
            self.losses.append(loss)
            self.recent.append(loss)
            self.rates.append(self.optimizer.param_groups[0]["lr"])
            step += 1
            if (step - self.start) % every == 0 or step == self.end:
                self.progress(step)
            if self.evaluation_due(step):
                self.evaluate(step)
            elif self.data.val is None and (step % self.per_epoch == 0 or step == self.end):
                self.log_metrics(step, {})
            if o.save_folder and (step % self.per_epoch == 0 or step == self.end):
                self.keep(step)
            begin = time.perf_counter()
        if self.metrics is not None:
            self.metrics.close()
        if o.save_folder:
            self.say(f"kept {', '.join(dict.fromkeys(self.kept))} in {o.save_folder} (--resume "
                     f"{o.save_folder} reads last.pt)")
        elif o.save:
            self.save(self.end)

    def read(self, batches):
        """The loader's batches; a failure to read one is the data's, said plainly."""
        iterator = iter(batches)
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - a broken image, a failing hook dataset
                raise error(f"--data {self.options.data}: reading a batch failed: {type(exc).__name__}: "
                            f"{datasets.first_line(exc)}") from None
            yield batch

    def progress(self, step: int) -> None:
        if self.world.rank != 0:  # with --json too: progress is on stderr, the summary alone on stdout
            return
        recent = self.seconds[-20:]
        per_step = sum(recent) / len(recent)
        eta = datetime.timedelta(seconds=round(per_step * (self.end - step)))
        print(f"step {step}/{self.end}  loss {self.losses[-1]:.4f}  lr {self.rates[-1]:.2e}  "
              f"{self.seconds[-1]:.2f} s  {self.options.batch / per_step:.1f} samples/s  ETA {eta}",
              file=sys.stderr, flush=True)

    # -- validation -------------------------------------------------------------------------------------
    def evaluation_due(self, step: int) -> bool:
        if self.data.val is None:
            return False
        every = self.options.eval_every or self.per_epoch
        return step % every == 0 or step == self.end

    def evaluate(self, step: int) -> None:
        """Loss (and top-1 or perplexity) over the whole validation set, of the model and of its
        moving average (--ema): each process evaluates its share, and the sums are added up."""
        shares = datasets.validation_batches(self.data, self.options, self.world.rank, self.world.size)
        if shares is None:
            return
        total, correct, count = self.measure(shares, self.network, self.model)
        self.record(step, total / max(count, 1), int(correct), int(count))
        if self.ema is not None:
            total, correct, count = self.measure(shares, self.ema.module, self.ema.module)
            self.record_ema(step, total / max(count, 1), int(correct), int(count))
        self.log_metrics(step, self.evals[-1])

    def measure(self, shares, network, module) -> list[float]:
        """(loss x samples, correct top-1 answers, samples) of `network` over the validation set."""
        sums = torch.zeros(3, dtype=torch.float64)  # loss x samples, correct, samples
        training = module.training
        module.eval()
        try:
            with torch.no_grad(), self.autocast():
                ran = 0
                for batch in self.read(shares.loader):
                    sums += self.scored(batch, network)
                    ran += 1
                for _ in range(shares.forwards - ran):  # as many forwards as the other processes run
                    for batch in self.read(shares.filler):
                        self.scored(batch, network)
        finally:
            module.train(training)
        if self.world.distributed:
            import torch.distributed as dist

            dist.all_reduce(sums)
        return sums.tolist()

    def scored(self, batch, network) -> torch.Tensor:
        """One validation batch: (its loss x its samples, correct top-1 answers, samples)."""
        outputs = network(*[batch[n] for n in self.objective.inputs])
        n = batch[self.objective.inputs[0]].shape[0]
        correct = int((outputs.argmax(-1) == batch["__labels__"]).sum()) if self.objective.kind == "classify" else 0
        return torch.tensor([float(self.objective(outputs, batch)) * n, correct, n], dtype=torch.float64)

    def record(self, step: int, loss: float, correct: int, count: int) -> None:
        result = {"step": step, "epoch": round(step / self.per_epoch, 2), "val_loss": loss, "val_samples": count}
        if self.objective.kind == "classify":
            result["top1"] = correct / max(count, 1)
        elif self.objective.kind == "lm":
            result["perplexity"] = math.exp(min(loss, 700))
        self.evals.append(result)
        if self.world.rank == 0:  # with --json too (stderr; the JSON summary is stdout's)
            extra = (f"  top-1 {result['top1']:.3f}" if "top1" in result else
                     f"  perplexity {result['perplexity']:.2f}" if "perplexity" in result else "")
            print(f"epoch {result['epoch']:g}  step {step}/{self.end}  val loss {loss:.4f}{extra}  ({count} samples)",
                  file=sys.stderr, flush=True)

    def record_ema(self, step: int, loss: float, correct: int, count: int) -> None:
        result = self.evals[-1]
        result["ema_val_loss"] = loss
        if self.objective.kind == "classify":
            result["ema_top1"] = correct / max(count, 1)
        elif self.objective.kind == "lm":
            result["ema_perplexity"] = math.exp(min(loss, 700))
        extra = (f"  top-1 {result['ema_top1']:.3f}" if "ema_top1" in result else
                 f"  perplexity {result['ema_perplexity']:.2f}" if "ema_perplexity" in result else "")
        self.say(f"epoch {result['epoch']:g}  step {step}/{self.end}  EMA val loss {loss:.4f}{extra}")

    def log_metrics(self, step: int, evaluation: dict) -> None:
        """A line of the metrics file (rank 0), and the best checkpoint when this one is better."""
        now = time.perf_counter()
        line = {"epoch": round(step / self.per_epoch, 2), "step": step,
                "train_loss": sum(self.recent) / len(self.recent) if self.recent else None,
                **{k: v for k, v in evaluation.items() if k not in ("step", "epoch", "val_samples")},
                "lr": self.rates[-1] if self.rates else None, "seconds": round(now - self.since, 3)}
        self.recent, self.since = [], now
        if self.metrics is not None:
            self.metrics.write(line)
        if self.options.save_folder and evaluation:
            self.keep_best(step, evaluation)

    # -- checkpoints in --save DIR/ ---------------------------------------------------------------------
    def metric_of(self, evaluation: dict) -> float:
        """What best.pt is chosen by (higher is better): top-1, else minus the val loss; the EMA's
        where --ema runs (as timm's train.py)."""
        prefix = "ema_" if self.ema is not None else ""
        if f"{prefix}top1" in evaluation:
            return evaluation[f"{prefix}top1"]
        return -evaluation[f"{prefix}val_loss"]

    def previous_best(self) -> float | None:
        """best.pt's metric where a resumed run keeps checkpoints in the folder it resumed from."""
        if not (self.options.resume and self.options.save_folder):
            return None
        path = os.path.join(self.options.save_folder, "best.pt")
        if not os.path.isfile(path):
            return None
        try:
            metric = torch.load(path, map_location="cpu", weights_only=True).get("metric")
        except Exception:  # noqa: BLE001 - an unreadable best.pt is replaced by this run's best
            return None
        return metric if isinstance(metric, float) else None

    def keep_best(self, step: int, evaluation: dict) -> None:
        metric = self.metric_of(evaluation)
        if self.best is None or metric > self.best:
            self.best = metric
            self.write_checkpoint("best.pt", step, metric)

    def keep(self, step: int) -> None:
        """At an epoch's end (and the run's): last.pt, and epoch_N.pt every --save-every epochs."""
        self.write_checkpoint("last.pt", step, None)
        every, epoch = self.options.save_every, step // self.per_epoch
        if every and step % self.per_epoch == 0 and epoch % every == 0:
            self.write_checkpoint(f"epoch_{epoch}.pt", step, None)

    def write_checkpoint(self, name: str, step: int, metric: float | None) -> None:
        model, optimizer = self.full_state()
        if self.world.rank != 0:
            return
        payload = {"model": model, "optimizer": optimizer, "step": step, "epoch": round(step / self.per_epoch, 2)}
        if self.ema is not None:
            payload["ema"] = self.ema.state_dict()
        if metric is not None:
            payload["metric"] = float(metric)
        write_whole(os.path.join(self.options.save_folder, name), payload, "--save")
        self.kept.append(name)

    def diverged(self, step: int, loss: float):
        """The error that stops a run whose loss is no longer finite."""
        last = (f"the last finite loss was {self.losses[-1]:.4f} at step {step}" if self.losses else
                "no step before it gave a finite loss")
        earlier = ", or resume from an earlier --save file" if self.options.resume else ""
        return error(f"training stopped at step {step + 1}: the loss is {loss} ({last})",
                     hint=f"lower --lr (it is {self.options.lr:g}){earlier}")

    # -- state ------------------------------------------------------------------------------------
    def full_state(self) -> tuple[dict, dict]:
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_optimizer_state_dict)

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return (get_model_state_dict(self.network, options=options),
                get_optimizer_state_dict(self.network, self.optimizer, options=options))

    def save(self, step: int) -> None:
        if self.options.fsdp:
            dcp.save(self.options.save, self.sharded_state(step), self.world)
            self.say(f"saved the model and optimizer at step {step} to {self.options.save} (sharded, {self.world.size} "
                     f"process{'es' if self.world.size > 1 else ''}; --resume reads it)")
            return
        model, optimizer = self.full_state()
        if self.world.rank == 0:
            write_whole(self.options.save, {"model": model, "optimizer": optimizer, "step": step}, "--save")
            self.say(f"saved the model and optimizer at step {step} to {self.options.save} (--resume reads it)")

    def say(self, line: str) -> None:
        """A line about what the run did (on stderr, beside progress; once, by the first process)."""
        if self.world.rank == 0:
            print(line, file=sys.stderr, flush=True)

    def expected(self) -> Expected:
        """What a resume file must hold for this model and optimizer."""
        tensors = {name: (tuple(t.shape), t.dtype) for name, t in self.model.state_dict().items()}
        parameters = {name: tuple(p.shape) for name, p in self.model.named_parameters()}
        groups = [{**{k: v for k, v in group.items() if k != "params"}, "params": names}
                  for group, names in zip(self.optimizer.param_groups, self.group_names)]
        return Expected(tensors, parameters, groups, self.options.optimizer)

    def sharded_state(self, step: int) -> dict:
        """Model and optimizer state as this run shards it (DTensors under FSDP2), for DCP."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        return dcp.flat_state(get_model_state_dict(self.network),
                              get_optimizer_state_dict(self.network, self.optimizer), step)

    def load_folder(self) -> int:
        """Load a --resume folder (DCP, checked first: dcp.py), resharded to this run; its step."""
        from torch.distributed.checkpoint.state_dict import (get_optimizer_state_dict, set_model_state_dict,
                                                             set_optimizer_state_dict)

        state = self.sharded_state(0)
        step = dcp.load(self.options.resume, state, self.world)
        set_model_state_dict(self.network, state["model"])
        groups = get_optimizer_state_dict(self.network, self.optimizer)["param_groups"]
        set_optimizer_state_dict(self.network, self.optimizer,
                                 {"state": state["optimizer"]["state"], "param_groups": groups})
        return step

    def load(self) -> int:
        """Load the --resume file (checked first: state.py) or folder (dcp.py); the step it reached."""
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                             set_optimizer_state_dict)

        path = resume_file(self.options.resume)
        if os.path.isdir(path):
            return self.load_folder()
        resumed = read_resume(path, self.expected())
        self.resumed_ema = resumed.ema
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
        set_model_state_dict(self.network, resumed.model, options=options)
        set_optimizer_state_dict(self.network, self.optimizer, resumed.optimizer, options=options)
        return resumed.step

    def summary(self) -> dict:
        per_step = sorted(self.seconds)
        return {"spec": self.report.name, "processes": self.world.size, "steps": len(self.losses),
                "first_loss": self.losses[0] if self.losses else None,
                "last_loss": self.losses[-1] if self.losses else None, "losses": self.losses,
                "median_seconds_per_step": per_step[len(per_step) // 2] if per_step else None,
                "samples_per_second": (self.options.batch * len(self.seconds) / sum(self.seconds)
                                       if sum(self.seconds) > 0 else None),
                "first_step": self.start, "last_step": self.end, "lrs": self.rates,
                "data": self.data.describe(), "evals": self.evals,
                "mode": "fsdp2" if self.options.fsdp else "ddp" if self.options.ddp else "single"}

    def dump(self) -> None:
        model, _ = self.full_state()
        if self.world.rank == 0:
            write_whole(self.options.dump, {"losses": self.losses, "model": model}, "--dump")


# -- the command line ------------------------------------------------------------------------------------


def run(options: Options) -> dict:
    world = join_world()
    try:
        trainer = Trainer(options, world)
        trainer.setup()
        trainer.run()
        if options.dump:
            trainer.dump()
        summary = trainer.summary()
        if world.distributed:
            import torch.distributed as dist

            dist.barrier()  # no process tears gloo down while another's last collective is in flight
        return summary
    finally:
        if world.distributed:
            import torch.distributed as dist

            dist.destroy_process_group()


