"""generate()'s arguments, checked before anything is allocated: each wrong one is a plain Python
error in words (TypeError for a wrong kind, ValueError for a value out of range), never an
IndexError or RuntimeError from deep inside a decode step; and the memory the call will hold
(the KV cache for prompt + new tokens, the output, the sampling buffers) is compared with the
memory available first (archspec/core/memory.py; ARCHSPEC_MAX_BUILD_BYTES), a located
"ran out of memory" SpecError when it does not fit, as is an allocation that fails meanwhile.

    check_arguments(decoder, input_ids, **arguments)   types and ranges (Hugging Face's names, processors,
                                                        stopping criteria, beams)
    check_memory(decoder, input_ids, max_new_tokens)    the bytes the call holds, against what is free
    guarded(generate)                                   generate with both checks first (the public one)

The CLI (`archspec generate`) turns the ValueErrors and TypeErrors into usage errors (exit 2).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import numbers
import operator

import torch

from archspec.core.errors import error
from archspec.core.memory import MAX_BUILD_BYTES, available_bytes, human, ran_out_of_memory

SAMPLING_COPIES = 6  # float32 [B, vocab] buffers a sampled step holds at once (scores, warped, sorted, probs...)


def integer(name: str, value, low: int, high: int | None = None) -> int:
    """`value` as an int within [low, high]; TypeError for a non-integer (a bool too), ValueError
    outside the range."""
    if isinstance(value, bool) or isinstance(value, torch.Tensor) and value.dim() != 0:
        raise TypeError(f"{name} must be an integer, got {describe(value)}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {describe(value)}") from None
    if number < low or high is not None and number > high:
        shown = number if abs(number) < 10**18 else f"a number of {len(str(abs(number)))} digits"
        within = f"from {low} to {high}" if high is not None else f"{low} or more"
        raise ValueError(f"{name} must be {within}, got {shown}")
    return number


def real(name: str, value, positive: bool = True, at_most: float | None = None) -> float:
    """`value` as a finite float (> 0 with `positive`, <= at_most); TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {describe(value)}")
    number = float(value) if abs(value) < 1e308 or not isinstance(value, int) else math.inf
    if not math.isfinite(number) or positive and not number > 0 or at_most is not None and number > at_most:
        bound = f"in (0, {at_most:g}]" if at_most is not None else "a positive finite number"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return number


def describe(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def token_ids(name: str, value, vocab: int) -> list[int]:
    """An id or a list of ids, each within the vocabulary."""
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise ValueError(f"{name} is an empty list: give a token id or leave it out")
    return [integer(name, v, 0, vocab - 1) for v in values]


def check_mask(attention_mask, input_ids, batch: int) -> None:
    """A tensor of input_ids' shape (of `batch` rows, [B, L], where input_ids is None: a source
    that is no ids) holding 0 (padding) and 1 only, each sequence with a token."""
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a tensor like input_ids, got {describe(attention_mask)}")
    if input_ids is not None and tuple(attention_mask.shape) != tuple(input_ids.shape):
        raise ValueError(f"attention_mask is {list(attention_mask.shape)}, input_ids {list(input_ids.shape)}: "
                         "they must have the same shape")
    if input_ids is None and (attention_mask.dim() != 2 or attention_mask.shape[0] != batch):
        raise ValueError(f"attention_mask is {list(attention_mask.shape)}: the source's padding mask is [{batch}, "
                         "its tokens]")
    if attention_mask.is_complex() or not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold 1 for each token and 0 for padding, nothing else")
    if not bool((attention_mask != 0).any(dim=1).all()):
        raise ValueError("attention_mask marks every token of a sequence as padding: each needs one token at least")


def check_arguments(decoder, input_ids, max_new_tokens=20, do_sample=False, temperature=None, top_k=None,
                    top_p=None, eos_token_id=None, pad_token_id=None, attention_mask=None,
                    decoder_start_token_id=None, streamer=None, generator=None, compile=None,
                    repetition_penalty=None, no_repeat_ngram_size=None, min_new_tokens=None, stopping_criteria=None,
                    stop_strings=None, tokenizer=None, num_beams=1, length_penalty=1.0, early_stopping=False,
                    return_dict_in_generate=False, output_scores=False, forced_bos_token_id=None,
                    forced_eos_token_id=None, decoder_input_ids=None) -> None:
    """TypeError or ValueError, in words, for an argument generate() cannot take (module docstring)."""
    check_processing(repetition_penalty, no_repeat_ngram_size, min_new_tokens, stopping_criteria, stop_strings,
                     tokenizer)
    check_beams(num_beams, length_penalty, early_stopping, streamer, attention_mask, compile, decoder.encoder_decoder)
    for name, value in (("return_dict_in_generate", return_dict_in_generate), ("output_scores", output_scores),
                        ("do_sample", do_sample)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {describe(value)}")
    if compile is not None and not isinstance(compile, bool):
        raise TypeError(f"compile must be True, False or None (a kept compiled step where there is one), got "
                        f"{describe(compile)}")
    if not decoder.source_ids:  # an encoder-decoder's source of another kind: driver.check_source_tensor
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() == 0:
            raise ValueError(f"input_ids must be the source, a tensor [{decoder.source.declared}]")
    elif not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype != torch.long:
        raise ValueError("input_ids must be a LongTensor [batch, length]")
    if input_ids.shape[0] == 0:
        raise ValueError("input_ids holds no sequences (a batch of 0): give at least one")
    integer("max_new_tokens", max_new_tokens, 0)
    if temperature is not None:
        real("temperature", temperature)
    if top_k is not None:
        integer("top_k", top_k, 0)
    if top_p is not None:
        real("top_p", top_p, at_most=1.0)
    if eos_token_id is not None:
        token_ids("eos_token_id", eos_token_id, decoder.vocab)
    if pad_token_id is not None:
        integer("pad_token_id", pad_token_id, 0, decoder.table_rows - 1)
    if forced_bos_token_id is not None:
        integer("forced_bos_token_id", forced_bos_token_id, 0, decoder.vocab - 1)
    if forced_eos_token_id is not None:
        token_ids("forced_eos_token_id", forced_eos_token_id, decoder.vocab)
    if decoder_start_token_id is not None:
        integer("decoder_start_token_id", decoder_start_token_id, 0, decoder.table_rows - 1)
    if decoder_input_ids is not None:
        check_target_prompt(decoder, decoder_input_ids, input_ids.shape[0])
    if attention_mask is not None:
        check_mask(attention_mask, input_ids if decoder.source_ids else None, input_ids.shape[0])
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {describe(generator)}")
    if streamer is not None and not (callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None))):
        raise TypeError(f"streamer must have put(tokens) and end(), as Hugging Face's streamers; got "
                        f"{describe(streamer)}")


def check_target_prompt(decoder, decoder_input_ids, batch: int) -> None:
    """decoder_input_ids: an encoder-decoder's target prompt, a LongTensor [B, T] of the source's batch."""
    if not decoder.encoder_decoder:
        raise ValueError(f"decoder_input_ids are an encoder-decoder's first target ids; {decoder.name} is "
                         "decoder-only: give the prompt as input_ids")
    if (not isinstance(decoder_input_ids, torch.Tensor) or decoder_input_ids.dim() != 2
            or decoder_input_ids.dtype != torch.long or decoder_input_ids.shape[1] == 0):
        raise ValueError("decoder_input_ids must be a LongTensor [batch, length] of one token at least")
    if decoder_input_ids.shape[0] != batch:
        raise ValueError(f"decoder_input_ids has {decoder_input_ids.shape[0]} sequences and the source {batch}")


def warn_leading_pad_rows(decoder, input_ids) -> None:
    """A prompt that begins with the embedding's padding row (`pad_id`) while neither an
    attention_mask nor pad_token_id says what is padding: Hugging Face's generate reads
    pad_token_id from the model's config and masks those tokens, generate here does not (the
    Gemma 2 trial's prompt with leading 0s: step scores 5.98 apart, without a word)."""
    from ..modules.embed import TokenEmbed

    rows = {m.tokens.padding_idx for m in decoder.model.modules()
            if isinstance(m, TokenEmbed) and m.tokens is not None and m.tokens.padding_idx is not None}
    leading = sorted(row for row in rows if bool((input_ids[:, 0] == row).any()))
    if leading:
        logging.getLogger("archspec").warning(
            "archspec: generate: a prompt begins with %d, the embedding's pad_id, and neither an attention_mask nor "
            "pad_token_id says what is padding, so it is read as a token; Hugging Face's generate takes "
            "pad_token_id from the model's config and masks it: pass pad_token_id=%d (or an attention_mask) for "
            "that", leading[0], leading[0])


def mask_from_pad_token(decoder, input_ids, attention_mask, pad_token_id, eos_token_id, num_beams: int = 1):
    """The attention_mask generate uses: the one given, or, as Hugging Face's generate infers it
    for a decoder-only model (GenerationMixin._prepare_attention_mask_for_generation; never for
    an encoder-decoder's source), where none is given and pad_token_id occurs in input_ids and
    is no eos token, input_ids != pad_token_id."""
    from .driver import as_list  # here, as guarded's imports of driver

    if attention_mask is None and pad_token_id is None and not decoder.encoder_decoder:
        warn_leading_pad_rows(decoder, input_ids)
    if attention_mask is not None or pad_token_id is None or decoder.encoder_decoder:
        return attention_mask
    if pad_token_id in as_list(eos_token_id) or not bool((input_ids == pad_token_id).any()):
        return None
    mask = (input_ids != pad_token_id).long()
    if not bool(mask.any(dim=1).all()):
        raise ValueError(f"pad_token_id {pad_token_id} is every token of a sequence, so Hugging Face's rule reads it "
                         "all as padding: give an attention_mask, or another pad_token_id")
    if decoder.whole_sequence is not None:  # the HunYuan trial was told its prompts were padded, not why
        raise ValueError(f"pad_token_id {pad_token_id} occurs in input_ids, which Hugging Face's rule reads as "
                         f"padding, and {decoder.name} decodes without a cache ({decoder.whole_sequence}), which "
                         "takes prompts of one length: give an attention_mask of ones to keep those tokens, or "
                         "prompts without that id")
    if num_beams > 1:
        raise ValueError(f"pad_token_id {pad_token_id} occurs in input_ids, which Hugging Face's rule reads as "
                         "padding, and num_beams > 1 takes prompts of one length for now: give prompts without it, "
                         "or an attention_mask of ones to keep those tokens")
    return mask


def check_processing(repetition_penalty, no_repeat_ngram_size, min_new_tokens, stopping_criteria, stop_strings,
                     tokenizer) -> None:
    """The logits processors' and stopping criteria's arguments (processors.py)."""
    if repetition_penalty is not None:
        real("repetition_penalty", repetition_penalty)
    if no_repeat_ngram_size is not None:
        integer("no_repeat_ngram_size", no_repeat_ngram_size, 0)
    if min_new_tokens is not None:
        integer("min_new_tokens", min_new_tokens, 0)
    if stopping_criteria is not None:
        if not isinstance(stopping_criteria, (list, tuple)):  # a StoppingCriteriaList is a list
            raise TypeError(f"stopping_criteria must be a list of callables (input_ids, scores) -> bool tensor, as "
                            f"Hugging Face's StoppingCriteriaList; got {describe(stopping_criteria)}")
        wrong = [c for c in stopping_criteria if not callable(c)]
        if wrong:
            raise TypeError(f"stopping_criteria holds {describe(wrong[0])}, which is not callable")
    if stop_strings is not None:
        strings = [stop_strings] if isinstance(stop_strings, str) else stop_strings
        if not isinstance(strings, (list, tuple)) or not strings or not all(isinstance(t, str) and t for t in strings):
            raise TypeError(f"stop_strings must be a non-empty str or a list of them, got {describe(stop_strings)}")
        if tokenizer is None:
            raise ValueError("stop_strings needs a tokenizer to read the text (tokenizer=a tokenizer.json path or a "
                             "Hugging Face tokenizer), as Hugging Face's generate does")
    if tokenizer is not None:
        from .tokenizer import TextTokenizer

        TextTokenizer(tokenizer)  # a TypeError or ValueError in words for a tokenizer it cannot read


def check_beams(num_beams, length_penalty, early_stopping, streamer, attention_mask, compile,
                encoder_decoder: bool = False) -> None:
    """Beam search's arguments, and what it does not take (beam.py)."""
    beams = integer("num_beams", num_beams, 1)
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, numbers.Real) \
            or not math.isfinite(length_penalty):
        raise TypeError(f"length_penalty must be a finite number, got {describe(length_penalty)}")
    if early_stopping not in (True, False, "never") or not isinstance(early_stopping, (bool, str)):
        raise ValueError(f'early_stopping must be True, False or "never", got {early_stopping!r}')
    if beams == 1:
        return
    if streamer is not None:
        raise ValueError("a streamer goes with num_beams=1: beam search chooses its tokens at the end (as Hugging "
                         "Face's generate)")
    if compile:
        raise ValueError("compile=True covers greedy and sampled decoding; leave it out with num_beams > 1")
    padded = attention_mask is not None and isinstance(attention_mask, torch.Tensor) and bool((attention_mask == 0).any())
    if padded and not encoder_decoder:  # an encoder-decoder's padding is its source's, which forward takes
        raise ValueError("num_beams > 1 takes prompts of one length for now (no left padding in attention_mask)")


def needed_bytes(decoder, batch: int, prompt: int, max_new_tokens: int) -> int:
    """What a call holds at its longest: each cached attention layer's keys and values for every
    token (a sliding window's ring only its window), the output ids, and the sampling buffers."""
    parameter = next(decoder.model.parameters(), None)
    size = parameter.element_size() if parameter is not None else 4
    length = (1 if decoder.encoder_decoder else prompt) + max_new_tokens
    cache = 0
    for m in decoder.attention:
        window = getattr(m, "window", None)
        slots = min(length, window) if window else length
        heads, key, value = m.cache_entry()  # what the layer caches per token (a latent layer: its latent)
        cache += batch * heads * slots * (key + value) * size
    return cache + batch * length * 8 + SAMPLING_COPIES * batch * decoder.vocab * 4


def check_memory(decoder, input_ids, max_new_tokens: int) -> None:
    """A SpecError, before anything is allocated, when the call would hold more than is free."""
    batch, prompt = input_ids.shape[0], input_ids.shape[1]  # an encoder-decoder's source: prompt unused
    need = needed_bytes(decoder, batch, prompt, max_new_tokens)
    have = available_bytes()
    if have is not None and need > have:
        raise error(f"generate: {decoder.name}'s key/value cache for {batch} x {prompt} prompt + {max_new_tokens:,} "
                    f"new tokens needs {human(need)}, more than the {human(have)} of memory free: it would run "
                    "out of memory", hint=f"ask for fewer new tokens or a smaller batch (or set {MAX_BUILD_BYTES})")


def guarded(generate):
    """`generate` (search.py's) with its arguments and memory checked first, and an allocation
    that fails while generating a located "ran out of memory" error."""
    signature = inspect.signature(generate)

    @functools.wraps(generate)
    def checked(model, input_ids, *args, **kwargs):
        from .driver import check_request, decoder_of

        bound = signature.bind(model, input_ids, *args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        decoder = decoder_of(arguments.pop("model"))
        check_arguments(decoder, **arguments)
        arguments["attention_mask"] = bound.arguments["attention_mask"] = mask_from_pad_token(
            decoder, input_ids, arguments["attention_mask"], arguments["pad_token_id"], arguments["eos_token_id"],
            arguments["num_beams"])
        check_request(decoder, input_ids, arguments["attention_mask"], arguments["max_new_tokens"],
                      arguments["decoder_start_token_id"], arguments["decoder_input_ids"])
        check_memory(decoder, input_ids, arguments["max_new_tokens"])
        try:
            return generate(*bound.args, **bound.kwargs)
        except (MemoryError, RuntimeError) as exc:
            if not ran_out_of_memory(exc):
                raise
            raise error(f"generate: {decoder.name} ran out of memory while generating "
                        f"({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})",
                        hint="ask for fewer new tokens or a smaller batch") from None

    return checked
