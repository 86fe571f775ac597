"""The training loop behind `python -m archspec.train` (see the package's docstring).

The options are range-checked before this runs (options.py); here the batch's memory is
checked against the report before the model is built (memory.py), a resume file against the
built model and optimizer (state.py), and a loss that is not finite stops the run with the step
and the last finite loss instead of training on to NaN.
"""

from __future__ import annotations

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
from .memory import check_batch_memory, size
from .options import DATASET, Options
from .state import Expected, read_resume, write_whole


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
        elif len(graph.outputs) == 1 and graph.record(graph.outputs[0].node).op.label == "head/lm":
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
        ids = batch[self.inputs[0]]  # lm: position t predicts token t + 1
        return F.cross_entropy(outputs[:, :-1].reshape(-1, outputs.shape[-1]).float(), ids[:, 1:].reshape(-1))


# -- the run --------------------------------------------------------------------------------------------


@dataclass
class Trainer:
    options: Options
    world: World = field(default_factory=World)
    losses: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def setup(self) -> None:
        o = self.options
        self.report = check(o.spec, o.overrides)
        check_batch_memory(self.report, o.batch, self.world.size)
        self.model = build(o.spec, o.overrides, seed=o.seed).train()
        self.objective = Objective(self.model, self.report.graph)
        self.objective.model_for_losses = self.model
        self.data = synthetic_dataset(self.report.graph, o.seed)
        if self.objective.kind == "classify":
            self.data["__labels__"] = torch.randint(0, self.objective.classes, (DATASET,),
                                                    generator=torch.Generator().manual_seed((o.seed + 1) % 2**64))
        if o.checkpointing:
            self.model.set_grad_checkpointing(True)
        self.network = self.wrap(self.model)
        groups = self.param_groups()
        self.optimizer = (torch.optim.SGD(groups, lr=o.lr) if o.optimizer == "sgd" else
                          torch.optim.AdamW(groups, lr=o.lr))
        self.start = self.load() if o.resume else 0

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

    def batch(self, step: int) -> dict:
        """This process's share of the step's global batch."""
        o = self.options
        start = (step * o.batch) % DATASET
        rows = torch.arange(start, start + o.batch) % DATASET
        share = o.batch // self.world.size
        rows = rows[self.world.rank * share:(self.world.rank + 1) * share]
        return {name: values[rows] for name, values in self.data.items()}

    def step(self, step: int) -> float:
        batch = self.batch(step)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if self.options.bf16 else nullcontext()
        self.optimizer.zero_grad(set_to_none=True)
        with autocast:
            outputs = self.network(*[batch[n] for n in self.objective.inputs])
            loss = self.objective(outputs, batch)
        loss.backward()
        self.optimizer.step()
        return self.global_mean(loss.detach().float())

    def global_mean(self, value: torch.Tensor) -> float:
        if self.world.distributed:
            import torch.distributed as dist

            value = value.clone()
            dist.all_reduce(value)
            value /= self.world.size
        return float(value)

    def run(self) -> None:
        o = self.options
        for step in range(self.start, self.start + o.steps):
            begin = time.perf_counter()
            loss = self.step(step)
            if not math.isfinite(loss):
                raise self.diverged(step, loss)
            self.seconds.append(time.perf_counter() - begin)
            self.losses.append(loss)
            if self.world.rank == 0 and not o.as_json:
                print(f"step {step + 1}/{self.start + o.steps}  loss {loss:.4f}  {self.seconds[-1]:.2f} s",
                      file=sys.stderr, flush=True)
        if o.save:
            self.save(self.start + o.steps)

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
        model, optimizer = self.full_state()
        if self.world.rank == 0:
            write_whole(self.options.save, {"model": model, "optimizer": optimizer, "step": step}, "--save")

    def expected(self) -> Expected:
        """What a resume file must hold for this model and optimizer."""
        tensors = {name: (tuple(t.shape), t.dtype) for name, t in self.model.state_dict().items()}
        parameters = {name: tuple(p.shape) for name, p in self.model.named_parameters()}
        groups = [{**{k: v for k, v in group.items() if k != "params"}, "params": names}
                  for group, names in zip(self.optimizer.param_groups, self.group_names)]
        return Expected(tensors, parameters, groups, self.options.optimizer)

    def load(self) -> int:
        """Load the --resume file (checked first: state.py); the step it reached."""
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                             set_optimizer_state_dict)

        resumed = read_resume(self.options.resume, self.expected())
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
        return trainer.summary()
    finally:
        if world.distributed:
            import torch.distributed as dist

            dist.destroy_process_group()


