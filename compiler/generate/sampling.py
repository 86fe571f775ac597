"""Choosing the next token from the last position's logits, as Hugging Face's generate does:
greedy (argmax), or sampling after its warpers in its order (temperature, top-k, top-p; each
left out at its neutral value: temperature 1, top_k None or 0, top_p None or 1)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    """How to choose: do_sample False is greedy and ignores the rest."""

    do_sample: bool = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None

    def check(self) -> None:
        if self.temperature is not None and not 0 < self.temperature < float("inf"):
            raise ValueError(f"temperature must be a positive finite number, got {self.temperature}")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"top_k must be 0 or more, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    def choose(self, logits: torch.Tensor, generator: torch.Generator | None = None,
               best: torch.Tensor | None = None) -> torch.Tensor:
        """The next token of each sequence [B] from float32 logits [B, vocab]; `best`: their
        argmax [B] where it was taken already (the compiled step's, faster than aten's)."""
        if not self.do_sample:
            return logits.argmax(dim=-1) if best is None else best
        # shifted so the best is 0 first: the same probabilities, and a tiny temperature makes the
        # others -inf (the greedy choice) instead of overflowing the best to inf (NaN probabilities)
        scores = self.warp(logits - logits.amax(dim=-1, keepdim=True))
        return torch.multinomial(scores.softmax(dim=-1), num_samples=1, generator=generator).squeeze(1)

    def warp(self, scores: torch.Tensor) -> torch.Tensor:
        if self.temperature is not None and self.temperature != 1.0:
            # a 0 stays 0 where a temperature below float32's least (1e-45) is 0 there (not 0 / 0)
            scores = torch.where(scores == 0, scores, scores / self.temperature)
        if self.top_k:
            scores = keep_top_k(scores, self.top_k)
        if self.top_p is not None and self.top_p < 1.0:
            scores = keep_top_p(scores, self.top_p)
        return scores


def keep_top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Scores below the k-th highest set to -inf (Hugging Face's TopKLogitsWarper)."""
    k = min(k, scores.shape[-1])
    threshold = torch.topk(scores, k)[0][..., -1, None]  # [B, 1]
    return scores.masked_fill(scores < threshold, -float("inf"))


def keep_top_p(scores: torch.Tensor, p: float) -> torch.Tensor:
    """The smallest set of most likely tokens whose probability reaches p kept, the rest -inf
    (Hugging Face's TopPLogitsWarper: at least one token kept)."""
    ordered, order = torch.sort(scores, descending=False)
    cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= (1 - p)
    drop[..., -1:] = False
    return scores.masked_fill(drop.scatter(1, order, drop), -float("inf"))
