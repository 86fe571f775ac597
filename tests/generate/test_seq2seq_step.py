"""An encoder-decoder's decode programs (compiler/generate/seq2seq_step.py): the encoder once per
source (each cross attention's keys and values out), then the decoder's prefill and its decode
step, the caches as inputs and outputs. Greedy decoding driven by the exported programs alone
must give generate()'s tokens, which test_generate.py checks against torch.nn.Transformer and
test_generate_compiled.py against Hugging Face's T5; and `build` writes them.
"""

from __future__ import annotations

import json

import torch

import archspec
from archspec.compiler.generate import generate
from archspec.compiler.generate.seq2seq_step import Seq2SeqStep, export_seq2seq

from tests.conftest import ROOT
from tests.generate.test_generate import one_thread, transformer_pair  # noqa: F401  (one_thread: the autouse fixture)
from tests.parity.test_t5 import NOISE, RESIZED
from tests.parity.test_vocabulary import perturb_everything

NEW = 12


def greedy_through(programs: dict, step: Seq2SeqStep, source: tuple, start: int, new: int):
    """([B, 1 + new], each step's last logits [B, vocab]): the exported encoder once, the
    exported prefill on the start id, then the exported decode step once per token, each
    step's cache passed back in. `programs`: "encoder", "decoder_prefill", "decoder_step" ->
    a callable giving tensors (an ExportedProgram's module, or an ONNX Runtime session's run)."""
    encoder, prefill, decode = (programs[k] for k in ("encoder", "decoder_prefill", "decoder_step"))
    batch = source[0].shape[0]
    mask = list(source[1:])  # T5: the source's padding mask, for every decoder step
    with torch.no_grad():
        cross = encoder(*source)
        own = [torch.zeros(batch, m.kv_heads, 0, m.head_dim) for m in step.decoder.attention for _ in range(2)]
        out = torch.full((batch, 1), start)
        logits, *own = prefill(out, *mask, *own, *cross)
        seen = []
        for i in range(new):
            seen.append(logits[:, -1])
            chosen = logits[:, -1].argmax(-1, keepdim=True)  # [B, 1]
            out = torch.cat([out, chosen], dim=1)
            if i + 1 < new:
                logits, *own = decode(chosen, *mask, *own, *cross)
    return out, seen


def modules(programs: dict) -> dict:
    return {name: program.module() for name, program in programs.items()}


def assert_logits_are_forwards(model, source: tuple, out: torch.Tensor, seen: list) -> None:
    """Each step's logits are those of the whole target so far through forward, without a cache
    (random models repeat tokens under greedy decoding: the logits tell a wrong cache apart)."""
    with torch.no_grad():
        for k, logits in enumerate(seen):
            expected = model(*source, out[:, : k + 1])[:, -1]  # [B, vocab]
            assert torch.allclose(logits, expected, atol=1e-4, rtol=1e-4), (k, (logits - expected).abs().max())


def test_the_2017_transformers_programs_decode_as_generate():
    _, ours = transformer_pair()
    source = torch.randint(1, 500, (3, 11), generator=torch.Generator().manual_seed(3))
    expected = generate(ours, source, max_new_tokens=NEW, decoder_start_token_id=1)
    got, seen = greedy_through(modules(export_seq2seq(ours)), Seq2SeqStep(ours), (source,), 1, NEW)
    assert torch.equal(got, expected)
    assert_logits_are_forwards(ours, (source,), got, seen)


def test_t5s_programs_decode_a_padded_batch_as_generate():
    torch.manual_seed(0)
    ours = perturb_everything(archspec.build(str(ROOT / "specs" / "t5_small.yaml"),
                                             {**RESIZED[0], "decoder_layers": 2}).eval(), scale=NOISE)
    with torch.no_grad():  # a smaller token table: else greedy repeats the last token (see test_generate_compiled)
        ours.embed.tokens.weight.mul_(0.03)
    source = torch.randint(1, 1000, (2, 9), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(source)
    mask[1, -3:] = 0  # the second source three tokens shorter
    expected = generate(ours, source, attention_mask=mask, max_new_tokens=NEW, decoder_start_token_id=0)
    got, seen = greedy_through(modules(export_seq2seq(ours)), Seq2SeqStep(ours), (source, mask), 0, NEW)
    assert torch.equal(got, expected)
    assert_logits_are_forwards(ours, (source, mask), got, seen)


def test_build_writes_an_encoder_decoders_programs(tmp_path):
    from archspec.cli.main import main

    out = tmp_path / "t5"
    assert main(["build", "t5_tiny", "-o", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    listed = json.dumps(manifest)
    for name in ("encoder.pt2", "decoder_prefill.pt2", "decoder_step.pt2"):
        assert (out / name).is_file() and name in listed
    program = torch.export.load(str(out / "decoder_step.pt2"))
    names = [spec.arg.name for spec in program.graph_signature.input_specs if spec.kind.name == "USER_INPUT"]
    assert len(names) == 1 + 1 + 3 * 2 * 2  # ids, the source mask, 3 decoder layers' own and cross keys and values
