"""What generate() does to a step's scores before choosing, and when it stops, as Hugging Face's
logits processors and stopping criteria do (transformers/generation/logits_process.py and
stopping_criteria.py), in its order:

    repetition_penalty      a token already in the sequence: its score divided by the penalty
                            (multiplied, when negative); left padding of the prompt not counted
    no_repeat_ngram_size    a token that would repeat an n-gram of the sequence: -inf
    min_new_tokens          eos: -inf until that many new tokens are out
    forced_bos_token_id     the first token after a one-token start (an encoder-decoder's first
                            new token) is this one
    forced_eos_token_id     the last token the length allows is eos (every sequence ends with it)

and for stopping: eos, `stopping_criteria` (callables (input_ids, scores) -> a bool per
sequence, or one bool, as Hugging Face's StoppingCriteria) and `stop_strings` (text that ends a
sequence, read through the tokenizer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Processors:
    """The processors of one generate() call, applied in Hugging Face's order (module docstring)."""

    repetition_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    min_new_tokens: int | None = None
    eos: list = field(default_factory=list)
    prompt_length: int = 0  # tokens of the sequence before the first new one (min_new_tokens counts after)
    padding: torch.Tensor | None = None  # [B] left padding of each prompt (repetition_penalty skips it)
    forced_bos: int | None = None
    forced_eos: list = field(default_factory=list)
    max_length: int = 0  # the sequence's length after the last new token (forced_eos forces the token before)

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """The step's scores [B, vocab] processed, given the sequences so far [B, length]."""
        if self.repetition_penalty is not None and self.repetition_penalty != 1.0:
            scores = penalise_repetition(ids, scores, self.repetition_penalty, self.padding)
        if self.no_repeat_ngram_size:
            scores = ban_repeated_ngrams(ids, scores, self.no_repeat_ngram_size)
        if self.min_new_tokens and self.eos and ids.shape[1] - self.prompt_length < self.min_new_tokens:
            scores = scores.clone()
            scores[:, self.eos] = -float("inf")
        if self.forced_bos is not None and ids.shape[1] == 1:
            scores = only(scores, [self.forced_bos])
        if self.forced_eos and ids.shape[1] == self.max_length - 1:
            scores = only(scores, self.forced_eos)
        return scores


def only(scores: torch.Tensor, tokens: list) -> torch.Tensor:
    """Hugging Face's forced-token processors: every score -inf but these tokens', which are 0."""
    forced = torch.full_like(scores, -float("inf"))  # [B, vocab]
    forced[:, tokens] = 0
    return forced


def penalise_repetition(ids: torch.Tensor, scores: torch.Tensor, penalty: float, padding) -> torch.Tensor:
    """Hugging Face's RepetitionPenaltyLogitsProcessor (with its prompt_ignore_length: left padding)."""
    vocab = scores.shape[-1]
    if padding is not None:
        positions = torch.arange(ids.shape[1], device=ids.device)
        ids = ids.masked_fill(positions[None, :] < padding.to(ids.device)[:, None], vocab)  # padding: no token
    scores = torch.nn.functional.pad(scores, (0, 1))  # [B, vocab] -> [B, vocab + 1]: a column for "no token"
    ids = ids.clamp(max=vocab)
    seen = torch.gather(scores, 1, ids)  # [B, length]
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return scores.scatter(1, ids, seen)[..., :vocab]  # [B, vocab + 1] -> [B, vocab]


def ban_repeated_ngrams(ids: torch.Tensor, scores: torch.Tensor, size: int) -> torch.Tensor:
    """Hugging Face's NoRepeatNGramLogitsProcessor: a token that would complete an n-gram the
    sequence already holds is -inf."""
    length = ids.shape[1]
    if length + 1 < size:
        return scores
    scores = scores.clone()
    for row, sequence in enumerate(ids.tolist()):
        following: dict[tuple, list] = {}
        for gram in zip(*[sequence[i:] for i in range(size)]):
            following.setdefault(tuple(gram[:-1]), []).append(gram[-1])
        banned = following.get(tuple(sequence[length + 1 - size:length]), [])
        if banned:
            scores[row, banned] = -float("inf")
    return scores


@dataclass
class Stopping:
    """Which sequences stop after a step: eos, the user's criteria, stop strings."""

    eos: list = field(default_factory=list)
    criteria: tuple = ()
    stop_strings: tuple = ()
    tokenizer: object = None  # a TextTokenizer (tokenizer.py), for stop_strings
    prompt_length: int = 0

    @property
    def pads(self) -> bool:
        """Whether a stopped sequence continues with the pad token (Hugging Face: when eos is given)."""
        return bool(self.eos)

    def __call__(self, ids: torch.Tensor, scores) -> torch.Tensor:
        """[B] True for each sequence that is done after its last token."""
        done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
        if self.eos:
            done |= torch.isin(ids[:, -1], torch.tensor(self.eos, device=ids.device))
        for criterion in self.criteria:
            done = done | as_flags(criterion(ids, scores), ids.shape[0], ids.device)
        if self.stop_strings:
            done |= self.ends_with_a_stop_string(ids)
        return done

    def ends_with_a_stop_string(self, ids: torch.Tensor) -> torch.Tensor:
        """[B] True where a stop string ends inside the last token's text (the new tokens decoded)."""
        flags = []
        for sequence in ids[:, self.prompt_length:].tolist():
            text = self.tokenizer.decode(sequence)
            before = len(self.tokenizer.decode(sequence[:-1])) if len(sequence) > 1 else 0
            flags.append(any(text.find(s, max(0, before - len(s) + 1)) >= 0 for s in self.stop_strings))
        return torch.tensor(flags, dtype=torch.bool, device=ids.device)


def as_flags(value, batch: int, device) -> torch.Tensor:
    """A stopping criterion's answer as [B] bools: a bool tensor [B] or [1], or one Python bool."""
    if isinstance(value, torch.Tensor):
        if value.numel() not in (1, batch):
            raise ValueError(f"a stopping criterion returned {list(value.shape)}: it answers with one bool per "
                             f"sequence ({batch}) or one for all")
        return value.to(device=device, dtype=torch.bool).reshape(-1).expand(batch)
    if isinstance(value, bool):
        return torch.full((batch,), value, dtype=torch.bool, device=device)
    raise TypeError(f"a stopping criterion returned {type(value).__name__}: it answers with a bool tensor [batch] "
                    "or a bool (Hugging Face's StoppingCriteria)")
