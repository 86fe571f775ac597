"""`archspec generate SPEC --ids 1,2,3`: new token ids from a decoder-only spec, printed as they
come (greedy, or sampled with --do-sample), with a key/value cache (compiler/generate/).

    archspec generate gpt2 --weights gpt2.safetensors --ids 464,3290 --max-new-tokens 20
    archspec generate llama --ids 1,15043 --do-sample --temperature 0.8 --top-p 0.9 --seed 1
    archspec generate transformer_base --weights wmt.pt --ids 41,7,900 --decoder-start 0
    archspec generate llama --ids 1,15043 --max-new-tokens 500 --compile
    archspec generate gpt2 --weights gpt2.safetensors --tokenizer tokenizer.json --prompt "Hello, my dog"
    archspec generate gpt2 --ids 464,3290 --num-beams 4 --repetition-penalty 1.2 --no-repeat-ngram-size 3

It prints the new ids on one line, separated by spaces, each as soon as it is chosen; with
--tokenizer (a tokenizer.json, read by the tokenizers package) the prompt may be text (--prompt)
and the new tokens are printed as text. Beam search (--num-beams) prints its best beam at the end. A spec
that cannot generate (no lm head, attention that sees later tokens, other inputs than ids) is
an error saying why (exit 1); ids outside the vocabulary and more tokens than the spec's longest
sequence are usage errors (exit 2), before any decoding. --compile runs the decode steps as one
AOTInductor program compiled first (seconds; worth it for long outputs; decoder-only specs) and
kept on disk (docs/generate.md); without it a kept one is used where it fits, and --no-compile
decodes eagerly whatever is kept.
"""

from __future__ import annotations

import argparse
import re
import sys

from ...budget import check_build_memory
from ...core.errors import UsageError
from ...pipeline import check_file
from .common import add_spec_arguments, checked_seed, counted, overrides_of, spec_path

NAME = "generate"
HELP = ("generate token ids with a decoder-only spec (gpt2, llama) or an encoder-decoder (t5_small, with "
        "--decoder-start), printing them as they come")
MAX_NEW_TOKENS = 1_000_000  # beyond any shipped spec's context; the spec's own length bounds it first


def add_arguments(parser) -> None:
    add_spec_arguments(parser)
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--ids", metavar="I,J,...", help="the prompt's token ids, comma-separated")
    prompt.add_argument("--prompt", metavar="TEXT", help="the prompt as text (needs --tokenizer)")
    parser.add_argument("--tokenizer", metavar="FILE", help="a tokenizer.json (the tokenizers package): --prompt is "
                                                            "encoded with it and the new tokens printed as text")
    parser.add_argument("--num-beams", type=int, default=1, metavar="N", help="beam search with N beams (default 1)")
    parser.add_argument("--repetition-penalty", type=float, default=None, metavar="P",
                        help="> 1 makes tokens already in the sequence less likely (Hugging Face's)")
    parser.add_argument("--no-repeat-ngram-size", type=int, default=None, metavar="N",
                        help="no n-gram of N tokens twice")
    parser.add_argument("--min-new-tokens", type=int, default=None, metavar="N",
                        help="with --eos: not before N new tokens")
    parser.add_argument("--max-new-tokens", type=int, default=20, metavar="N",
                        help="how many tokens to add (default 20; prompt + N within the spec's longest sequence)")
    parser.add_argument("--weights", metavar="FILE", help="load weights first (as for build)")
    parser.add_argument("--map", dest="mapping", metavar="FILE",
                        help="with --weights: a weight mapping file (YAML) for a checkpoint named another way, "
                             "tried after the spec's own (as for build)")
    parser.add_argument("--do-sample", action="store_true", help="sample instead of choosing the likeliest token")
    parser.add_argument("--temperature", type=float, default=None, help="divide the logits by this (sampling)")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k likeliest tokens")
    parser.add_argument("--top-p", type=float, default=None, help="sample among the likeliest tokens whose "
                                                                  "probabilities reach p")
    parser.add_argument("--eos", type=int, default=None, metavar="ID", help="stop after this token id")
    parser.add_argument("--decoder-start", type=int, default=None, metavar="ID",
                        help="an encoder-decoder spec (transformer_base): --ids is the source, and the target "
                             "begins with this id")
    parser.add_argument("--decoder-ids", default=None, metavar="I,J,...",
                        help="an encoder-decoder spec: the target's first ids, decoded on from (after "
                             "--decoder-start where they do not begin with it; Whisper's forced prefix)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights and of sampling (default 0)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="compile the decode step (AOTInductor, frozen; seconds before the first token, "
                             "faster per token after; decoder-only specs) and keep it on disk; by default a kept "
                             "one is used where it fits, --no-compile never")


def prompt_ids(text: str, option: str = "--ids") -> list[int]:
    """--ids I,J,... (or --decoder-ids): whole numbers (ASCII digits, at most 18 each), or a usage error."""
    parts = [p.strip() for p in text.split(",")]
    if not all(re.fullmatch(r"-?[0-9]{1,18}", p) for p in parts):
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise UsageError(f"{option} takes comma-separated token ids such as 1,2,3, got {shown!r}")
    return [int(p) for p in parts]


def prompt_length(decoder, input_ids, start, decoder_input_ids) -> int:
    """The ids before the new ones in what generate returns: the prompt's, or an encoder-decoder's
    target start (driver.target_prompt)."""
    if not decoder.encoder_decoder:
        return input_ids.shape[1]
    from ...compiler.generate.driver import target_prompt

    return target_prompt(input_ids, start, decoder_input_ids).shape[1]


def sampling_options(args) -> None:
    """--temperature, --top-k, --top-p out of range: usage errors, before any work."""
    from ...compiler.generate.sampling import Sampling

    try:
        Sampling(args.do_sample, args.temperature, args.top_k, args.top_p).check()
    except ValueError as exc:
        raise UsageError(f"--{str(exc).replace('_', '-')}") from None


def check_decoder_start(decoder, start, target_ids=None) -> None:
    """--decoder-start (or --decoder-ids): needed by an encoder-decoder spec, meaningless for a
    decoder-only one."""
    if decoder.encoder_decoder and start is None and target_ids is None:
        raise UsageError(f"{decoder.name} is an encoder-decoder: --ids is the source; give the target's first id "
                         "with --decoder-start ID (or its first ids with --decoder-ids I,J,...)")
    for option, value in (("--decoder-start", start), ("--decoder-ids", target_ids)):
        if not decoder.encoder_decoder and value is not None:
            raise UsageError(f"{option} is for encoder-decoder specs; {decoder.name} continues the --ids themselves")


def cli_words(message: str) -> str:
    """generate()'s argument names as the command's options say them."""
    for name, option in (("eos_token_id", "--eos"), ("decoder_start_token_id", "--decoder-start"),
                         ("max_new_tokens", "--max-new-tokens"), ("num_beams", "--num-beams"),
                         ("repetition_penalty", "--repetition-penalty"),
                         ("no_repeat_ngram_size", "--no-repeat-ngram-size"), ("min_new_tokens", "--min-new-tokens")):
        message = message.replace(name, option)
    return message


class PrintTokens:
    """A streamer (put, end) that prints each step's new id, skipping the prompt."""

    def __init__(self):
        self.prompt_seen = False
        self.separator = ""

    def put(self, tokens) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        print(f"{self.separator}{int(tokens[0])}", end="", flush=True)
        self.separator = " "

    def end(self) -> None:
        print(flush=True)


def text_tokenizer(args):
    """--tokenizer FILE as a TextTokenizer (None without it); --prompt needs it."""
    if args.tokenizer is None:
        if args.prompt is not None:
            raise UsageError("--prompt needs --tokenizer FILE (a tokenizer.json) to turn the text into token ids")
        return None
    from ...compiler.generate.tokenizer import TextTokenizer

    try:
        return TextTokenizer(args.tokenizer)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--{exc}") from None


def prompt_of(args, tokenizer) -> list[int]:
    if args.prompt is None:
        return prompt_ids(args.ids)
    ids = tokenizer.encode(args.prompt)
    if not ids:
        raise UsageError("--prompt: the tokenizer gives no tokens for this text")
    return ids


def run(args) -> int:
    tokenizer = text_tokenizer(args)
    ids = prompt_of(args, tokenizer)
    counted(args.max_new_tokens, "--max-new-tokens", 1, MAX_NEW_TOKENS)
    checked_seed(args.seed)
    sampling_options(args)
    from .build import mapping_argument

    mapping_argument(args)  # --map without --weights, or a missing file: usage errors
    report = check_file(spec_path(args), overrides_of(args))
    check_build_memory(report, runs_model=False)
    import torch

    from ...compiler.generate import decoder_of, generate
    from ...compiler.generate.tokenizer import TextStreamer
    from ...compiler.generate.driver import check_compilable, check_request
    from ...compiler.lower import lower

    model = lower(report.graph, seed=args.seed)
    if args.weights:
        from ...compiler.weights.load import load_weights

        load_weights(model, args.weights, report.graph, [args.mapping] if args.mapping else [])
    model.eval()
    decoder = decoder_of(model)  # a spec that cannot generate: its error, exit 1
    target_ids = prompt_ids(args.decoder_ids, "--decoder-ids") if args.decoder_ids is not None else None
    check_decoder_start(decoder, args.decoder_start, target_ids)
    input_ids = torch.tensor([ids], dtype=torch.long)
    decoder_input_ids = torch.tensor([target_ids], dtype=torch.long) if target_ids is not None else None
    from ...compiler.generate.arguments import check_arguments

    try:
        check_arguments(decoder, input_ids, max_new_tokens=args.max_new_tokens, eos_token_id=args.eos,
                        decoder_start_token_id=args.decoder_start, num_beams=args.num_beams,
                        repetition_penalty=args.repetition_penalty, no_repeat_ngram_size=args.no_repeat_ngram_size,
                        min_new_tokens=args.min_new_tokens, compile=args.compile, decoder_input_ids=decoder_input_ids)
        check_request(decoder, input_ids, None, args.max_new_tokens, args.decoder_start, decoder_input_ids)
        if args.compile:
            check_compilable(decoder, "--compile")
    except (ValueError, TypeError) as exc:
        raise UsageError(cli_words(str(exc))) from None
    generator = torch.Generator().manual_seed(args.seed) if args.do_sample else None
    say_compile(model, decoder, input_ids, args)
    streamer = (TextStreamer(tokenizer) if tokenizer is not None else PrintTokens()) if args.num_beams == 1 else None
    out = generate(model, input_ids, max_new_tokens=args.max_new_tokens, do_sample=args.do_sample,
                   temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, eos_token_id=args.eos,
                   decoder_start_token_id=args.decoder_start, streamer=streamer, generator=generator,
                   compile=args.compile, num_beams=args.num_beams, repetition_penalty=args.repetition_penalty,
                   no_repeat_ngram_size=args.no_repeat_ngram_size, min_new_tokens=args.min_new_tokens,
                   decoder_input_ids=decoder_input_ids)
    if streamer is None:  # beam search: the best beam, at the end
        new = out[0, prompt_length(decoder, input_ids, args.decoder_start, decoder_input_ids):].tolist()
        print(tokenizer.decode(new) if tokenizer is not None else " ".join(map(str, new)), flush=True)
    return 0


def say_compile(model, decoder, input_ids, args) -> None:
    """On stderr: whether the decode steps run through a compiled step, and whether it is made now or kept."""
    from ...compiler.generate.driver import chosen_compile, compiled_capacity
    from ...compiler.generate.kept_steps import cache_root

    if not chosen_compile(model, args.compile, input_ids, args.max_new_tokens, args.num_beams):
        return
    slots = compiled_capacity(input_ids.shape[1] + args.max_new_tokens, decoder.max_length)
    steps = decoder.compiled_steps()
    if steps.ready(input_ids.shape[0], slots):
        print(f"... the decode step compiled before, loaded ({cache_root()}; --no-compile: eager)",
              file=sys.stderr, flush=True)
        return
    print(f"... --compile: the decode step is compiled after the first token (seconds, once per length bucket and "
          f"batch; {steps.where_kept()})", file=sys.stderr, flush=True)
