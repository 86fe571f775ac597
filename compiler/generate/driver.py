"""generate(model, input_ids, ...): new tokens from a built decoder-only (or encoder-decoder)
spec, with Hugging Face's argument names and return value ([B, L + new] token ids), using a
key/value cache.

The prompt goes through the model once (the prefill), every later call brings one token per
sequence (the decode steps). What the call keeps is one object, a DecodeCache (cache.py): each
attention layer's keys and values (a KVCache), each cross attention layer's projected memory,
the positions (Hugging Face's, from the attention mask: left-padded batches decode as theirs
do). The Decoder calls the model's decode graph (decode_graph.py: a copy of its fx graph with
one more input, `cache`), which reads from that object what each module needs and hands it over
as an argument (a layer its KVCache, an embedding the positions); nothing is set on a module,
and the model's own forward is the ordinary one, in and out of generate().

A spec can generate when it returns the logits of an lm head and takes token ids alone
(decoder-only: every attention causal, sliding, alibi or latent, so earlier tokens never see
later ones; an attention_mask input that its cached attention reads as the keys' padding is
allowed, and generate's own attention_mask stands for it: kv_cache.padding_inputs) or
source and target ids (encoder-decoder, as the 2017 Transformer: what reads the source alone,
its embedding and encoder, runs once; on the target side attention is causal, sliding or alibi, or
cross attention to the encoder's output, whose keys and values are projected at the first step
and kept; the source side's outputs are computed at the first call and kept in the cache).
A decoder-only spec whose layers do not all decode through a cache (attention written from
einsum and softmax, global attention, a score part that mixes the weights) generates without
one: each step runs the whole sequence so far through forward (Decoder.without_cache, said on
the `archspec` logger with the node and why); it takes no padded prompts and no compile.
"""

from __future__ import annotations

import logging

import torch

from archspec.core.errors import SpecError, error

from ..modules.attention.common import takes_cache
from ..modules.attention.cross import CrossAttention
from ..modules.conv import Convolution
from ..modules.embed import TokenEmbed
from ..modules.head.lm import LanguageModelHead
from ..modules.relative_bias import RelativeBias
from .beam import all_logits, last_logits
from .cache import DecodeCache, DecodeState, KVCache, RecentTokens, SequenceSoFar
from .compiled import CompiledSteps
from .decode_graph import Handoff, decode_graph
from .graphed import GraphedSteps
from .sampling import Sampling

CAN_GENERATE = ("a spec can generate when it returns an lm head's logits and takes token ids alone (and "
                "optionally an attention_mask its attention reads as `padding_mask`), with causal, "
                "sliding, alibi or latent attention (shipped: gpt2, llama, mixtral, deepseek_v3), or a source (ids, "
                "or any tensor: audio features, an image), optionally its padding mask, and target ids "
                "(transformer_base, t5_small); a decoder-only spec whose layers keep no cache generates without one")


class Decoder:
    """What generate() needs of a built model, found once: its cached attention layers, its
    embeddings, which output is the logits, its vocabulary, its longest sequence and its decode
    graph (`decoding`). A spec that cannot generate is refused here, in words (CAN_GENERATE)."""

    def __init__(self, model):
        self.model = model
        facts = model.facts
        self.name = facts.name
        fed = facts.fed_inputs  # an attention_mask its cached attention reads is not fed
        if len(fed) not in (1, 2, 3):
            raise refusal(f"it takes {len(fed)} inputs ({', '.join(fed)}) besides padding masks; generate feeds "
                          "token ids (decoder-only), or source ids, optionally the source's padding mask, and "
                          "target ids (encoder-decoder)")
        self.encoder_decoder = len(fed) > 1
        self.source_mask = len(fed) == 3  # (source ids, source padding mask, target ids): T5's order
        target = facts.inputs.index(fed[-1])
        self.output, head = self.find_logits(model)
        declared = {s.name: s for s in model.meta.get("archspec_inputs", ())}
        self.source = declared.get(fed[0]) if self.encoder_decoder else None  # its InputShape
        self.source_ids = self.source is None or self.source.ids  # False: audio features, an image, ...
        not_ids = [s for s in declared.values() if not s.ids and s is not self.source]
        if not_ids:
            raise refusal(f"its input '{not_ids[0].name}' is [{not_ids[0].declared}], not token ids [B, L] "
                          "(generate feeds token ids, and an encoder-decoder's source as its spec declares it)")
        if facts.generate_refusal is not None:
            node, why = facts.generate_refusal
            raise refusal(self.as_read(fed) + (f"'{node}': {why}" if node else why))
        self.vocab = head.bias.shape[0] if head.bias is not None else (head.fc or head.table).weight.shape[0]
        self.table_rows = token_table_rows(model, self.vocab)  # the ids a prompt may hold
        self.min_length, self.max_length = sequence_range(model, target)
        self.min_source, self.max_source = sequence_range(model, 0) if self.encoder_decoder else (None, None)
        self.compiled = None  # the compiled decode step (compiled.py), made at the first generate(compile=True)
        self.whole_sequence = None  # why each step runs the whole sequence (no cache), or None: cached
        self.causal_seen = False  # without a cache: a token's logits were seen not to change with later tokens
        if facts.decode_refusal is not None:
            node, why = facts.decode_refusal
            if self.encoder_decoder:  # which input is the target is known only where the cache's rules hold
                raise refusal(self.as_read(fed) + (f"'{node}': {why}" if node else why))
            self.without_cache(f"'{node}': {why}" if node else why)
            return
        try:
            self.with_cache(model, facts, fed[-1])
        except SpecError as exc:  # a layer the decode graph cannot hand its cache: the whole sequence each step
            if self.encoder_decoder:
                raise
            self.without_cache(exc.diagnostics[0].message.removeprefix("this spec cannot generate: "))

    def as_read(self, fed) -> str:
        """How generate reads the inputs of an encoder-decoder, said before a refusal: a spec that
        takes an image and token types beside its ids is read so (the PaliGemma trial was told of
        its attention alone)."""
        if not self.encoder_decoder:
            return ""
        masks = [name for name in fed if name in self.model.facts.mask_inputs]
        if masks and len(fed) == 2:  # ids and the mask of attention that is not cached: an encoder
            return f"read as token ids and '{masks[0]}' as its attention's padding mask (not an encoder-decoder): "
        roles = ("source", "source padding mask", "target ids") if len(fed) == 3 else ("source", "target ids")
        return ("taken as an encoder-decoder (" + ", ".join(f"{role} '{name}'" for role, name in zip(roles, fed))
                + "): ")

    def with_cache(self, model, facts, target: str) -> None:
        """The cached layers, the embeddings that take positions, the cross attention layers and the
        decode graph that hands each its part of the cache; a SpecError (`refusal`) where a layer's
        cache cannot be handed on."""
        self.source_side, self.target_side = split_by_target(model, target)
        self.attention = [cache_holder(model, path) for path, _ in facts.cached]
        paths = {id(m): path for path, m in model.named_modules()}  # id(module) -> its dotted path
        self.paths = [paths[id(m)] for m in self.attention]  # the cache's keys: each layer's module path
        self.windows = [window for _, window in facts.cached]  # each layer's sliding window (DECODE), or None
        self.biases = [m for top in self.target_side for m in top.modules() if isinstance(m, RelativeBias)]
        if any(m.score_bias for m in self.attention) and not self.biases:
            raise refusal("its causal attention reads a score bias that no relative_bias node on the target side "
                          "computes, so generate cannot place it at the cached positions")
        self.embeds = [m for top in self.target_side for m in top.modules() if isinstance(m, TokenEmbed)]
        self.cross = [m for top in self.target_side for m in top.modules() if isinstance(m, CrossAttention)]
        self.cross_paths = [paths[id(m)] for m in self.cross]
        self.recent = [recent_holder(model, path) for path, _ in facts.recent]  # the causal convs
        self.recent_paths = [path for path, _ in facts.recent]
        self.recent_counts = [count for _, count in facts.recent]  # the inputs each keeps (DECODE RecentInputs)
        self.decoding = self.decode_copy(model, paths)
        self.refill_at = facts.refill_at  # LongRoPE: where every cached key is computed again (DECODE's refill)

    def without_cache(self, why: str) -> None:
        """Generate without a cache: each step runs the whole sequence so far through forward and
        takes the last position's logits (the tokens are those of a cache, slower as the sequence
        grows). Said once, on the `archspec` logger, with why the cache is refused."""
        self.whole_sequence = why
        self.attention, self.paths, self.windows, self.biases, self.embeds, self.cross = [], [], [], [], [], []
        self.cross_paths, self.decoding, self.refill_at = [], None, None
        self.recent, self.recent_paths, self.recent_counts = [], [], []
        logging.getLogger("archspec").warning(
            f"generate: {self.name} decodes without a cache ({why}): each new token runs the whole sequence through "
            "forward; compile=True and padded prompts need a cache")

    def decode_copy(self, model, paths: dict[int, str]):
        """The model's decode graph (decode_graph.py): it hands the cached attention layers their
        KVCache, the cross attention layers their kept memory, the embeddings the positions and
        the relative biases the whole cache and the causal convs their recent inputs, on the target
        side. `paths`: id(module) -> its path."""
        readers = {id(m): Handoff(path, method="layer", keyed=True) for m, path in zip(self.attention, self.paths)}
        readers |= {id(m): Handoff(path, method="memory", keyed=True) for m, path in zip(self.cross, self.cross_paths)}
        readers |= {id(m): Handoff(paths[id(m)]) for m in self.biases}
        readers |= {id(m): Handoff(paths[id(m)], "positions", "positions") for m in self.embeds}
        readers |= {id(m): Handoff(path, method="recent_inputs", keyed=True)
                    for m, path in zip(self.recent, self.recent_paths)}
        copied, unreached = decode_graph(model, readers, self.source_side, self.model.facts.padding_inputs)
        if unreached:
            raise refusal(f"'{unreached[0]}' reads the decode cache, but the module that calls it is not a group "
                          "whose graph can hand it on")
        return copied

    def new_cache(self, state: DecodeState) -> DecodeCache | SequenceSoFar:
        """The cache of one generate() call: an empty KVCache for each cached layer (a ring for a
        sliding window shorter than the capacity) and empty RecentTokens for each causal conv, by
        path, nothing projected or computed yet; without a cache, the sequence so far (empty)."""
        if self.whole_sequence is not None:
            return SequenceSoFar(state)
        recent = {path: RecentTokens(state, count) for path, count in zip(self.recent_paths, self.recent_counts)}
        return DecodeCache(state, {path: KVCache(state, w) for path, w in zip(self.paths, self.windows)},
                           recent=recent)

    @staticmethod
    def find_logits(model):
        """(index of the logits among forward's outputs, the lm head module): the head's output,
        or the head's plus a param's (BART's final_logits_bias); kv_cache.logits_output."""
        found = model.facts.logits
        module = model.get_submodule(found[1]) if found is not None else None
        if not isinstance(module, LanguageModelHead):
            raise refusal("none of its outputs is an lm head's logits (a `head: {kind: lm}` node it returns, "
                          "alone or plus a `param`)")
        return found[0], module

    def logits(self, ids: torch.Tensor, cache: DecodeCache, source=None) -> torch.Tensor:
        """The last position's logits [B, vocab] in float32, for ids [B, count] in the cache's
        current slots (after the source inputs of an encoder-decoder spec: a tuple)."""
        if self.whole_sequence is not None:  # every token so far through forward
            sequence = cache.extended(ids)  # [B, end]
            self.check_causal(sequence, source)
            return last_logits(self, sequence, source)
        out = self.decoding(ids, cache) if source is None else self.decoding(*source, ids, cache)
        out = out[self.output] if isinstance(out, (tuple, list)) else out
        return out[:, -1, :].float()  # [B, count, vocab] -> [B, vocab]

    def check_causal(self, sequence: torch.Tensor, source=None) -> None:
        """Without a cache nothing in the spec says a token's logits ignore later tokens (attention
        written from einsum may mask or not): once per model, the logits of `sequence` [B, end]
        less its last token are compared with the whole's, and a spec whose earlier logits move
        is said to be no causal model, on the `archspec` logger (the FNet trial's bidirectional
        encoder generated tokens without a word). It still generates, as Hugging Face's generate
        does with use_cache=False: each step's token is forward's over the whole sequence."""
        if self.causal_seen or sequence.shape[1] < 2:
            return
        self.causal_seen = True
        whole = all_logits(self, sequence, source)  # [B, end, vocab]
        shorter = all_logits(self, sequence[:, :-1], source)  # [B, end - 1, vocab]
        moved, scale = float((whole[:, :-1] - shorter).abs().max()), float(whole.abs().max())
        if moved > (1e-4 if whole.dtype == torch.float32 else 2e-2) * scale:  # rounding apart, relative
            logging.getLogger("archspec").warning(
                f"generate: {self.name} is not causal: one more token changed the logits of the tokens before it by "
                f"{moved:.3g} (logits up to {scale:.3g}), so each new token is forward's over the whole sequence (as "
                "Hugging Face's generate with use_cache=False), and no token's logits are final; a language model "
                "reads only the tokens before each one (kind causal, or `mod` steps that hide later keys)")

    def refills(self, state: DecodeState) -> bool:
        """Whether the call after `state.advance()` recomputes the whole cache instead of one step:
        Hugging Face's Phi-3 drops its cache when the sequence first passes LongRoPE's original
        length (prepare_inputs_for_generation), so every key is then rotated with the long factors."""
        return self.refill_at is not None and state.end == self.refill_at

    def next_logits(self, step, ids: torch.Tensor, cache: DecodeCache, source=None, sequence=None):
        """(logits [B, vocab], their argmax or None) after the state advanced to the new tokens `ids`
        [B, 1]: `step` over them, or, where it refills, the whole sequence again (`sequence()`,
        [B, end], asked for only then)."""
        if not self.refills(cache.state):
            return step(ids, cache, source)
        cache.restart()
        return self.logits(sequence(), cache, source), None

    def stepper(self, compile: bool, cache: DecodeCache):
        """The function each decode step after the prefill calls, (ids [B, 1], cache, source) ->
        (logits [B, vocab], their argmax [B] or None): `logits`, or the model's compiled step
        over the cache the prefill filled (which takes the argmax in its program)."""
        if not compile:
            return lambda ids, cache, source: (self.logits(ids, cache, source), None)
        step = self.compiled_steps().bind(cache.tensors())
        return lambda ids, cache, source: step(ids, cache.state)

    def compiled_steps(self) -> CompiledSteps | GraphedSteps:
        """The model's compiled decode steps for the device its weights are on (made at the
        first call), refreshed for its weights now."""
        kind = steps_kind(self.model)
        if not isinstance(self.compiled, kind):
            self.compiled = kind(self)
        self.compiled.refresh()
        return self.compiled


def steps_kind(model) -> type:
    """How the decode step is compiled on the device of the model's weights: on a CUDA GPU
    recorded as CUDA graphs (graphed.py), elsewhere one AOTInductor program (compiled.py)."""
    weight = next(model.parameters(), None)
    return GraphedSteps if weight is not None and weight.device.type == "cuda" else CompiledSteps


def cache_holder(model, path: str):
    """The module under node `path` that takes a KVCache (the attention body inside its sub-layer)."""
    found = [m for m in model.get_submodule(path).modules() if takes_cache(m)]
    if len(found) != 1:
        raise refusal(f"'{path}' decodes with a cache of its keys and values (its op's DECODE fact), but its module "
                      f"holds {len(found)} attention bodies that take one (modules.attention.common.takes_cache)")
    return found[0]


def recent_holder(model, path: str):
    """The conv module of node `path`, which takes its recent inputs (modules/conv.py's Convolution)."""
    module = model.get_submodule(path)
    if not isinstance(module, Convolution):
        raise refusal(f"'{path}' decodes keeping its recent inputs (its op's DECODE fact), but its module is a "
                      f"{type(module).__name__}, not a conv")
    return module


def refusal(why: str):
    return error(f"this spec cannot generate: {why}", hint=CAN_GENERATE)


def split_by_target(model, target: str) -> tuple[dict[str, bool], list]:
    """({name: computed once?} of the model's top-level call_module nodes whose inputs do not
    depend on the target ids (an encoder-decoder's source embedding and encoder: computed once
    per generate, unless their module is also called on the target side), the modules of the
    nodes that do, where the cache is)."""
    depends, source_side, target_side = set(), [], []
    for node in model.graph.nodes:
        if (node.op == "placeholder" and node.name == target) or any(a in depends for a in node.all_input_nodes):
            depends.add(node)
        if node.op == "call_module" and node.all_input_nodes:  # a param or constant, reading nothing, is neither
            module = model.get_submodule(node.target)
            if node in depends:
                target_side.append(module)
            else:
                source_side.append((node.name, module))
    shared = {id(m) for m in target_side}  # a module called on both sides is never computed once
    return {name: id(m) not in shared for name, m in source_side}, target_side


def longest_sequence(model, index: int = 0) -> int | None:
    """The highest length the spec declares for its input `index` (dim 1), or None."""
    return sequence_range(model, index)[1]


def sequence_range(model, index: int = 0) -> tuple[int | None, int | None]:
    """(lowest, highest) length the spec declares for its input `index` (dim 1), or (None, None)."""
    for declared in model.__dict__.get("meta", {}).get("archspec_inputs", ())[index:index + 1]:
        for index, lo, hi in declared.checks:
            if index == 1:
                return lo, hi
    return None, None


def decoder_of(model) -> Decoder:
    """The model's Decoder, found once and kept with the model."""
    decoder = model.__dict__.get("_decoder")
    if decoder is None:
        decoder = Decoder(model)
        model.__dict__["_decoder"] = decoder
    return decoder


def check_request(decoder: Decoder, input_ids, attention_mask, max_new_tokens: int,
                  decoder_start_token_id=None, decoder_input_ids=None) -> None:
    """ValueError, in words, for ids or a length the model cannot take."""
    if decoder.source_ids:
        check_ids(decoder, input_ids, attention_mask)
    else:
        check_source_tensor(decoder, input_ids, attention_mask)
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be 0 or more, got {max_new_tokens}")
    if decoder.encoder_decoder:
        check_source(decoder, input_ids, attention_mask, decoder_start_token_id, decoder_input_ids)
        prompt = target_prompt(input_ids, decoder_start_token_id, decoder_input_ids).shape[1]
    else:
        prompt = input_ids.shape[1]
    if decoder.min_length is not None and prompt < decoder.min_length:  # a target of fixed length 6
        side = "target" if decoder.encoder_decoder else "input"
        raise ValueError(f"{decoder.name}'s {side} takes at least {decoder.min_length} tokens, and generate starts "
                         f"from {prompt}: declare its length as a range (dims: {{L: [1, {decoder.max_length}]}}) "
                         "to generate with it")
    total = prompt + max_new_tokens
    if decoder.max_length is not None and total > decoder.max_length:
        start = (f"the target's {prompt} first tokens" if decoder.encoder_decoder and prompt > 1 else
                 "the target's start token" if decoder.encoder_decoder else f"{prompt} prompt tokens")
        side = "longest target" if decoder.encoder_decoder else "longest sequence"
        fed = decoder.model.facts.fed_inputs
        where = next((f" (declared at {s.where})" for s in decoder.model.meta.get("archspec_inputs", ())
                      if s.where and s.name in fed), "")
        raise ValueError(f"{start} + {max_new_tokens} new tokens = {total}, beyond {decoder.name}'s {side}, "
                         f"{decoder.max_length}{where}: ask for fewer new tokens, or build the spec for longer "
                         f"sequences (the shipped LMs: `--set context={total}`; learned positions then need weights "
                         f"that long)")


def check_ids(decoder: Decoder, input_ids, attention_mask) -> None:
    """Token ids [B, L] in the vocabulary, and their mask of the same shape."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype != torch.long:
        raise ValueError("input_ids must be a LongTensor [batch, length]")
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids is empty: give at least one token per sequence")
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(input_ids.shape):
        raise ValueError(f"attention_mask is {list(attention_mask.shape)}, input_ids {list(input_ids.shape)}: "
                         "they must have the same shape")
    if decoder.whole_sequence is not None and attention_mask is not None and bool((attention_mask == 0).any()):
        raise ValueError(f"{decoder.name} decodes without a cache ({decoder.whole_sequence}), which takes prompts of "
                         "one length: give them unpadded, one call per length")
    check_vocabulary(decoder, input_ids)


def check_source_tensor(decoder: Decoder, source, attention_mask) -> None:
    """An encoder-decoder's source that is no token ids (audio features, an image), given as
    input_ids: a float tensor of the shape its input declares; its padding mask, where the spec
    takes one, given (its shape is the source tokens', which only the spec knows)."""
    declared = decoder.source
    if not isinstance(source, torch.Tensor) or not source.is_floating_point():
        raise ValueError(f"{decoder.name}'s source '{declared.name}' is [{declared.declared}], not token ids: give it "
                         f"as input_ids, a float tensor of that shape (model.generate in Python; the command line "
                         f"feeds token ids)")
    declared.check(source)
    if decoder.source_mask and attention_mask is None:
        raise ValueError(f"{decoder.name} takes a padding mask of its source '{declared.name}': give it as "
                         "attention_mask (ones where nothing is padded)")


def token_table_rows(model, vocab: int) -> int:
    """The ids a prompt may hold: the largest token table's rows, which may be more than the logits'
    `vocab` (MusicGen's start token is row 64 of a table of 65 beside 64 logits)."""
    tables = [m.tokens.num_embeddings for m in model.modules() if isinstance(m, TokenEmbed) and m.tokens is not None]
    return max([vocab, *tables])


def check_vocabulary(decoder: Decoder, ids) -> None:
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= decoder.table_rows:
        bad = low if low < 0 else high
        raise ValueError(f"token id {bad} is outside the vocabulary of {decoder.name} (0..{decoder.table_rows - 1})")


def check_source(decoder: Decoder, input_ids, attention_mask, decoder_start_token_id,
                 decoder_input_ids=None) -> None:
    """An encoder-decoder's source ids, and the target's decoder start token or first ids."""
    if decoder_start_token_id is None and decoder_input_ids is None:
        raise ValueError(f"{decoder.name} is an encoder-decoder: input_ids are the source, and the target "
                         "begins with decoder_start_token_id (or the ids decoder_input_ids gives); give it")
    if decoder_start_token_id is not None:
        check_vocabulary(decoder, torch.tensor([decoder_start_token_id]))
    if decoder_input_ids is not None:
        check_vocabulary(decoder, decoder_input_ids)
    if attention_mask is not None and bool((attention_mask == 0).any()) and not decoder.source_mask:
        raise ValueError(f"{decoder.name} takes no source padding mask, so its sources cannot be padded: give "
                         "sources of one length")
    if not decoder.source_ids:  # its declared shape is checked (check_source_tensor)
        return
    if decoder.min_source is not None and input_ids.shape[1] < decoder.min_source:  # a source of fixed length 8
        raise ValueError(f"a source of {input_ids.shape[1]} tokens is shorter than {decoder.name}'s shortest source, "
                         f"{decoder.min_source}")
    if decoder.max_source is not None and input_ids.shape[1] > decoder.max_source:
        raise ValueError(f"a source of {input_ids.shape[1]} tokens is beyond {decoder.name}'s longest source, "
                         f"{decoder.max_source}")


def as_list(eos_token_id) -> list[int]:
    if eos_token_id is None:
        return []
    return [int(eos_token_id)] if isinstance(eos_token_id, int) else [int(t) for t in eos_token_id]


@torch.no_grad()
def generate(model, input_ids, max_new_tokens: int = 20, do_sample: bool = False, temperature: float | None = None,
             top_k: int | None = None, top_p: float | None = None, eos_token_id=None, pad_token_id: int | None = None,
             attention_mask=None, decoder_start_token_id: int | None = None, streamer=None,
             generator: torch.Generator | None = None, compile: bool = False,
             decoder_input_ids=None) -> torch.LongTensor:
    """The prompt `input_ids` [B, L] followed by up to `max_new_tokens` new tokens: [B, L + new]
    (Hugging Face's generate: greedy unless do_sample; temperature, top_k, top_p as its warpers;
    a sequence that produced eos_token_id continues with pad_token_id, eos by default, and
    generation stops when every sequence has). `attention_mask` marks left padding with 0.
    An encoder-decoder spec takes the source as input_ids (and its padding as attention_mask,
    when the spec takes a source mask, as T5) and returns the target, [B, 1 + new], beginning
    with decoder_start_token_id, or [B, T + new] beginning with `decoder_input_ids` [B, T] (the
    start token put before them where none of them begins with it, as Hugging Face's).
    `streamer`: an object with put(tokens) and end(), as
    Hugging Face's (the prompt first, then each step's tokens [B]). `compile`: the decode
    steps after the prefill run as one AOTInductor program made at the first call for a batch
    and length (compiled.py; seconds), or on a CUDA GPU as CUDA graphs (graphed.py), faster per
    token (in fp32 the same tokens up to float rounding)."""
    decoder = decoder_of(model)
    check_request(decoder, input_ids, attention_mask, max_new_tokens, decoder_start_token_id, decoder_input_ids)
    if compile:
        check_compilable(decoder)
    sampling = Sampling(do_sample, temperature, top_k, top_p)
    sampling.check()
    eos = as_list(eos_token_id)
    pad = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
    source = None
    if decoder.encoder_decoder:
        source, input_ids = source_and_start(decoder, input_ids, attention_mask, decoder_start_token_id,
                                             decoder_input_ids)
        attention_mask = None
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
    capacity = input_ids.shape[1] + max_new_tokens
    state = DecodeState(mask, compiled_capacity(capacity, decoder.max_length) if compile else capacity)
    if streamer is not None:
        streamer.put(input_ids.cpu())
    tokens = [input_ids]
    if max_new_tokens > 0:
        decode(decoder, decoder.new_cache(state), (input_ids, source), max_new_tokens, sampling, eos, pad, tokens,
               streamer, generator, compile)
    if streamer is not None:
        streamer.end()
    return torch.cat(tokens, dim=1)


def source_and_start(decoder: Decoder, source, attention_mask, decoder_start_token_id: int | None,
                     decoder_input_ids=None):
    """An encoder-decoder's (source inputs, the target's first ids [B, T]): the source given as
    input_ids (token ids, or the tensor its input declares) and, where the spec takes one, its
    padding mask (ones where none is given); the target's first ids (target_prompt)."""
    inputs = (source,)
    if decoder.source_mask:
        inputs += (torch.ones_like(source) if attention_mask is None else attention_mask.long(),)
    return inputs, target_prompt(source, decoder_start_token_id, decoder_input_ids)


def target_prompt(source, decoder_start_token_id: int | None, decoder_input_ids=None):
    """The target's first ids [B, T]: the start token [B, 1]; or decoder_input_ids, after the start
    token where none of them begins with it (Hugging Face's rule)."""
    batch, device = source.shape[0], source.device
    start = (torch.full((batch, 1), decoder_start_token_id, dtype=torch.long, device=device)
             if decoder_start_token_id is not None else None)
    if decoder_input_ids is None:
        return start
    if start is not None and bool((decoder_input_ids[:, 0] != decoder_start_token_id).all()):
        return torch.cat([start, decoder_input_ids.to(device)], dim=1)  # [B, 1 + T]
    return decoder_input_ids.to(device)


def chosen_compile(model, compile: bool | None, input_ids, max_new_tokens: int, num_beams: int = 1) -> bool:
    """`compile` as given, or for None (generate's default): whether a compiled step for this
    batch and length is held or kept on disk (kept_steps.py), where the call can take one."""
    if compile is not None:
        return compile
    decoder = decoder_of(model)
    if num_beams > 1 or compile_refusal(decoder) is not None:
        return False
    slots = compiled_capacity(input_ids.shape[1] + max_new_tokens, decoder.max_length)
    return decoder.compiled_steps().ready(input_ids.shape[0], slots)


def compile_refusal(decoder: Decoder, option: str = "compile=True") -> str | None:
    """Why the decode step `option` (compile=True, --compile) does not cover this spec, or None."""
    if decoder.whole_sequence is not None:
        return (f"{option} compiles a cached decode step, and {decoder.name} decodes without a cache "
                f"({decoder.whole_sequence}): leave it out")
    if decoder.encoder_decoder:
        return f"{option} covers decoder-only specs; {decoder.name} is an encoder-decoder: leave it out"
    if decoder.biases:
        return (f"{option} does not cover relative position biases yet ({decoder.name} has a relative_bias node): "
                "leave it out")
    return None


def check_compilable(decoder: Decoder, option: str = "compile=True") -> None:
    """ValueError, in words, for a spec whose decode step `option` (compile=True, --compile) does not cover."""
    refusal = compile_refusal(decoder, option)
    if refusal is not None:
        raise ValueError(refusal)


def compiled_capacity(needed: int, longest: int | None) -> int:
    """The cache slots of a compiled generate(): `needed` rounded up to a power of two (at least
    64, at most the spec's longest sequence), so that calls of other lengths reuse the program
    made for the first (the compiled step attends over every slot, the unwritten ones hidden)."""
    rounded = max(64, 1 << (needed - 1).bit_length())
    return max(needed, min(rounded, longest)) if longest else rounded


def decode(decoder, cache, prompt, max_new_tokens, sampling, eos, pad, tokens, streamer, generator,
           compile=False) -> None:
    """The prefill, then one decode step per new token, appending each step's tokens [B, 1] to
    `tokens`. `cache`: the call's DecodeCache; `prompt`: (the target's first ids, the source ids
    or None); `compile`: the decode steps through the model's compiled step."""
    input_ids, source = prompt
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    eos_ids = torch.tensor(eos, device=input_ids.device)
    logits, best = decoder.logits(input_ids, cache, source), None
    next_logits = decoder.stepper(compile, cache)
    for step in range(max_new_tokens):
        chosen = sampling.choose(logits, generator, best)  # [B]
        if eos:
            chosen = torch.where(unfinished, chosen, torch.full_like(chosen, pad))
            unfinished = unfinished & ~torch.isin(chosen, eos_ids)
        tokens.append(chosen[:, None])
        if streamer is not None:
            streamer.put(chosen.cpu())
        if step + 1 == max_new_tokens or (eos and not bool(unfinished.any())):
            return
        cache.state.advance()
        logits, best = decoder.next_logits(next_logits, chosen[:, None], cache, source,
                                           lambda: torch.cat(tokens, dim=1))
