"""generate(): Hugging Face's `generate` for a built spec, its arguments by name (no **kwargs).

Greedy and sampled decoding with none of the options below run in driver.py as before. With
repetition_penalty, no_repeat_ngram_size, min_new_tokens, forced_bos_token_id, forced_eos_token_id
(processors.py), stopping_criteria or
stop_strings, or return_dict_in_generate, the same cached decoding runs here with the
processors applied to each step's logits before choosing, in Hugging Face's order. num_beams > 1
is beam search (beam.py). A `tokenizer` (tokenizer.py) reads stop_strings.

The streamer is Hugging Face's: an object with put(tokens) and end(); put gets the prompt
first ([B, L]), then each step's new tokens ([B]); end() after the last. TextStreamer
(tokenizer.py) prints text. Beam search takes no streamer (as Hugging Face's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .beam import beam_search
from .cache import DecodeState
from .driver import as_list, check_compilable, chosen_compile, compiled_capacity, decoder_of, source_and_start
from .driver import generate as plain_generate
from .processors import Processors, Stopping
from .sampling import Sampling
from .tokenizer import TextTokenizer


@dataclass
class GenerateOutput:
    """What generate(return_dict_in_generate=True) gives, as Hugging Face's GenerateDecoderOnlyOutput:
    `sequences` [B, L + new]; `scores` (output_scores=True): per step the processed scores
    [B, vocab] (beam search: the log-probabilities [B * num_beams, vocab]); `sequences_scores`
    (beam search with output_scores): each returned beam's score. out["sequences"] works too."""

    sequences: torch.Tensor
    scores: tuple | None = None
    sequences_scores: torch.Tensor | None = None

    def __getitem__(self, key):
        if isinstance(key, str):
            return getattr(self, key)
        return tuple(v for v in (self.sequences, self.scores, self.sequences_scores) if v is not None)[key]

    def keys(self) -> tuple:
        return tuple(k for k in ("sequences", "scores", "sequences_scores") if getattr(self, k) is not None)


@torch.no_grad()
def generate(model, input_ids, max_new_tokens: int = 20, do_sample: bool = False, temperature: float | None = None,
             top_k: int | None = None, top_p: float | None = None, eos_token_id=None, pad_token_id: int | None = None,
             attention_mask=None, decoder_start_token_id: int | None = None, streamer=None,
             generator: torch.Generator | None = None, compile: bool | None = None,
             repetition_penalty: float | None = None, no_repeat_ngram_size: int | None = None,
             min_new_tokens: int | None = None, stopping_criteria=None, stop_strings=None, tokenizer=None,
             num_beams: int = 1, length_penalty: float = 1.0, early_stopping: bool | str = False,
             return_dict_in_generate: bool = False, output_scores: bool = False,
             forced_bos_token_id: int | None = None, forced_eos_token_id=None, decoder_input_ids=None):
    """The prompt `input_ids` [B, L] followed by up to `max_new_tokens` new tokens, [B, L + new],
    as Hugging Face's generate (same names, same results):

    do_sample, temperature, top_k, top_p   sampling with its warpers (greedy unless do_sample)
    eos_token_id, pad_token_id             a sequence that made eos continues with pad (eos by default)
    attention_mask                         0 marks left padding
    repetition_penalty                     > 1 makes tokens already in the sequence less likely
    no_repeat_ngram_size                   no n-gram of this size twice in a sequence
    min_new_tokens                         eos is not chosen before this many new tokens
    forced_bos_token_id                    the first token after a one-token start (an
                                           encoder-decoder's first new token)
    forced_eos_token_id                    the last token max_new_tokens allows (BART's and
                                           Marian's configs set both)
    stopping_criteria                      callables (input_ids, scores) -> bool [B] or bool, as
                                           Hugging Face's StoppingCriteria (a list of them)
    stop_strings, tokenizer                text that ends a sequence (needs the tokenizer: a
                                           tokenizer.json path or a Hugging Face tokenizer)
    num_beams, length_penalty,             beam search (the best beam; early_stopping True, False
    early_stopping                         or "never")
    return_dict_in_generate,               a GenerateOutput (.sequences, .scores,
    output_scores                          .sequences_scores) instead of the ids
    streamer                               put(tokens), end(): the prompt, then each step's tokens
    generator                              the torch.Generator sampling draws from
    compile                                True: the decode steps as one AOTInductor program
                                           (compiled.py), made at the first call for a batch and
                                           length (seconds) and kept on disk (kept_steps.py);
                                           None (default): through a kept or held one where one
                                           fits the call, eagerly otherwise; False: eagerly

    An encoder-decoder spec takes the source as input_ids (and its padding as attention_mask)
    and returns the target, [B, 1 + new], beginning with decoder_start_token_id; or [B, T + new]
    beginning with decoder_input_ids [B, T] (its first ids, after the start token where none of
    them begins with it, as Hugging Face's)."""
    compile = chosen_compile(model, compile, input_ids, max_new_tokens, num_beams)
    beams = num_beams > 1
    extras = (repetition_penalty not in (None, 1.0) or no_repeat_ngram_size or min_new_tokens or stopping_criteria
              or stop_strings or return_dict_in_generate or beams or forced_bos_token_id is not None
              or forced_eos_token_id is not None)
    if not extras:
        return plain_generate(model, input_ids, max_new_tokens, do_sample, temperature, top_k, top_p, eos_token_id,
                              pad_token_id, attention_mask, decoder_start_token_id, streamer, generator, compile,
                              decoder_input_ids)
    decoder = decoder_of(model)
    eos = as_list(eos_token_id)
    pad = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
    source, prompt, mask = prompt_of(decoder, input_ids, attention_mask, decoder_start_token_id, decoder_input_ids)
    padding = (mask != 0).int().argmax(dim=1) if attention_mask is not None and not decoder.encoder_decoder else None
    processors = Processors(repetition_penalty, no_repeat_ngram_size, min_new_tokens, eos, prompt.shape[1], padding,
                            forced_bos_token_id, as_list(forced_eos_token_id), prompt.shape[1] + max_new_tokens)
    stop_strings = (stop_strings,) if isinstance(stop_strings, str) else tuple(stop_strings or ())
    stopping = Stopping(eos, tuple(stopping_criteria or ()), stop_strings,
                        TextTokenizer(tokenizer) if stop_strings else None, prompt.shape[1])
    sampling = Sampling(do_sample, temperature, top_k, top_p)
    if beams:
        result = beam_search(decoder, prompt, source, max_new_tokens, num_beams, processors, stopping, length_penalty,
                             early_stopping, pad_token_id, output_scores, sampling, generator)
        return GenerateOutput(result.sequences, result.scores, result.sequences_scores if output_scores else None) \
            if return_dict_in_generate else result.sequences
    if compile:
        check_compilable(decoder)
    sequences, scores = decode(decoder, prompt, mask, source, max_new_tokens, processors, stopping, sampling, pad,
                               streamer, generator, compile, output_scores)
    return GenerateOutput(sequences, scores) if return_dict_in_generate else sequences


def prompt_of(decoder, input_ids, attention_mask, decoder_start_token_id, decoder_input_ids=None):
    """(the source inputs or None, the first ids of the sequence decoded, its mask), as driver.generate."""
    if not decoder.encoder_decoder:
        return None, input_ids, torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
    source, start = source_and_start(decoder, input_ids, attention_mask, decoder_start_token_id, decoder_input_ids)
    return source, start, torch.ones_like(start)


def decode(decoder, prompt, mask, source, max_new_tokens, processors, stopping, sampling, pad, streamer, generator,
           compile, output_scores) -> tuple[torch.Tensor, tuple | None]:
    """Cached decoding (as driver.decode) with the processors and stopping criteria; the
    sequences [B, L + new] and, with output_scores, each step's processed scores [B, vocab]."""
    capacity = prompt.shape[1] + max_new_tokens
    state = DecodeState(mask, compiled_capacity(capacity, decoder.max_length) if compile else capacity)
    if streamer is not None:
        streamer.put(prompt.cpu())
    sequences, scores = prompt, [] if output_scores else None
    unfinished = torch.ones(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    if max_new_tokens > 0:
        cache = decoder.new_cache(state)
        logits = decoder.logits(prompt, cache, source)
        next_logits = decoder.stepper(compile, cache)
        for step in range(max_new_tokens):
            processed = processors(sequences, logits)  # [B, vocab]
            if scores is not None:
                scores.append(sampling.warp(processed) if sampling.do_sample else processed)
            chosen = sampling.choose(processed, generator)  # [B]
            if stopping.pads:
                chosen = torch.where(unfinished, chosen, torch.full_like(chosen, pad))
            sequences = torch.cat([sequences, chosen[:, None]], dim=1)  # [B, L] -> [B, L + 1]
            if streamer is not None:
                streamer.put(chosen.cpu())
            unfinished = unfinished & ~stopping(sequences, tuple(scores) if scores is not None else None)
            if step + 1 == max_new_tokens or not bool(unfinished.any()):
                break
            state.advance()
            # the processed scores choose, not the step's argmax
            logits, _ = decoder.next_logits(next_logits, chosen[:, None], cache, source, lambda: sequences)
    if streamer is not None:
        streamer.end()
    return sequences, tuple(scores) if scores is not None else None
