"""What a built spec is: an `ArchspecModel`, a torch.fx.GraphModule whose forward computes the
spec's outputs from its inputs, with the interface training code written for timm expects:

    forward_features(*inputs) / forward_head(x, pre_logits=False)   the network before its head, the head
    num_classes, reset_classifier(num_classes)                      a classify (or distilled) head
    no_weight_decay()                                               positions, tokens, tables, scales, norms, biases
    group_matcher(coarse=False)                                     layer ids for layer-wise lr decay
    set_grad_checkpointing(True)                                    activation checkpointing per block
    forward_intermediates(*inputs, indices=...)                     per-stage features, images [B, C, H, W]

and the spec's objectives (`objectives:`), computed by `loss` / `losses`, never by forward:
they read forward's outputs and the inputs and targets, and add no parameters.

What these methods need from the spec (which node is the head, which modules are blocks and
stages) is recorded at lowering in a `ModelFacts` (interface.py), `self.facts`.

Calling the model refuses an input outside its declared shape (a sequence longer than its
dim's range, an image of another size, another rank) with a ValueError naming the input, what
the spec declares and where (`InputShape`, recorded at lowering in meta["archspec_inputs"]).
The batch is not checked. The check is a few integer comparisons, made in eager only: under
torch.compile and torch.export (`torch.compiler.is_compiling()`) it is skipped, and the
exported program keeps its own guards (the dims' ranges).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.fx
import torch.nn as nn

from .interface import Head, ModelFacts, Stage

NO_DECAY_NAMES = ("pos_embed", "cls_token", "tokens", "token", "table", "logit_scale", "value")


@dataclass(frozen=True)
class InputShape:
    """What the spec declares for one input: `checks` holds (dim index, lowest, highest) for
    every dim but the batch (a fixed size has lowest == highest, a symbolic dim its range),
    `symbols` the dims' names by index (symbolic dims only), `declared` the shape in words
    ([B, L]) and `where` the declaration's file:line."""

    name: str
    rank: int
    checks: tuple[tuple[int, int, int], ...]
    symbols: dict
    declared: str
    where: str
    sequence: bool  # dim 1 counts tokens (ids, tokens)

    def check(self, x) -> None:
        shape = getattr(x, "shape", None)
        if shape is None:
            return
        if len(shape) != self.rank:
            raise ValueError(self.refusal(f"is {_shape_words(shape)}", f"[{self.declared}]"))
        for index, lo, hi in self.checks:
            size = shape[index]
            if type(size) is not int:  # symbolic (a tracer's): the program's own guards hold
                return
            if not lo <= size <= hi:
                raise ValueError(self.wrong_size(shape, index, size, lo, hi))

    def wrong_size(self, shape, index: int, size: int, lo: int, hi: int) -> str:
        name = self.symbols.get(index)
        if name is None:
            return self.refusal(f"is {_shape_words(shape)}", f"[{self.declared}]")
        has = f"{size} tokens" if self.sequence and index == 1 else f"size {size} in dim {index}"
        return self.refusal(f"has {has}", f"{name} in {lo}..{hi}")

    def refusal(self, got: str, declared: str) -> str:
        where = f" ({self.where})" if self.where else ""
        return f"input '{self.name}' {got}; the spec declares {declared}{where}"


def _shape_words(shape) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def input_shapes(graph) -> tuple[InputShape, ...]:
    """Each model input's declared shape (for ArchspecModel's check), from the IR."""
    from archspec.core.types import Sym

    shapes = []
    for node in graph.inputs():
        t = node.type
        checks, symbols = [], {}
        for index, d in enumerate(t.shape):
            if isinstance(d, Sym):
                if d.name == "B":
                    continue
                checks.append((index, d.lo, d.hi))
                symbols[index] = d.name
            else:
                checks.append((index, d, d))
        loc = node.loc
        shapes.append(InputShape(node.name, len(t.shape), tuple(checks), symbols,
                                 ", ".join(str(d) for d in t.shape), f"{loc.file}:{loc.line}" if loc else "",
                                 t.layout in ("ids", "tokens")))
    return tuple(shapes)


class ArchspecModel(torch.fx.GraphModule):
    """A built spec (see the module docstring)."""

    def __call__(self, *args, **kwargs):
        if not torch.compiler.is_compiling():
            self.check_inputs(args)
        return super().__call__(*args, **kwargs)

    def check_inputs(self, args) -> None:
        """ValueError for an input outside the shape its spec declares (the module docstring)."""
        for declared, x in zip(self.__dict__.get("meta", {}).get("archspec_inputs", ()), args):
            declared.check(x)

    @property
    def facts(self) -> ModelFacts:
        """What the model knows of its spec, written at lowering (kept in meta for pickling)."""
        return self.meta["archspec"]

    # -- objectives ---------------------------------------------------------------------------------
    def loss(self, *args):
        """The total training loss, given the model's inputs and then the spec's targets."""
        return self.losses(*args)["loss"]

    def losses(self, *args) -> dict:
        """{objective name: value, ..., "loss": the weighted total}, given the inputs then the targets."""
        facts = self.facts
        count = len(facts.inputs)
        if len(args) != count + len(facts.targets):
            raise TypeError(f"loss takes the inputs ({', '.join(facts.inputs)}) and the targets "
                            f"({', '.join(facts.targets) or 'none'}): {count + len(facts.targets)} tensors, "
                            f"got {len(args)}")
        return self.losses_from(self(*args[:count]), *args)

    def losses_from(self, outputs, *args) -> dict:
        """The objectives from forward's `outputs` (e.g. of a DDP- or FSDP-wrapped forward),
        given the inputs then the targets."""
        objective = self.__dict__.get("_objective")
        if objective is None:
            raise TypeError("this model declares no objectives (a spec's `objectives:` section)")
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        distinct = list(dict.fromkeys(self.facts.output_nodes))
        by_node = dict(zip(self.facts.output_nodes, outputs))
        values = objective(*(by_node[n] for n in distinct), *args)
        return {**dict(zip(self.facts.objectives, values[1:])), "loss": values[0]}

    # -- the head -----------------------------------------------------------------------------------
    def _head(self) -> tuple[Head, nn.Module]:
        head = self.facts.head
        if head is None:
            raise TypeError("this model has no classifier head at its top level (a head of kind classify or "
                            "distilled that the model returns)")
        return head, self.get_submodule(head.path)

    @property
    def num_classes(self) -> int:
        head, module = self._head()
        fc = getattr(module, head.role.layers[0])
        return fc.out_features if isinstance(fc, nn.Linear) else 0

    def reset_classifier(self, num_classes: int) -> None:
        """A new classifier with `num_classes` outputs (0: none, the head gives pooled features)."""
        head, module = self._head()
        for name in head.role.layers:
            layer = nn.Linear(head.width, num_classes) if num_classes > 0 else nn.Identity()
            if num_classes > 0:
                nn.init.trunc_normal_(layer.weight, std=0.02)
                nn.init.zeros_(layer.bias)
            setattr(module, name, layer)

    def forward_features(self, *inputs):
        """The network up to its head: what the head reads (e.g. [B, N, C] tokens)."""
        features = self.__dict__.get("_features")
        if features is None:
            self._head()
            raise TypeError("forward_features needs the head to read one node at the model's top level")
        if not torch.compiler.is_compiling():
            self.check_inputs(inputs)
        return features(*inputs)

    def forward_head(self, x, pre_logits: bool = False):
        """The head on features; with pre_logits, what its classifier reads (pooled, normed)."""
        head, module = self._head()
        return head.role.pre_logits(module, x) if pre_logits else module(x)  # [B, N, C] -> [B, C] or logits

    # -- optimisation -----------------------------------------------------------------------------
    def no_weight_decay(self) -> set[str]:
        """Names of the parameters weight decay should leave alone, as timm's models list them:
        position embeddings, class/register/mask tokens, relative-position tables, logit scales,
        learned params, and every norm weight and bias (1-D)."""
        return {name for name, p in self.named_parameters()
                if p.ndim <= 1 or name.rsplit(".", 1)[-1] in NO_DECAY_NAMES}

    def group_matcher(self, coarse: bool = False):
        """A function from a parameter's name to its layer's ordinal, as timm's group_matcher
        (timm.optim param_groups_layer_decay accepts it): the stem (0,); each block (1, k) in
        order; coarse: each stage. Nodes between blocks belong to the next block; the final norm
        to the last; the head to no layer (the largest ordinal, as timm)."""
        layers = self.facts.coarse_layers if coarse else self.facts.layers
        ordered = sorted(layers.items(), key=lambda item: -len(item[0]))

        def ordinal(name: str):
            for prefix, value in ordered:
                if name == prefix or name.startswith(prefix + "."):
                    return value
            return (math.inf,)

        return ordinal

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass instead of keeping them."""
        for path in self.facts.blocks:
            self.get_submodule(path).checkpointing = enable

    # -- features for detection and segmentation ------------------------------------------------------
    def forward_intermediates(self, *inputs, indices=None, output_fmt: str = "NCHW",
                              intermediates_only: bool = False):
        """Each stage's output (the repetitions of the model's first repeat: ViT's blocks, Swin's
        and PVT's stages), tokens on a grid as images [B, C, H, W] (prefix tokens dropped) with
        output_fmt NCHW. `indices`: an int n (the last n) or a list of stage indices; default all.
        Returns (forward's output, [features]) or, with intermediates_only, [features]."""
        stages = self.facts.stages
        if not stages:
            raise TypeError("this model has no repeated stages to take intermediates from")
        chosen = _choose(indices, len(stages))
        seen, hooks = {}, []
        for i in chosen:
            def keep(module, args, output, i=i):
                seen[i] = output[0] if isinstance(output, tuple) else output
            hooks.append(self.get_submodule(stages[i].path).register_forward_hook(keep))
        try:
            out = self(*inputs)
        finally:
            for hook in hooks:
                hook.remove()
        features = [_layout(seen[i], stages[i], output_fmt) for i in chosen]
        return features if intermediates_only else (out, features)


def _choose(indices, count: int) -> list[int]:
    if indices is None:
        return list(range(count))
    if isinstance(indices, int):
        if not 0 < indices <= count:
            raise ValueError(f"indices={indices}: the model has {count} stages")
        return list(range(count - indices, count))
    chosen = [i % count for i in indices]
    if any(not -count <= i < count for i in indices):
        raise ValueError(f"indices {list(indices)}: the model has {count} stages")
    return chosen


def _layout(x, stage: Stage, output_fmt: str):
    """Tokens on a grid -> [B, C, H, W] (NCHW) or [B, H, W, C] (NHWC), prefix tokens dropped."""
    if stage.grid is None or x.dim() != 3:
        return x
    h, w = stage.grid
    x = x[:, stage.prefix:].reshape(x.shape[0], h, w, x.shape[-1])  # [B, prefix + HW, C] -> [B, H, W, C]
    return x.permute(0, 3, 1, 2).contiguous() if output_fmt == "NCHW" else x  # -> [B, C, H, W]
