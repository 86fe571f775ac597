"""The router of a mixture of experts (the mlp primitive with `experts`): logits, scores, the
chosen experts and their weights, as Hugging Face's MixtralTopKRouter, DeepseekV3TopkRouter and
GptOssTopKRouter compute them.

`Router` is the linear that scores the experts (`<node>.router.weight` [E, C], `.bias` [E] with
`router_bias`, the correction bias `.correction` [E] with `router_correction`, a buffer); its
forward returns the router's logits [T, E], so the logits are what a forward hook on
`<node>.router` sees (as Hugging Face's OutputRecorder collects `router_logits` from its router
module). `recording_router_logits(model)` collects them for an auxiliary (load-balancing) loss.
`Router.weights(logits)` gives each token's weight for each expert, [T, E] in float32: the
chosen experts' weights, 0 elsewhere (the mixture is computed densely, so shapes do not depend on
the routing and it exports with a dynamic batch)."""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import Linear


class Router(Linear):
    """Scores `experts` per token and keeps `top_k` of them.

    score: softmax   softmax over every expert in float32, top_k of the probabilities (Mixtral)
           sigmoid   sigmoid of each logit, the logits computed in float32 (DeepSeek-V3)
           softmax_chosen  top_k of the logits, softmax over those k (GPT-OSS)
           sparsemixer  PhiMoE's two experts (sparsemixer below)
    correction: a per-expert bias added to the scores for choosing only (DeepSeek-V3's
    e_score_correction_bias); groups / top_groups: group-limited top-k (each group scored by the
    sum of its top 2 scores, the top_groups best kept, top_k chosen among their experts);
    normalize: the chosen weights divided by their sum; scale: then multiplied by this.
    Initialised as nn.Linear; its owner (mlp.MixtureOfExperts) gives it timm's truncated normal."""

    def __init__(self, dim, experts, top_k, score="softmax", bias=False, correction=False, groups=None,
                 top_groups=None, normalize=True, scale=1.0, jitter=0.01, group_score="top2_sum"):
        super().__init__(dim, experts, bias=bias)
        self.experts, self.top_k, self.score = experts, top_k, score
        self.jitter = jitter  # sparsemixer: the relative reach of a chosen logit's softmax (PhiMoE's router_jitter_noise)
        self.groups, self.top_groups = groups, top_groups
        self.group_score = group_score  # a group's score: its top 2 summed (DeepSeek-V3) or its largest (V2)
        self.normalize, self.scale = normalize, scale
        if correction:  # persistent: a checkpoint's values load; not a parameter: not trained
            self.register_buffer("correction", torch.zeros(experts))
        else:
            self.correction = None

    def forward(self, x):
        """The router's logits: [T, C] -> [T, E] (float32 for sigmoid scores, as DeepSeek-V3)."""
        if self.score == "sigmoid":
            bias = self.bias.float() if self.bias is not None else None
            return F.linear(x.float(), self.weight.float(), bias)
        return super().forward(x)

    def weights(self, logits):
        """Each token's weight for each expert, [T, E] in float32: the chosen experts' weights,
        0 elsewhere."""
        if self.score == "sparsemixer":  # in the logits' dtype, as PhiMoE's
            return sparsemixer(logits, self.jitter, self.training).float()
        logits = logits.float()
        if self.score == "softmax":
            scores = logits.softmax(-1)
        elif self.score == "sigmoid":
            scores = logits.sigmoid()
        else:  # softmax_chosen: chosen on the logits
            scores = logits
        if self.correction is None and self.groups is None:  # chosen by the scores themselves
            top, chosen = scores.topk(self.top_k, dim=-1)  # -> 2 x [T, k]
            if self.score == "softmax_chosen":
                top = top.softmax(-1)
            elif self.normalize:
                top = top / (top.sum(-1, keepdim=True) + 1e-20)
            weights = torch.zeros_like(scores).scatter(-1, chosen, top)  # -> [T, E]
        else:  # chosen by other values: the chosen scores are kept by a mask (a gather has no
            # TensorRT converter at a dynamic batch), summed over all experts, 0 where not chosen
            choice = scores + self.correction if self.correction is not None else scores
            if self.groups is not None:
                choice = self.in_kept_groups(choice)
            chosen = choice.topk(self.top_k, dim=-1)[1]  # -> [T, k]
            mask = torch.zeros_like(scores).scatter(-1, chosen, 1.0)  # -> [T, E], 1 where chosen
            if self.score == "softmax_chosen":
                weights = scores.masked_fill(mask == 0, float("-inf")).softmax(-1)
            else:
                weights = scores * mask
                if self.normalize:
                    weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return weights * self.scale if self.scale != 1.0 else weights

    def in_kept_groups(self, choice):
        """The scores for choosing, -inf outside the top_groups groups of each token (a group's
        score: the sum of its top 2 scores, or its largest)."""
        grouped = choice.reshape(-1, self.groups, self.experts // self.groups)  # [T, E] -> [T, G, E/G]
        if self.group_score == "max":  # DeepSeek-V2's group_limited_greedy
            group_scores = grouped.amax(dim=-1)  # -> [T, G]
        else:
            group_scores = grouped.topk(2, dim=-1)[0].sum(-1)  # -> [T, G]
        kept = group_scores.topk(self.top_groups, dim=-1)[1]  # -> [T, top_groups]
        mask = torch.zeros_like(group_scores).scatter(-1, kept, 1.0)  # -> [T, G], 1 where kept
        mask = mask[..., None].expand_as(grouped).reshape(choice.shape)  # -> [T, E]
        return choice.masked_fill(mask == 0, float("-inf"))

    def extra_repr(self):
        return (f"{super().extra_repr()}, top_k={self.top_k}, score={self.score}"
                + (f", groups={self.groups}, top_groups={self.top_groups}" if self.groups else ""))


@contextmanager
def recording_router_logits(model: nn.Module):
    """Within the block, every forward records each router's logits [T, E] (T = batch x tokens)
    under its module path (`layers.0.mlp.router`): the input of an auxiliary load-balancing loss
    (Hugging Face's `output_router_logits`; its load_balancing_loss_func takes them in order).

        with recording_router_logits(model) as logits:
            out = model(ids)
        aux = load_balancing_loss_func(tuple(logits.values()), experts, top_k)
    """
    found: dict[str, torch.Tensor] = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, Router):
            handles.append(module.register_forward_hook(
                lambda _module, _args, out, name=name: found.__setitem__(name, out)))
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()


def sparsemixer(scores, jitter: float, training: bool):
    """PhiMoE's router (Hugging Face's `sparsemixer`), as dense weights [T, E]: two experts, the best
    logit's, then the best of the others; each weighted by a softmax over the logits within 2 x
    jitter (relative) of its own. In training each is chosen by Gumbel sampling among those logits
    instead, and its weight's gradient is Heun's third-order estimate (SparseMixerMultiplier): the
    random draws come in Hugging Face's order, so a seeded step is its step."""
    weights = torch.zeros_like(scores)  # [T, E]
    masked = scores
    for second in (False, True):
        with torch.no_grad():
            threshold, best = masked.max(dim=-1, keepdim=True)  # [T, 1]
            factor = scores.abs().clamp(min=threshold)  # [T, E]
            far = ((threshold - scores) / factor) > (2 * jitter)  # [T, E]: outside the chosen logit's reach
        gates = masked.masked_fill(far, float("-inf"))  # [T, E]
        if training:  # Gumbel sampling
            noise = torch.empty_like(gates, memory_format=torch.legacy_contiguous_format).exponential_().log()
            chosen = (gates - noise).max(dim=-1)[1].unsqueeze(-1)  # [T, 1]
        else:
            chosen = best
        gates = gates.softmax(-1)  # [T, E]
        multiplier = gates.gather(-1, chosen)  # [T, 1]
        if training:
            top, top_index = gates.max(dim=-1, keepdim=True)
            draw = torch.rand_like(top)
            if second:
                draw = draw.uniform_()  # Hugging Face draws twice here: the same draws, the same step
            midpoint = torch.logical_or(chosen == top_index, draw > 0.75)  # Heun's third-order method
            midpoint = torch.add(0.3333, midpoint, alpha=0.6667).type_as(gates)  # 1 -> 1.0, 0 -> 0.3333
            multiplier = SparseMixerMultiplier.apply(scores, multiplier, chosen, gates, midpoint)
        weights = weights.scatter(-1, chosen, multiplier)  # [T, E], the chosen expert's weight
        masked = torch.scatter(scores, -1, chosen, float("-inf"))  # the first chosen out of the second round
    return weights


class SparseMixerMultiplier(torch.autograd.Function):
    """The chosen expert's weight times the midpoint mask forward; backward, the gradient at the
    scores that Heun's method gives (Hugging Face's PhimoeMultiplier)."""

    @staticmethod
    def forward(ctx, scores, multiplier, chosen, gates, midpoint):
        ctx.save_for_backward(multiplier, chosen, gates)
        return multiplier * midpoint

    @staticmethod
    def backward(ctx, grad):
        multiplier, chosen, gates = ctx.saved_tensors
        grad = grad * multiplier  # [T, 1]
        at_scores = gates * grad.mul(-1)  # [T, E]
        at_scores.scatter_add_(dim=-1, index=chosen, src=grad)
        return at_scores, None, None, None, None
