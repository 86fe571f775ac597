"""The decode step beside the model, for a decoder-only spec that generates (gpt2, llama,
tiny_lm): `build --target export` adds decode_step.pt2 and prefill.pt2, `--target onnx`
decode_step.onnx and prefill.onnx: the single-token step with the key/value cache as inputs
and outputs, and the prefill that fills it from the prompt (the same inputs, the past empty),
Hugging Face's names (`input_ids`, `attention_mask`, `position_ids`,
`past_key_values.{i}.key|value` -> `logits`, `present.{i}.key|value`; a causal conv's last
inputs `past_conv.{i}` -> `present_conv.{i}`, as LFM2's), batch and cache (or prompt) length
dynamic (compiler/generate/step.py).

Each is checked against the eager step at a batch and a cache length it was not traced at
(random past keys and values; the prefill on a left-padded prompt): the largest difference
over all outputs is reported. prefill.onnx takes the empty past as inputs of length 0, which
ONNX Runtime runs as it is.

An encoder-decoder spec (transformer_base, t5_small) gets encoder.pt2, decoder_prefill.pt2 and
decoder_step.pt2 with `--target export`, encoder.onnx, decoder_prefill.onnx and decoder_step.onnx
with `--target onnx` (compiler/generate/seq2seq_step.py, Optimum's names), checked the same way
(the source at CHECK_BATCH and CHECK_PAST tokens, T5's last one padded). `decode_programs` says
which files a spec gets and which function writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from archspec.core.ir import Graph
from archspec.primitives.kv_cache import fed_inputs, generates, recent_layers, refusal, uncached_refusal

CHECK_BATCH, CHECK_PAST = 3, 7  # the step is traced at batch 2 after 5 tokens (step.example_step)


def has_decode_step(graph: Graph) -> bool:
    """A decoder-only spec generate() decodes: token ids in (and an attention_mask it does not
    feed: kv_cache.padding_inputs), an lm head's logits out."""
    return len(fed_inputs(graph)) == 1 and generates(graph)


def check_inputs(step) -> tuple[torch.Tensor, ...]:
    """One decode step's inputs at CHECK_BATCH and CHECK_PAST, the past keys and values random."""
    from ..generate.step import example_step

    generator = torch.Generator().manual_seed(0)
    ids, mask, positions, *past = example_step(step, CHECK_BATCH, CHECK_PAST)
    ids = torch.randint(0, step.decoder.vocab, ids.shape, generator=generator)  # [B, 1]
    past = [torch.randn(p.shape, generator=generator, dtype=p.dtype) for p in past]  # [B, h_kv, P, d] each
    return (ids, mask, positions, *past)


def largest_gap(ours, reference) -> float:
    return max(float((torch.as_tensor(a) - b).abs().max()) for a, b in zip(ours, reference))


def save_programs(model, prefill_path: str, step_path: str) -> float:
    """decode_step.pt2 and prefill.pt2 (the prompt in, its logits and the filled cache out);
    the largest difference of either from the eager step."""
    from ..generate.step import DecodeStep, export_decode_step, export_prefill

    step = DecodeStep(model).eval()
    program, prefill = export_decode_step(model), export_prefill(model)
    torch.export.save(program, step_path)
    torch.export.save(prefill, prefill_path)
    inputs, prompt = check_inputs(step), prompt_inputs(step)
    with torch.no_grad():
        return max(largest_gap(program.module()(*inputs), step(*inputs)),
                   largest_gap(prefill.module()(*prompt), step(*prompt)))


def prompt_inputs(step) -> tuple[torch.Tensor, ...]:
    """A left-padded prompt of CHECK_PAST tokens at CHECK_BATCH, the past empty."""
    from ..generate.step import example_prefill

    ids, mask, positions, *empty = example_prefill(step, CHECK_BATCH, CHECK_PAST)
    ids = torch.randint(0, step.decoder.vocab, ids.shape, generator=torch.Generator().manual_seed(1))  # [B, N]
    mask[0, :2] = 0  # the first sequence two tokens shorter, padded on the left
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # Hugging Face's positions
    return (ids, mask, positions, *empty)


def save_onnx(model, prefill_path: str, step_path: str) -> dict[str, float]:
    """prefill.onnx and decode_step.onnx; the largest difference of each from the eager step in
    ONNX Runtime (the prefill on a left-padded prompt, the step at CHECK_BATCH after CHECK_PAST
    tokens), neither at the batch or length it was traced at: report.json's names -> gaps."""
    from ..generate.step import DecodeStep, export_decode_step_onnx, export_prefill_onnx

    names, _ = export_decode_step_onnx(model, step_path)
    export_prefill_onnx(model, prefill_path)
    step = DecodeStep(model).eval()
    return {"prefill_gap": onnx_gap(prefill_path, names, step, prompt_inputs(step)),
            "decode_step_gap": onnx_gap(step_path, names, step, check_inputs(step))}


def onnx_gap(path: str, names: list[str], step, inputs) -> float:
    """The largest difference between the ONNX file at `path` run by ONNX Runtime on the CPU
    and the eager step, on `inputs` (in the order of `names`)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {n.name: inputs[names.index(n.name)].numpy() for n in session.get_inputs()}
    with torch.no_grad():
        return largest_gap(session.run(None, feeds), step(*inputs))


# -- an encoder-decoder (transformer_base, t5_small): encoder, decoder_prefill, decoder_step (.pt2, .onnx) ---------


SEQ2SEQ_PROGRAMS = ("encoder", "decoder_prefill", "decoder_step")
DECODER_PROGRAMS = ("prefill", "decode_step")


@dataclass
class DecodePrograms:
    """What a build adds for a spec that generates: its files, the function that writes them
    from the model and measures them against eager (`save(model, *paths)`), and what they hold."""
    files: tuple[str, ...]
    save: Callable
    holds: str

    def listed(self, more: str = "") -> str:
        """The files as a build step's title names them: "a, b and c (what they hold; more)"."""
        return ", ".join(self.files[:-1]) + f" and {self.files[-1]} ({self.holds}{'; ' + more if more else ''})"


def decode_programs(graph: Graph, suffix: str = ".pt2") -> DecodePrograms | None:
    """The decode programs `build` adds beside the model, as torch.export programs (".pt2",
    `--target export`: the largest gap from eager) or ONNX files (".onnx", `--target onnx`:
    report.json's names -> gaps in ONNX Runtime), or None for a spec that does not generate."""
    onnx = suffix == ".onnx"
    if has_decode_step(graph):
        names, save, holds = DECODER_PROGRAMS, save_onnx if onnx else save_programs, "KV cache in and out"
    elif has_seq2seq_step(graph):
        names, save, holds = SEQ2SEQ_PROGRAMS, save_seq2seq_onnx if onnx else save_seq2seq_programs, "caches in and out"
    else:
        return None
    return DecodePrograms(tuple(f"{name}{suffix}" for name in names), save, holds)


def unwritten_programs(graph: Graph) -> str | None:
    """Why a spec that generates gets no decode programs, in words, or None: an encoder-decoder
    whose source is no token ids (seq2seq_step.py's examples are ids), or a decoder-only spec
    that generates without a cache (driver.Decoder.without_cache: the programs carry one)."""
    inputs = fed_inputs(graph)
    if len(inputs) in (2, 3) and inputs[0].type.layout != "ids" and generates(graph):
        return (f"no encoder or decoder programs: they take a source of token ids for now, and "
                f"'{inputs[0].name}' is not; generate with this spec in Python (model.generate)")
    if len(inputs) in (2, 3) and recent_layers(graph):
        return (f"no encoder or decoder programs: they carry no causal conv's recent inputs yet, and "
                f"'{recent_layers(graph)[0].path}' keeps them; generate with this spec in Python (model.generate)")
    why = refusal(graph)
    if len(inputs) == 1 and why is not None and uncached_refusal(graph) is None:
        node, words = why
        return (f"no decode programs (prefill, decode_step): they carry a key/value cache, and "
                f"{f'{node!r}: ' if node else ''}{words}; generate() runs the whole sequence each step instead")
    return None


def has_seq2seq_step(graph: Graph) -> bool:
    """An encoder-decoder spec generate() decodes: source (and its mask) and target ids in, logits out.
    A source that is no token ids (audio features, an image) generates in Python, but its
    programs are not written yet (seq2seq_step.py's examples and stand-ins are ids)."""
    inputs = fed_inputs(graph)
    return len(inputs) in (2, 3) and inputs[0].type.layout == "ids" and generates(graph) and not recent_layers(graph)


def save_seq2seq_programs(model, encoder_path: str, prefill_path: str, step_path: str) -> float:
    """The encoder program (the source in, each cross attention's keys and values out), the
    decoder's prefill (the past empty) and its decode step (generate/seq2seq_step.py); the
    largest difference of any from the eager modules at a batch and lengths they were not traced at."""
    from ..generate.seq2seq_step import export_seq2seq

    programs = export_seq2seq(model)
    for name, path in zip(SEQ2SEQ_PROGRAMS, (encoder_path, prefill_path, step_path)):
        torch.export.save(programs[name], path)
    with torch.no_grad():
        return max(largest_gap(programs[name].module()(*inputs), eager(*inputs))
                   for name, (eager, inputs) in seq2seq_checks(model).items())


def save_seq2seq_onnx(model, encoder_path: str, prefill_path: str, step_path: str) -> dict[str, float]:
    """encoder.onnx, decoder_prefill.onnx and decoder_step.onnx (the three programs of
    save_seq2seq_programs, Optimum's names); each one's largest difference in ONNX Runtime from
    the eager module, at a batch and lengths it was not traced at: report.json's names -> gaps."""
    from ..generate.seq2seq_step import export_seq2seq_onnx

    paths = dict(zip(SEQ2SEQ_PROGRAMS, (encoder_path, prefill_path, step_path)))
    names = export_seq2seq_onnx(model, paths)
    return {f"{name}_gap": onnx_gap(paths[name], names[name][0], eager, inputs)
            for name, (eager, inputs) in seq2seq_checks(model).items()}


def seq2seq_checks(model) -> dict[str, tuple]:
    """Each seq2seq program's name -> (the eager module, the inputs it is checked on): batch
    CHECK_BATCH, a source of CHECK_PAST tokens (T5: its last one padded), the decoder's own past
    random, P = CHECK_PAST - 3 for the step; neither batch nor length the traces' (seq2seq_traces)."""
    from ..generate.seq2seq_step import EncoderStep, Seq2SeqStep, example_target

    encoder, step = EncoderStep(model).eval(), Seq2SeqStep(model).eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, step.decoder.vocab, (CHECK_BATCH, CHECK_PAST), generator=generator)  # [B, S]
    source = (ids, torch.ones_like(ids).index_fill(1, torch.tensor([CHECK_PAST - 1]), 0)) \
        if step.decoder.source_mask else (ids,)  # T5: the last source token padded
    first = 2 if step.decoder.source_mask else 1  # where the decoder's own past begins among a step's inputs
    own = slice(first, first + 2 * step.layers()[0])
    checks = {"encoder": (encoder, source)}
    with torch.no_grad():
        cross = encoder(*source)
    for name, past in (("decoder_prefill", 0), ("decoder_step", CHECK_PAST - 3)):
        inputs = list(example_target(step, cross, past, 1))
        inputs[0] = torch.randint(0, step.decoder.vocab, inputs[0].shape, generator=generator)  # [B, 1]
        if step.decoder.source_mask:
            inputs[1] = source[1]
        inputs[own] = [torch.randn(t.shape, generator=generator) for t in inputs[own]]
        checks[name] = (step, tuple(inputs))
    return checks
