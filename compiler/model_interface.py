"""The timm-style model interface, written once for both kinds of built model: the
`ArchspecModel` that `archspec.build` gives (compiler/model.py) and the class in a build's
standalone model.py (compiler/backends/source.py). This file imports only torch: source.py
copies everything below its imports into model.py verbatim, so the two cannot drift.

    forward_features(*inputs, output_fmt=None)   what the head reads; a hierarchical grid model
                                                 (Swin, PVT v2) gives [B, H, W, C] as timm's Swin,
                                                 others their tokens [B, N, C] as timm's ViT
    forward_head(x, pre_logits=False)            the head on what forward_features gave
    num_classes, reset_classifier(num_classes)   the classifier
    no_weight_decay(), group_matcher(coarse)     for timm's optimizer factories
    set_grad_checkpointing(enable)               activation checkpointing per block
    forward_intermediates(*inputs, indices=...)  each stage's output, images [B, C, H, W]

A class using `ModelInterface` gives it `_interface_facts` (an `InterfaceFacts`: what the
methods need to know of the spec) and `_head_input(*inputs)` (forward up to what the head
reads, as tokens [B, N, C]).
"""

import math

import torch.nn as nn

NO_DECAY_NAMES = ("pos_embed", "cls_token", "tokens", "token", "table", "logit_scale", "value", "attention_biases")
FEATURE_FORMATS = ("NHWC", "NCHW", "NLC")  # image-like channels last, channels first, tokens


class InterfaceFacts:
    """What the interface needs to know of the spec, as plain values (model.py writes them as
    literals): the classifier head's module path (None: no head), the attributes holding its
    linear maps, the width it reads and `pre_logits(head, tokens)`; the token grid of what the
    head reads (None: not on a grid), its prefix (class) tokens and forward_features' default
    format; the stages as (path, grid, prefix); the blocks; each module's layer ordinal per
    block and per stage (group_matcher)."""

    def __init__(self, head=None, head_layers=(), head_width=0, pre_logits=None, grid=None, prefix=0,
                 features_fmt="NLC", final_norm=None, stages=(), blocks=(), layers=None, coarse_layers=None):
        self.head, self.head_layers, self.head_width, self.pre_logits = head, tuple(head_layers), head_width, pre_logits
        self.grid, self.prefix, self.features_fmt, self.final_norm = grid, prefix, features_fmt, final_norm
        self.stages, self.blocks = tuple(stages), tuple(blocks)
        self.layers, self.coarse_layers = dict(layers or {}), dict(coarse_layers or {})


class ModelInterface:
    """The timm-style methods (this file's docstring), on `_interface_facts` and `_head_input`."""

    def _head_input(self, *inputs):
        """forward up to what the head reads, its tokens [B, N, C] (the model's class gives it;
        this one answers for a model whose forward does not call its head)."""
        self._classifier()
        raise TypeError("forward_features: this model's forward does not call its head at the top level")

    # -- the head -----------------------------------------------------------------------------------
    def _classifier(self):
        facts = self._interface_facts
        if facts.head is None:
            raise TypeError("this model has no classifier head at its top level (a head of kind classify or "
                            "distilled that the model returns); for a feature extractor, as timm's num_classes=0, "
                            "write a classify head and build it with create_model(..., num_classes=0)")
        return facts, self.get_submodule(facts.head)

    @property
    def num_classes(self) -> int:
        facts, module = self._classifier()
        fc = getattr(module, facts.head_layers[0])
        return fc.out_features if isinstance(fc, nn.Linear) else 0

    def reset_classifier(self, num_classes: int) -> None:
        """A new classifier with `num_classes` outputs (0: none, the head gives pooled features)."""
        facts, module = self._classifier()
        for name in facts.head_layers:
            layer = nn.Linear(facts.head_width, num_classes) if num_classes > 0 else nn.Identity()
            if num_classes > 0:
                nn.init.trunc_normal_(layer.weight, std=0.02)
                nn.init.zeros_(layer.bias)
            setattr(module, name, layer)

    def forward_features(self, *inputs, output_fmt=None):
        """The network up to its head. output_fmt: "NHWC" [B, H, W, C] (the default of a model
        whose stages shrink a token grid, as timm's Swin), "NCHW" [B, C, H, W] (timm's PVT v2),
        "NLC" the tokens the head reads [B, N, C] (the default of every other model, as timm's
        ViT). forward_head takes any of them."""
        facts, _ = self._classifier()
        fmt = facts.features_fmt if output_fmt is None else output_fmt
        if fmt not in FEATURE_FORMATS:
            raise ValueError(f"output_fmt={fmt!r}: one of {', '.join(FEATURE_FORMATS)}")
        return _interface_features(self._head_input(*inputs), facts, fmt)

    def forward_head(self, x, pre_logits: bool = False):
        """The head on features (as forward_features gives them, in any output_fmt); with
        pre_logits, what its classifier reads (pooled, normed)."""
        facts, module = self._classifier()
        x = _interface_tokens(x, facts)  # [B, H, W, C] or [B, C, H, W] -> [B, N, C]
        return facts.pre_logits(module, x) if pre_logits else module(x)  # [B, N, C] -> [B, C] or logits

    # -- optimisation -----------------------------------------------------------------------------
    def no_weight_decay(self) -> set:
        """Names of the parameters weight decay should leave alone, as timm's models list them:
        position embeddings, class/register/mask tokens, relative-position tables (and LeViT's and
        TinyViT's attention_biases), logit scales,
        learned params, and every norm weight and bias (1-D)."""
        return {name for name, p in self.named_parameters()
                if p.ndim <= 1 or name.rsplit(".", 1)[-1] in NO_DECAY_NAMES}

    def group_matcher(self, coarse: bool = False):
        """A function from a parameter's name to its layer's ordinal, as timm's group_matcher
        (timm.optim param_groups_layer_decay accepts it): the stem (0,); each block (1, k) in
        order; coarse: each stage. Nodes between blocks belong to the next block; the final norm
        to the last; the head to no layer (the largest ordinal, as timm)."""
        facts = self._interface_facts
        layers = facts.coarse_layers if coarse else facts.layers
        ordered = sorted(layers.items(), key=lambda item: -len(item[0]))

        def ordinal(name: str):
            for prefix, value in ordered:
                if name == prefix or name.startswith(prefix + "."):
                    return value
            return (math.inf,)

        return ordinal

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass instead of keeping them."""
        for path in self._interface_facts.blocks:
            self.get_submodule(path).checkpointing = enable

    # -- features for detection and segmentation ------------------------------------------------------
    def forward_intermediates(self, *inputs, indices=None, norm: bool = False, stop_early: bool = False,
                              output_fmt: str = "NCHW", intermediates_only: bool = False):
        """Each stage's output (the repetitions of the model's first repeat: ViT's blocks, Swin's
        and PVT's stages), tokens on a grid as images [B, C, H, W] (prefix tokens dropped) with
        output_fmt NCHW, [B, H, W, C] with NHWC, tokens [B, HW, C] with NLC. `indices`: an int n
        (the last n) or a list of stage indices; default all. `norm`: the final norm before the
        head applied to each stage's tokens of its width (timm: every block of a ViT or Mixer, the
        last stage of a Swin). `stop_early` is taken and changes nothing (the whole model runs).
        Returns (the final features, as forward_features gives them, [features]) as timm's, or
        forward's output first for a model without a classifier head; with intermediates_only,
        [features]."""
        stages = self._interface_facts.stages
        if not stages:
            raise TypeError("this model has no repeated stages to take intermediates from")
        if output_fmt not in FEATURE_FORMATS:
            raise ValueError(f"output_fmt={output_fmt!r}: one of {', '.join(FEATURE_FORMATS)}")
        chosen = _interface_choose(indices, len(stages))
        seen, hooks = {}, []
        for i in chosen:
            def keep(module, args, output, i=i):
                seen[i] = output[0] if isinstance(output, tuple) else output
            hooks.append(self.get_submodule(stages[i][0]).register_forward_hook(keep))
        facts = self._interface_facts
        if facts.head is not None and not intermediates_only:  # what the head reads: the final features
            hooks.append(self.get_submodule(facts.head).register_forward_pre_hook(
                lambda module, args: seen.__setitem__("head", args[0])))
        try:
            out = self(*inputs)
        finally:
            for hook in hooks:
                hook.remove()
        if norm:
            seen.update({i: _interface_normed(self, seen[i]) for i in chosen})
        features = [_interface_stage_layout(seen[i], stages[i], output_fmt) for i in chosen]
        if intermediates_only:
            return features
        final = _interface_features(seen["head"], facts, facts.features_fmt) if "head" in seen else out
        return final, features


def _interface_normed(model, x):
    """`x` through the final norm the head reads, where `x` is tokens [B, N, C] of its width."""
    path = model._interface_facts.final_norm
    if path is None:
        raise ValueError("norm=True: this model's head reads no final norm to apply to the intermediates")
    final = model.get_submodule(path)
    width = final.weight.shape[0] if getattr(final, "weight", None) is not None else None
    return final(x) if x.dim() == 3 and x.shape[-1] == width else x


def _interface_choose(indices, count: int) -> list:
    if indices is None:
        return list(range(count))
    if isinstance(indices, int):
        if not 0 < indices <= count:
            raise ValueError(f"indices={indices}: the model has {count} stages")
        return list(range(count - indices, count))
    if any(not -count <= i < count for i in indices):
        raise ValueError(f"indices {list(indices)}: the model has {count} stages")
    return [i % count for i in indices]


def _interface_stage_layout(x, stage, output_fmt: str):
    _, grid, prefix = stage
    if grid is None or x.dim() != 3:
        return x
    if output_fmt == "NLC":
        return x[:, prefix:]  # [B, prefix + HW, C] -> [B, HW, C]
    return _interface_layout(x, grid, prefix, output_fmt)


def _interface_features(tokens, facts, fmt: str):
    """What the head reads [B, N, C] in forward_features' format `fmt`."""
    if fmt == "NLC":
        return tokens
    if facts.grid is None or facts.prefix:
        why = "are not on a token grid" if facts.grid is None else f"carry {facts.prefix} prefix (class) tokens"
        raise ValueError(f"output_fmt={fmt!r}: this model's features {why}; output_fmt='NLC' gives its tokens "
                         "[B, N, C], forward_intermediates each stage's grid")
    return _interface_layout(tokens, facts.grid, 0, fmt)


def _interface_layout(x, grid, prefix: int, output_fmt: str):
    """Tokens on a grid -> [B, C, H, W] (NCHW) or [B, H, W, C] (NHWC), prefix tokens dropped."""
    h, w = grid
    x = x[:, prefix:].reshape(x.shape[0], h, w, x.shape[-1])  # [B, prefix + HW, C] -> [B, H, W, C]
    return x.permute(0, 3, 1, 2).contiguous() if output_fmt == "NCHW" else x  # -> [B, C, H, W]


def _interface_tokens(x, facts):
    """Features in any of forward_features' formats -> the tokens the head reads [B, N, C]."""
    if x.dim() != 4 or facts.grid is None:
        return x
    h, w = facts.grid
    if tuple(x.shape[1:]) == (h, w, facts.head_width):  # [B, H, W, C]
        return x.flatten(1, 2)
    if tuple(x.shape[1:]) == (facts.head_width, h, w):  # [B, C, H, W]
        return x.flatten(2).transpose(1, 2)
    raise ValueError(f"forward_head: features of shape {list(x.shape)} are neither [B, {h}, {w}, "
                     f"{facts.head_width}] nor [B, {facts.head_width}, {h}, {w}] nor tokens [B, N, C]")
