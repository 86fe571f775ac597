"""The decode programs of an encoder-decoder spec (transformer_base, t5_small), as step.py's are
for a decoder-only one: explicit state, the caches as inputs and outputs, named as Hugging Face
Optimum names its seq2seq ONNX files.

    EncoderStep.forward(*source)                       # src, or input_ids and attention_mask (T5)
        -> (encoder.0.key, encoder.0.value, ...)        # [B, h_kv, S, d]: each cross attention's
                                                        # keys and values of the encoder's output
    Seq2SeqStep.forward(input_ids [B, N], [encoder_attention_mask [B, S]],
                        past_key_values.{i}.decoder.key|value  [B, h_kv, P, d] ...,
                        past_key_values.{i}.encoder.key|value  [B, h_kv, S, d] ...)
        -> (logits [B, N, vocab], present.{i}.decoder.key|value [B, h_kv, P + N, d] ...)

Both call the model's decode graph (decode_graph.py) with a DecodeCache (cache.py), as
generate() does. The encoder runs once per source (EncoderStep: the decode graph run on the
source with a one-token target, the cache keeping what each cross attention projected; export
drops the decoder's dead ops). Every decoder step then takes those keys and values as inputs,
given to the cross attention layers as the cache's projected memories, and the nodes that read
the source alone (its embedding, the encoder) are not run at all: the cache holds their
outputs already (`skipped_sources`: a zero tensor each, which nothing then reads). A target is
never padded (it begins with the decoder start id), so its positions are P .. P + N - 1; T5's
relative position biases are placed there (relative_bias.py reads the cache's state). The
first call has an empty past (P = 0, the start id); `export_seq2seq`
traces one program with the past of length 1 or more and one with it empty, and
`export_seq2seq_onnx` writes the same three as ONNX files (the traces are one list, `seq2seq_traces`).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..modules.attention.cross import ProjectedMemory
from ..modules.attention.kernel import additive, later_or_outside
from .cache import DecodeCache, DecodeState, KeptMemory
from .driver import Decoder
from .step import ExplicitCache


class TargetState:
    """What the decoder's layers share in one step: past tokens P, N new ones, unpadded."""

    def __init__(self, past: int, queries: int, batch: int, device):
        self.start, self.end, self.count, self.batch, self.device = past, past + queries, queries, batch, device

    def positions(self) -> torch.Tensor:
        return torch.arange(self.start, self.end, device=self.device).expand(self.batch, self.count)  # [B, N]

    def key_positions(self) -> torch.Tensor:
        return torch.arange(self.end, device=self.device).expand(self.batch, self.end)  # [B, P + N]

    def mask(self, window: int | None, dtype) -> torch.Tensor:
        """[1, 1, N, P + N]: a later key, or one `window` or more back, is hidden."""
        query = torch.arange(self.start, self.end, device=self.device)[:, None]  # [N, 1]
        slot = torch.arange(self.end, device=self.device)[None, :]  # [1, P + N]
        return additive(later_or_outside(query, slot, window)[None, None], dtype)


class Seq2SeqProgram(nn.Module):
    """An encoder-decoder model's Decoder (driver.py), which the two programs read, and its decode
    graph (`model`, at the model's paths)."""

    def __init__(self, model):
        super().__init__()
        self.decoder = Decoder(model)
        if not self.decoder.encoder_decoder:
            raise NotImplementedError("these programs are an encoder-decoder's; step.py has the decoder-only ones")
        if self.decoder.recent:  # decode_step.unwritten_programs says so before a build gets here
            raise NotImplementedError("these programs carry no causal conv's recent inputs yet")
        self.model = self.decoder.decoding


class EncoderStep(Seq2SeqProgram):
    """An encoder-decoder model's encoder as a program: the source in, the keys and values of
    every cross attention layer out (see the module docstring)."""

    def names(self) -> tuple[list[str], list[str]]:
        inputs = ["input_ids", "attention_mask"] if self.decoder.source_mask else ["input_ids"]
        return inputs, [f"encoder.{i}.{kind}" for i in range(len(self.decoder.cross)) for kind in ("key", "value")]

    def forward(self, *source):
        target = source[0][:, :1]  # a one-token target: the decoder's ops are dead
        cache = self.decoder.new_cache(DecodeState(torch.ones_like(target), 1))
        self.model(*source, target, cache)
        return tuple(t for path in self.decoder.cross_paths for t in cache.memory(path).projected)  # [B, h_kv, S, d]


class Seq2SeqStep(Seq2SeqProgram):
    """An encoder-decoder model's decoder step, its own cache and the encoder's as inputs (see the module docstring)."""

    def layers(self) -> tuple[int, int]:
        return len(self.decoder.attention), len(self.decoder.cross)

    def names(self) -> tuple[list[str], list[str]]:
        own, cross = self.layers()
        past = [f"past_key_values.{i}.decoder.{k}" for i in range(own) for k in ("key", "value")]
        encoder = [f"past_key_values.{i}.encoder.{k}" for i in range(cross) for k in ("key", "value")]
        present = [f"present.{i}.decoder.{k}" for i in range(own) for k in ("key", "value")]
        mask = ["encoder_attention_mask"] if self.decoder.source_mask else []
        return ["input_ids", *mask, *past, *encoder], ["logits", *present]

    def forward(self, input_ids, *rest):
        mask, rest = (rest[0], rest[1:]) if self.decoder.source_mask else (None, rest)
        own, _ = self.layers()
        past, encoder = rest[: 2 * own], rest[2 * own:]
        state = TargetState(past[0].shape[2], input_ids.shape[1], input_ids.shape[0], input_ids.device)
        d = self.decoder
        layers = {path: ExplicitCache(state, past[2 * i], past[2 * i + 1], window)
                  for i, (path, window) in enumerate(zip(d.paths, d.windows))}
        memories = {path: KeptMemory(ProjectedMemory(encoder[2 * i], encoder[2 * i + 1]))
                    for i, path in enumerate(d.cross_paths)}
        source = encoder[0][:, 0, :, 0].long()  # [B, S]: stands for the source ids, which nothing reads
        cache = DecodeCache(state, layers, memories, skipped_sources(d, encoder[0], input_ids.shape[0]))
        out = self.model(source, *([mask] if mask is not None else []), input_ids, cache)
        logits = out[d.output] if isinstance(out, (tuple, list)) else out
        return (logits, *cache.tensors())  # [B, N, vocab], each layer's [B, h_kv, P + N, d]


def skipped_sources(decoder: Decoder, keys: torch.Tensor, batch: int) -> dict:
    """The outputs of the nodes computed once from the source, as a decoder step's cache holds them:
    a zero tensor [B, S, 1] each, which nothing reads (the cross attention reads its memories)."""
    nothing = keys.new_zeros(batch, keys.shape[2], 1)  # [B, S, 1]
    return {name: nothing for name, once in decoder.source_side.items() if once}


# -- export ----------------------------------------------------------------------------------------------


def example_source(encoder: EncoderStep, batch: int = 2, length: int = 6) -> tuple[torch.Tensor, ...]:
    ids = torch.ones(batch, length, dtype=torch.long)
    return (ids, torch.ones_like(ids)) if encoder.decoder.source_mask else (ids,)


def example_target(step: Seq2SeqStep, cross: tuple[torch.Tensor, ...], past: int, tokens: int):
    """Inputs of a decoder step: `tokens` new ids after `past`, the encoder's keys and values `cross`."""
    batch, source = cross[0].shape[0], cross[0].shape[2]
    weight = next(step.model.parameters())
    own = [torch.zeros(batch, m.kv_heads, past, m.head_dim, dtype=weight.dtype)
           for m in step.decoder.attention for _ in range(2)]
    mask = [torch.ones(batch, source, dtype=torch.long)] if step.decoder.source_mask else []
    return (torch.zeros(batch, tokens, dtype=torch.long), *mask, *own, *cross)


def seq2seq_traces(model) -> dict[str, tuple[nn.Module, tuple, tuple]]:
    """What each of the three programs is traced from, for torch.export and torch.onnx alike:
    name -> (module, example inputs, dynamic shapes), batch and lengths dynamic up to the spec's
    longest source and target. "encoder" (the source in), "decoder_prefill" (the first target
    tokens, the past empty) and "decoder_step" (one token after a past of 1 or more)."""
    encoder, step = EncoderStep(model).eval(), Seq2SeqStep(model).eval()
    max_length = step.decoder.max_length or 4096
    batch = torch.export.Dim("batch", min=1, max=1024)
    source = torch.export.Dim("source", min=2, max=step.decoder.max_source or 4096)
    src = example_source(encoder)
    with torch.no_grad():
        cross = encoder(*src)
    own, n_cross = step.layers()
    mask = ({0: batch, 1: source},) if step.decoder.source_mask else ()
    cross_dims = tuple({0: batch, 2: source} for _ in range(2 * n_cross))
    tokens = torch.export.Dim("tokens", min=1, max=max_length - 1)
    past = torch.export.Dim("past", min=1, max=max_length - 1)
    return {
        "encoder": (encoder, src, (tuple({0: batch, 1: source} for _ in src),)),  # forward(*source): one tuple
        "decoder_prefill": (step, example_target(step, cross, 0, 2), (
            {0: batch, 1: tokens}, (*mask, *({0: batch} for _ in range(2 * own)), *cross_dims))),
        "decoder_step": (step, example_target(step, cross, 3, 1), (
            {0: batch}, (*mask, *({0: batch, 2: past} for _ in range(2 * own)), *cross_dims))),
    }


def export_seq2seq(model) -> dict[str, torch.export.ExportedProgram]:
    """torch.export of the three programs (seq2seq_traces), the encoder's without the decoder's dead ops."""
    with torch.no_grad():
        programs = {name: torch.export.export(module, example, dynamic_shapes=shapes)
                    for name, (module, example, shapes) in seq2seq_traces(model).items()}
    programs["encoder"] = without_unread_ops(programs["encoder"])
    return programs


def export_seq2seq_onnx(model, paths: dict[str, str]) -> dict[str, tuple[list[str], list[str]]]:
    """The three programs as ONNX files (torch.onnx's dynamo exporter, as step.py's decode
    step), `paths` by program name, inputs and outputs under Optimum's names; returns each
    one's (input names, output names)."""
    from .step import export_onnx

    return {name: export_onnx(module, example, shapes, paths[name])
            for name, (module, example, shapes) in seq2seq_traces(model).items()}


def without_unread_ops(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """The program without the ops its outputs do not read: the encoder's trace also ran the
    decoder on its one-token target (nothing in it mutates state, so none of it is needed)."""
    graph = program.graph_module.graph
    read, todo = set(), [next(n for n in graph.nodes if n.op == "output")]
    while todo:
        node = todo.pop()
        if node not in read:
            read.add(node)
            todo.extend(node.all_input_nodes)
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and node not in read:
            graph.erase_node(node)
    program.graph_module.recompile()
    return program
