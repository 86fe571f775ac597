"""An encoder-decoder's decode programs as ONNX files (`build --target onnx`: encoder.onnx,
decoder_prefill.onnx, decoder_step.onnx; compiler/generate/seq2seq_step.py's export_seq2seq_onnx).
Greedy decoding driven by ONNX Runtime alone (the encoder once, the prefill on the start id, the
step once per token) must give generate()'s tokens, each step's logits those of the whole target
through forward without a cache. One export per model (module-scoped fixtures): the exports are
the slow part.
"""

from __future__ import annotations

import json

import pytest
import torch

import archspec
from archspec.cli.main import main
from archspec.compiler.generate import generate
from archspec.compiler.generate.seq2seq_step import EncoderStep, Seq2SeqStep

from tests.conftest import ROOT, scratch
from tests.generate.test_generate import one_thread, transformer_pair  # noqa: F401  (one_thread: the autouse fixture)
from tests.generate.test_seq2seq_step import NEW, assert_logits_are_forwards, greedy_through

ort = pytest.importorskip("onnxruntime")

PROGRAMS = ("encoder", "decoder_prefill", "decoder_step")
T5_SMALLER = {"layers": 1, "decoder_layers": 1}  # t5_tiny with one layer each side: a faster build


def onnx_programs(folder, model) -> dict:
    """Each program name -> its ONNX file in an ONNX Runtime session, called with the eager
    module's inputs in order (EncoderStep.names, Seq2SeqStep.names), giving tensors."""
    orders = {"encoder": EncoderStep(model).names()[0], "decoder_prefill": Seq2SeqStep(model).names()[0],
              "decoder_step": Seq2SeqStep(model).names()[0]}
    return {name: session_call(folder / f"{name}.onnx", orders[name]) for name in PROGRAMS}


def session_call(path, order: list[str]):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(*args):
        outputs = session.run(None, {n: args[order.index(n)].numpy() for n in names})
        return tuple(torch.from_numpy(o) for o in outputs)

    return run


@pytest.fixture(scope="module")
def transformer(request, tmp_path_factory):
    """transformer_base at nn.Transformer's small size (test_generate.transformer_pair), its three
    ONNX files written and checked by save_seq2seq_onnx: (folder, model, report.json's gaps)."""
    from archspec.compiler.backends.decode_step import save_seq2seq_onnx

    _, ours = transformer_pair()
    folder = scratch(request, tmp_path_factory, "transformer")
    gaps = save_seq2seq_onnx(ours, *(str(folder / f"{name}.onnx") for name in PROGRAMS))
    return folder, ours, gaps


@pytest.fixture(scope="module")
def t5_built(request, tmp_path_factory):
    """`build t5_tiny --target onnx` (one layer each side, opset 18 model.onnx): (folder, the built model)."""
    out = scratch(request, tmp_path_factory, "t5") / "out"
    sets = [a for k, v in T5_SMALLER.items() for a in ("--set", f"{k}={v}")]
    assert main(["build", "t5_tiny", *sets, "--plain-onnx", "--target", "onnx", "-o", str(out)]) == 0
    model = archspec.build(str(ROOT / "specs" / "t5_tiny.yaml"), T5_SMALLER, seed=0).eval()  # the build's weights
    return out, model


def test_the_2017_transformers_onnx_files_decode_as_generate(transformer):
    folder, ours, gaps = transformer
    assert set(gaps) == {"encoder_gap", "decoder_prefill_gap", "decoder_step_gap"}
    assert max(gaps.values()) < 1e-4
    source = torch.randint(1, 500, (3, 11), generator=torch.Generator().manual_seed(3))
    expected = generate(ours, source, max_new_tokens=NEW, decoder_start_token_id=1)
    got, seen = greedy_through(onnx_programs(folder, ours), Seq2SeqStep(ours), (source,), 1, NEW)
    assert torch.equal(got, expected)
    assert_logits_are_forwards(ours, (source,), got, seen)


def test_t5s_onnx_files_from_build_decode_a_padded_batch_as_generate(t5_built):
    out, ours = t5_built
    source = torch.randint(1, 1000, (2, 9), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(source)
    mask[1, -3:] = 0  # the second source three tokens shorter
    expected = generate(ours, source, attention_mask=mask, max_new_tokens=NEW, decoder_start_token_id=0)
    got, seen = greedy_through(onnx_programs(out, ours), Seq2SeqStep(ours), (source, mask), 0, NEW)
    assert torch.equal(got, expected)
    assert_logits_are_forwards(ours, (source, mask), got, seen)


def test_build_lists_t5s_onnx_files_under_optimums_names_and_reports_their_gaps(t5_built):
    out, _ = t5_built
    listed = json.dumps(json.loads((out / "manifest.json").read_text()))
    for name in PROGRAMS:
        assert (out / f"{name}.onnx").is_file() and f"{name}.onnx" in listed
    onnx = json.loads((out / "report.json").read_text())["onnx"]
    assert max(onnx[f"{name}_gap"] for name in PROGRAMS) < 1e-4
    step = ort.InferenceSession(str(out / "decoder_step.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in step.get_inputs()] == [
        "input_ids", "encoder_attention_mask", "past_key_values.0.decoder.key", "past_key_values.0.decoder.value",
        "past_key_values.0.encoder.key", "past_key_values.0.encoder.value"]
    assert [o.name for o in step.get_outputs()] == ["logits", "present.0.decoder.key", "present.0.decoder.value"]
    encoder = ort.InferenceSession(str(out / "encoder.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in encoder.get_inputs()] == ["input_ids", "attention_mask"]
    assert [o.name for o in encoder.get_outputs()] == ["encoder.0.key", "encoder.0.value"]
