"""Beam search, as Hugging Face's generate(num_beams=N) does it (transformers 5's vectorised
_beam_search: the top max(2, 1 + number of eos ids) x N continuations of all beams each step, the
best N that did not stop run on, those that stopped (eos, max length, a stopping criterion)
enter the finished beams scored by their summed log-probabilities / new length ** length_penalty,
and early_stopping True, False or "never" as its heuristics).

Each step runs the model over every beam's whole sequence (no key/value cache: beams are
reordered each step, and the cache is not yet), so it costs as forward does on the sequence so
far, per step; the logits are those of the cached decoding up to float rounding (the greedy tests
compare both). A decoder-only spec's prompts are of one length (no left padding) for now; an
encoder-decoder's source may be padded (forward takes its mask).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

NEVER = -1.0e9  # Hugging Face's "very large negative" score


@dataclass
class BeamResult:
    sequences: torch.Tensor  # [B, prompt + generated]
    sequences_scores: torch.Tensor  # [B]
    scores: tuple | None  # per step, the processed log-probabilities [B * beams, vocab]


def gather_beams(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """tensor [B, beams, ...] at beam `indices` [B, n] -> [B, n, ...]."""
    while indices.dim() < tensor.dim():
        indices = indices.unsqueeze(-1)
    return torch.take_along_dim(tensor, indices, dim=1)


def last_logits(decoder, ids: torch.Tensor, source) -> torch.Tensor:
    """The last position's logits [N, vocab] in float32, the whole sequence through forward."""
    return all_logits(decoder, ids, source)[:, -1, :].float()  # [N, L, vocab] -> [N, vocab]


def all_logits(decoder, ids: torch.Tensor, source) -> torch.Tensor:
    """Every position's logits [N, L, vocab] of the sequences `ids` [N, L] through forward."""
    out = decoder.model(*forward_inputs(decoder, ids, source))
    return out[decoder.output] if isinstance(out, (tuple, list)) else out


def forward_inputs(decoder, ids: torch.Tensor, source) -> list:
    """forward's arguments for the sequences `ids` [N, L]: the fed inputs (the source's, then the
    ids), and ones for a padding mask the cached attention reads (beams start from prompts of one
    length: nothing is padded)."""
    facts = decoder.model.facts
    given = dict(zip(facts.fed_inputs, (*(source or ()), ids)))
    return [given[name] if name in given else torch.ones_like(ids) for name in facts.inputs]


@torch.no_grad()
def beam_search(decoder, input_ids, source, max_new_tokens: int, num_beams: int, processors, stopping,
                length_penalty: float = 1.0, early_stopping=False, pad: int | None = None, output_scores=False,
                sampling=None, generator=None) -> BeamResult:
    """The best beam of each sequence (module docstring); `source`: an encoder-decoder's source inputs."""
    batch, prompt = input_ids.shape
    beams, eos = num_beams, stopping.eos
    max_length = prompt + max_new_tokens
    keep = max(2, 1 + len(eos)) * beams
    top_beams = torch.cat([torch.ones(beams, dtype=torch.bool), torch.zeros(keep - beams, dtype=torch.bool)])
    fill = (pad if pad else eos[0]) if eos else -1  # Hugging Face's output_fill_value
    source = tuple(s.repeat_interleave(beams, dim=0) for s in source) if source is not None else None
    running = torch.full((batch, beams, max_length), fill, dtype=torch.long)  # [B, beams, max length]
    running[:, :, :prompt] = input_ids.repeat_interleave(beams, dim=0).view(batch, beams, prompt)
    sequences = running.clone()
    running_scores = torch.zeros(batch, beams)
    running_scores[:, 1:] = NEVER  # the first step continues one beam only
    beam_scores = torch.full((batch, beams), NEVER)
    finished = torch.zeros(batch, beams, dtype=torch.bool)
    improvable = torch.ones(batch, 1, dtype=torch.bool)
    running_origin = torch.full((batch, beams, max_new_tokens), -1, dtype=torch.long)  # which beam each token extended
    origin = running_origin.clone()
    all_scores = [] if output_scores else None
    length = prompt
    while True:
        flat = running[:, :, :length].reshape(batch * beams, length)  # [B * beams, length]
        log_probs = processors(flat, torch.log_softmax(last_logits(decoder, flat, source), dim=-1))
        if sampling is not None and sampling.do_sample:
            log_probs = sampling.warp(log_probs)
        if all_scores is not None:
            all_scores.append(log_probs.clone())
        vocab = log_probs.shape[-1]
        summed = (log_probs.view(batch, beams, vocab) + running_scores[:, :, None]).view(batch, beams * vocab)
        top_scores, top_index = top_continuations(summed, keep, sampling, generator)  # [B, keep]
        from_beam, token = top_index // vocab, top_index % vocab
        top_running = gather_beams(running, from_beam)  # [B, keep, max length]
        top_running[:, :, length] = token
        top_origin = gather_beams(running_origin, from_beam)
        top_origin[:, :, length - prompt] = from_beam + torch.arange(batch)[:, None] * beams
        flat_top = top_running[:, :, :length + 1].reshape(batch * keep, length + 1)
        hits = stopping(flat_top, tuple(all_scores) if all_scores is not None else None).view(batch, keep)
        if length + 1 >= max_length:
            hits = torch.ones_like(hits)  # Hugging Face's MaxLengthCriteria
        blocked = top_scores + hits.float() * NEVER
        chosen = torch.topk(blocked, k=beams)[1]
        running, running_scores = gather_beams(top_running, chosen), gather_beams(blocked, chosen)
        running_origin = gather_beams(top_origin, chosen)
        candidates = top_scores / ((length + 1 - prompt) ** length_penalty)
        just_finished = hits & top_beams[None, :]
        full = finished.all(dim=-1, keepdim=True) & (early_stopping is True)
        candidates = candidates + full.float() * NEVER + (~improvable).float() * NEVER + (~just_finished) * NEVER
        best = torch.topk(torch.cat([beam_scores, candidates], dim=1), k=beams)[1]
        sequences = gather_beams(torch.cat([sequences, top_running], dim=1), best)
        beam_scores = gather_beams(torch.cat([beam_scores, candidates], dim=1), best)
        origin = gather_beams(torch.cat([origin, top_origin], dim=1), best)
        finished = gather_beams(torch.cat([finished, just_finished], dim=1), best)
        length += 1
        improvable = still_improvable(improvable, running_scores, beam_scores, finished, length, max_length, prompt,
                                      early_stopping, length_penalty)
        open_beam = not (bool(finished.all()) and early_stopping is True)
        if not (bool(improvable.any()) and open_beam and not bool(hits.all())):
            break
    generated = int((origin[:, 0] + 1).bool().sum(dim=1).max())
    return BeamResult(sequences[:, 0, :prompt + generated], beam_scores[:, 0],
                      tuple(all_scores) if all_scores is not None else None)


def top_continuations(summed: torch.Tensor, keep: int, sampling, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The `keep` best (or, sampling, drawn) continuations [B, keep] of summed log-probs [B, beams * vocab]."""
    if sampling is not None and sampling.do_sample:
        index = torch.multinomial(torch.softmax(summed, dim=-1), num_samples=keep, generator=generator)
        scores, order = torch.gather(summed, 1, index).sort(dim=-1, descending=True)
        return scores, index.gather(-1, order)
    return torch.topk(summed, k=keep)


def still_improvable(improvable, running_scores, beam_scores, finished, length, max_length, prompt, early_stopping,
                     length_penalty) -> torch.Tensor:
    """[B, 1]: whether a running beam may still beat the worst finished one (Hugging Face's
    _check_early_stop_heuristic)."""
    if early_stopping == "never" and length_penalty > 0.0:
        best_length = max_length - prompt
    else:
        best_length = length - prompt
    best_running = running_scores[:, :1] / (best_length ** length_penalty)
    worst_finished = torch.where(finished, torch.min(beam_scores, dim=1, keepdim=True)[0], NEVER)
    return improvable & torch.any(best_running > worst_finished, dim=-1, keepdim=True)
