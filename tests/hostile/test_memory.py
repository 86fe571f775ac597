"""Hostile input, round three (issue 19), findings 6 and 7: memory.

6. A 1 MB zip-bomb `.pt` inflated to 1 GiB (peak 1.6 GB) before a clean error. Now the
   archive's central directory is read first and the checkpoint refused, unread, when its
   declared unpacked size exceeds the build's memory budget, when an entry unpacks over 100:1,
   or when its declared sizes cannot be true; a file that is not compressed (a legacy pickle,
   .safetensors) is refused when its size exceeds the budget (compiler/weights/checkpoint.py).
7. The build's memory estimate ignored the N x N attention scores, and an ONNX build of a
   long-sequence spec ended with exit 3 when ONNX Runtime failed to allocate them. Now each
   attention node reports `score_bytes`, the estimate counts them for targets whose run holds
   them whole (ONNX), and an allocation failure in a run is a located error, exit 1.

Every checkpoint test replaces the reader (torch.load, safetensors) by one that fails the test:
a refusal comes before anything is inflated or read.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.budget import check_build_memory, needed_bytes
from archspec.cli import main
from archspec.compiler.backends.export import example_inputs
from archspec.compiler.backends import targets
from archspec.compiler.weights.checkpoint import read_state_dict
from archspec.core.errors import SpecError

BUDGET = "ARCHSPEC_MAX_BUILD_BYTES"
MiB = 1 << 20


# -- finding 6: checkpoints that unpack to more than they are ------------------------------------------------


def zip_bomb(path, unpacked: int = 64 * MiB) -> None:
    """A torch.save checkpoint of `unpacked` bytes of zeros, its entries deflated (about 1000:1):
    torch.load reads it, inflating every byte."""
    plain = io.BytesIO()
    torch.save({"w": torch.zeros(unpacked // 4)}, plain)
    plain.seek(0)
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bomb:
        for entry in source.infolist():
            bomb.writestr(entry.filename, source.read(entry.filename))


@pytest.fixture
def no_reading(monkeypatch):
    """torch.load and safetensors' load_file fail the test: nothing may be read."""
    def read(*args, **kwargs):
        pytest.fail("the checkpoint was read")  # not an Exception: the reader's own handling cannot hide it

    monkeypatch.setattr(torch, "load", read)
    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "load_file", read)


def test_a_zip_bomb_over_the_budget_is_refused_before_it_is_inflated(tmp_path, monkeypatch, no_reading, capsys):
    bomb = tmp_path / "bomb.pt"
    zip_bomb(bomb)
    assert bomb.stat().st_size < MiB
    monkeypatch.setenv(BUDGET, str(16 * MiB))
    with pytest.raises(SpecError) as refused:
        read_state_dict(str(bomb))
    message = str(refused.value)
    assert f"weights: {bomb}: its archive's entries declare 64.0 MB (67,1" in message
    assert "once unpacked, more than the 16.0 MB of memory a build may use" in message
    assert BUDGET in refused.value.diagnostics[0].hint
    spec = tmp_path / "tiny.yaml"
    spec.write_text("name: tiny\ninputs:\n  x: [B, 4, 8]\ngraph:\n  - mlp: {ratio: 2}\n")
    assert main(["build", str(spec), "--target", "eager", "--weights", str(bomb), "-o", str(tmp_path / "out")]) == 1
    assert "its archive's entries declare 64.0 MB" in capsys.readouterr().err


def test_a_zip_bomb_within_the_budget_is_refused_by_its_compression_ratio(tmp_path, monkeypatch, no_reading):
    bomb = tmp_path / "bomb.pt"
    zip_bomb(bomb)
    monkeypatch.setenv(BUDGET, str(1 << 40))
    with pytest.raises(SpecError, match=r"archive entry '[^']*data/0' declares 64\.0 MB \(67,108,864 bytes\) "
                                        r"unpacked from [0-9.]+ KB compressed \(over 100:1\).*zip bomb"):
        read_state_dict(str(bomb))


def test_an_archive_entry_whose_declared_size_cannot_be_true_is_refused(tmp_path, no_reading):
    """A stored (uncompressed) entry whose central directory claims 1 GiB unpacked."""
    data = io.BytesIO()
    torch.save({"w": torch.zeros(16)}, data)
    raw = bytearray(data.getvalue())
    entry = next(e for e in zipfile.ZipFile(data).infolist() if e.filename.endswith("data/0"))
    record = raw.find(b"PK\x01\x02")  # the central directory's records, one per entry
    while raw[record + 46:record + 46 + len(entry.filename)] != entry.filename.encode():
        record = raw.find(b"PK\x01\x02", record + 4)
    struct.pack_into("<I", raw, record + 24, 1 << 30)  # the central directory's uncompressed size
    liar = tmp_path / "liar.pt"
    liar.write_bytes(raw)
    with pytest.raises(SpecError, match=r"archive entry '[^']*data/0' is stored uncompressed yet declares "
                                        r"1,073,741,824 bytes unpacked from 64"):
        read_state_dict(str(liar))


@pytest.mark.parametrize("kind", ["legacy", "safetensors"])
def test_an_uncompressed_checkpoint_over_the_budget_is_refused_unread(tmp_path, monkeypatch, kind):
    state = {"w": torch.ones(256, 1024)}  # 1 MB
    if kind == "legacy":
        path = tmp_path / "w.pt"
        torch.save(state, path, _use_new_zipfile_serialization=False)
    else:
        from safetensors.torch import save_file

        path = tmp_path / "w.safetensors"
        save_file(state, str(path))
    monkeypatch.setenv(BUDGET, str(256 * 1024))
    with monkeypatch.context() as unreadable:
        unreadable.setattr(torch, "load", lambda *a, **k: pytest.fail("read"))
        unreadable.setattr("safetensors.torch.load_file", lambda *a, **k: pytest.fail("read"))
        with pytest.raises(SpecError, match=r"reading it takes 1\.0 MB \(1,04[0-9,]+ bytes\) once unpacked, more "
                                            r"than the 256\.0 KB of memory a build may use"):
            read_state_dict(str(path))
    monkeypatch.setenv(BUDGET, str(16 * MiB))  # the same file within the budget loads
    assert torch.equal(read_state_dict(str(path))["w"], state["w"])


# -- finding 7: attention scores in the memory estimate --------------------------------------------------------

GRID = "x: {shape: [B, 64, 16], grid: [8, 8]}"
SEQ = "x: {shape: [B, 32, 16]}"
KINDS = {  # kind -> (inputs, node, score bytes by hand: 4 x heads x queries x keys)
    "global": (GRID, "attention: {kind: global, heads: 2}", 4 * 2 * 64 * 64),
    "causal": (SEQ, "attention: {kind: causal, heads: 2}", 4 * 2 * 32 * 32),
    "sliding": (SEQ, "attention: {kind: sliding, heads: 2, window: 8}", 4 * 2 * 32 * 32),
    "cross": (SEQ + "\n  m: {shape: [B, 20, 16]}", "{from: [x, m], attention: {kind: cross, heads: 2}}",
              4 * 2 * 32 * 20),
    "class": (GRID, "{from: cls, attention: {kind: class, heads: 2}}", 4 * 2 * 1 * 65),
    "window": (GRID, "attention: {kind: window, heads: 2, window: 4}", 4 * 2 * 4 * 16 * 16),
    "shifted": (GRID, "attention: {kind: shifted, heads: 2, window: 4}", 4 * 2 * 4 * 16 * 16),
    "window_pad": ("x: {shape: [B, 36, 16], grid: [6, 6]}", "attention: {kind: window, heads: 2, window: 4, pad: true}",
                   4 * 2 * 4 * 16 * 16),  # the 6x6 grid padded to 8x8: four 4x4 windows
    "sra": (GRID, "attention: {kind: sra, heads: 2, sr_ratio: 2}", 4 * 2 * 64 * 16),
    "linear_sra": (GRID, "attention: {kind: linear_sra, heads: 2, pool: 2}", 4 * 2 * 64 * 4),
}


def kind_spec(kind: str) -> str:
    inputs, node, _ = KINDS[kind]
    cls = "  - {id: cls, from: x, tokens: {count: 1}}\n" if kind == "class" else ""
    node = node if node.startswith("{") else "{" + node + "}"
    return f"name: s\ninputs:\n  {inputs}\ngraph:\n{cls}  - {{id: attn, {node[1:]}\n"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_score_bytes_are_the_scores_the_attention_computes(kind, monkeypatch):
    """By hand, and as the shapes PyTorch's attention is called with: batch 1, heads x queries x keys."""
    text = kind_spec(kind)
    report = archspec.check_text(text)
    attn = next(row for row in report.nodes if row.path == "attn")
    assert attn.score_bytes == KINDS[kind][2]
    assert all(row.score_bytes == 0 for row in report.nodes if row.path != "attn")
    record = archspec.check_text(text).to_json()["nodes"][-1]
    assert record["score_bytes"] == KINDS[kind][2] and record["buffer_bytes"] == attn.buffer_bytes
    called = []
    sdpa = F.scaled_dot_product_attention

    def counting(q, k, v, *args, **kwargs):
        called.append(4 * q.shape[:-1].numel() * k.shape[-2])
        return sdpa(q, k, v, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    model, graph = archspec.build_text(text), report.graph
    with torch.no_grad():
        model(*example_inputs(graph, batch=1))
    assert called == [attn.score_bytes]


LONG = "name: long\ninputs:\n  x: {shape: [B, 2048, 16]}\ngraph:\n  - {id: attn, attention: {kind: global, heads: 2}}\n"
BETWEEN = 64 * MiB  # the params and activations (about 1.2 MB) fit; with 2.2 x 3 x 32 MB of scores they do not


def test_the_estimate_counts_attention_scores_for_targets_that_hold_them_whole(monkeypatch):
    report = archspec.check_text(LONG)
    assert report.nodes[0].score_bytes == 4 * 2 * 2048 * 2048
    assert needed_bytes(report, runs_model=True) < BETWEEN < needed_bytes(report, runs_model=True, scores=True)
    monkeypatch.setenv(BUDGET, str(BETWEEN))
    check_build_memory(report, runs_model=True)  # a target whose attention streams the scores: fits
    with pytest.raises(SpecError) as refused:
        check_build_memory(report, runs_model=True, scores=True)
    message, diagnostic = str(refused.value), refused.value.diagnostics[0]
    assert ("plus attention scores), and 64.0 MB is available; the attention scores of attn alone take 211.2 MB"
            in message)
    assert diagnostic.path == "attn" and diagnostic.loc.line == 5
    assert targets.get("onnx").materializes_scores and not targets.get("export").materializes_scores


def test_an_onnx_build_of_a_long_sequence_is_refused_before_it_runs(tmp_path, monkeypatch, capsys):
    spec = tmp_path / "long.yaml"
    spec.write_text(LONG)
    monkeypatch.setenv(BUDGET, str(BETWEEN))
    assert main(["build", str(spec), "--target", "onnx", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "long.yaml:5:16: error: attn: building this model needs about" in err
    assert "the attention scores of attn alone take 211.2 MB" in err
    assert not (tmp_path / "out").exists()


ALLOCATION_FAILURE = ("Non-zero status code returned while running FusedMatMul node. Status Message: "
                      "bfc_arena.cc:360 Failed to allocate memory for requested buffer of size 6442450944")
TINY = "name: tiny\ninputs:\n  x: {shape: [B, 16, 8]}\ngraph:\n  - {id: attn, attention: {kind: global, heads: 2}}\n"


def test_onnx_runtime_running_out_of_memory_is_a_located_error(tmp_path, monkeypatch, capsys):
    """Found with the spec at 16,384 tokens under `ulimit -v 6000000`: exit 3 before."""
    import onnxruntime
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail

    def run(self, *args, **kwargs):
        raise Fail(ALLOCATION_FAILURE)

    monkeypatch.setattr(onnxruntime.InferenceSession, "run", run)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    assert main(["build", str(spec), "--target", "onnx", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert ("tiny.yaml:5:16: error: attn: ONNX Runtime's check of model.onnx at batch 3 ran out of memory (a request "
            "for 6.0 GB failed): the attention scores of attn") in err
    assert "bug" not in err


def test_a_torch_run_out_of_memory_in_the_export_build_is_a_located_error(tmp_path, monkeypatch, capsys):
    from archspec.compiler.backends import export

    def gap(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(export, "gap_at_other_sizes", gap)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    assert main(["build", str(spec), "--target", "export", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "error: attn: torch.export's run of the model ran out of memory (a request for 1.0 GB failed)" in err
    assert "bug" not in err


def test_check_json_keeps_its_fields_and_adds_score_bytes(tmp_path, capsys):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    assert main(["check", str(spec), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)["nodes"][0]
    assert {"path", "op", "kind", "shape", "params", "flops", "activation_bytes", "buffer_bytes", "line"} <= set(record)
    assert record["score_bytes"] == 4 * 2 * 16 * 16
