"""Issue 11's classes of hostile input, each closed: long chains that resolve into one another,
numbers that overflow, checkpoints that are broken, special files, resource limits. Each ends in
a located SpecError (exit 1), a usage error (exit 2) or a correct result, never a traceback.
(Names: test_names.py; output folders, seeds, races, interrupts: test_artifacts.py; argument
types: test_contracts.py; semantic slips: tests/bad_specs/.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

import archspec
from archspec.core.errors import SpecError
from archspec.language.limits import MAX_EXPRESSION_DEPTH, MAX_NESTING, MAX_NODES, MAX_TEXT_BYTES, MAX_WORK

from tests.conftest import ROOT

HEAD = "name: chain\ninputs:\n  x: [B, 8, 16]\n"


class TookTooLong(BaseException):
    """A BaseException, so that no `except Exception` in archspec can swallow the alarm."""


@contextmanager
def within(seconds: float):
    """Fail if the block takes longer (an alarm: a hang fails the test instead of stalling it)."""
    def on_alarm(signum, frame):
        raise TookTooLong(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "archspec", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd or ROOT)


def refused(text: str, *, overrides=None) -> SpecError:
    with pytest.raises(SpecError) as caught:
        archspec.check_text(text, overrides)
    for diag in caught.value.diagnostics:
        assert diag.loc is not None, diag.text()
    return caught.value


# -- chains that resolve into one another: iterative, no depth limit ------------------------------------------


@pytest.mark.parametrize("skip", ["if: false", "repeat: 0"])
def test_thousands_of_skipped_nodes_pass_their_input_on(skip):
    text = HEAD + "graph:\n  - id: a\n    norm: {}\n" + "".join(
        f"  - id: s{i}\n    {skip}\n    norm: {{}}\n" for i in range(5000)) + "  - id: last\n    norm: {}\n"
    with within(10):
        report = archspec.check_text(text)
    assert report.graph.inputs_of("last") == ("a",)


def test_a_chain_of_from_aliases_through_skipped_nodes_resolves():
    text = HEAD + "graph:\n  - id: s0\n    norm: {}\n" + "".join(
        f"  - id: s{i}\n    from: s{i - 1}\n    if: false\n    norm: {{}}\n" for i in range(1, 3000)) + \
        "  - id: last\n    from: s2999\n    norm: {}\n"
    with within(10):
        assert archspec.check_text(text).graph.inputs_of("last") == ("s0",)


@pytest.mark.parametrize("length", [150, 5000])
def test_a_legal_chain_of_params_each_defined_from_the_next_passes(length):
    text = "name: chain\nparams:\n" + "".join(f"  p{i}: ${{p{i + 1} + 1}}\n" for i in range(length)) + \
        f"  p{length}: 1\n" + "inputs:\n  x: [B, 8, 16]\ngraph:\n  - mlp: {hidden: \"${p0}\"}\n"
    with within(10):
        report = archspec.check_text(text)
    assert report.graph.record("mlp").params.hidden == length + 1


def test_a_child_spec_with_thousands_of_params_merges_with_its_base_quickly(tmp_path):
    """The merge took every param's locations out of the base one name at a time (5,000 x 5,000)."""
    (tmp_path / "base.yaml").write_text("name: base\nparams:\n" + "".join(f"  b{i}: {i}\n" for i in range(5000)) +
                                        "  h: 4\ninputs:\n  x: [B, 8, 16]\ngraph:\n  - mlp: {hidden: \"${h}\"}\n")
    child = tmp_path / "child.yaml"
    child.write_text("extends: base.yaml\nname: chain\nparams:\n" +
                     "".join(f"  b{i}: {i + 1}\n  p{i}: ${{b{i} + 1}}\n" for i in range(5000)) + "  h: ${p4999}\n")
    with within(5):
        report = archspec.check(child)
    assert report.graph.record("mlp").params.hidden == 5001


def test_a_long_cycle_of_params_is_one_located_error_with_the_cycle_shortened():
    text = "name: chain\nparams:\n" + "".join(f"  p{i}: ${{p{(i + 1) % 3000}}}\n" for i in range(3000)) + \
        "inputs:\n  x: [B, 8, 16]\ngraph:\n  - norm: {}\n"
    error = refused(text)
    assert len(error.diagnostics) == 1
    assert error.message.startswith("param 'p0' depends on itself: p0 -> p1 -> p2 -> p3 -> ... (2993 more) -> ")


def test_a_conditional_param_that_looks_cyclic_but_is_not_passes():
    text = ("name: c\nparams:\n  a: ${b if False else 4}\n  b: ${a}\ninputs:\n  x: [B, 8, 16]\n"
            "graph:\n  - mlp: {hidden: \"${b}\"}\n")
    assert archspec.check_text(text).graph.record("mlp").params.hidden == 4


def test_blocks_nested_beyond_the_limit_are_refused_as_such_and_within_it_they_build():
    def chain(depth):
        blocks = "".join(f"  b{i}:\n    graph:\n      - b{i + 1}: {{}}\n" for i in range(depth - 1))
        return HEAD + "blocks:\n" + blocks + f"  b{depth - 1}:\n    graph:\n      - norm: {{}}\ngraph:\n  - b0: {{}}\n"

    error = refused(chain(2000))
    assert f"blocks and groups nest deeper than {MAX_NESTING} levels (archspec's limit)" in error.message
    archspec.build_text(chain(MAX_NESTING))


def test_an_expression_nested_beyond_the_limit_is_refused_as_such():
    deep = "-" * (MAX_EXPRESSION_DEPTH + 5) + "1"
    error = refused(HEAD + f"params:\n  a: ${{{deep}}}\ngraph:\n  - norm: {{}}\n")
    assert error.message == f"expression nested deeper than {MAX_EXPRESSION_DEPTH} levels (archspec's limit)"
    shallow = "-" * (MAX_EXPRESSION_DEPTH - 5) + "1"
    archspec.check_text(HEAD + f"params:\n  a: ${{{shallow}}}\ngraph:\n  - norm: {{}}\n")


def test_expressions_that_compute_too_much_in_all_are_refused_quickly():
    text = HEAD + "params:\n  xs: ${range(10000)}\ngraph:\n  - repeat: 5000\n    norm: {eps: \"${1e-6 if max(xs) " \
                  "> 0 else 1e-5}\"}\n"
    with within(5):
        error = refused(text)
    assert f"compute more than {MAX_WORK:,} values in all (archspec's limit)" in error.message


def test_the_node_and_text_limits_are_reported_as_such():
    text = HEAD + f"graph:\n  - repeat: {MAX_NODES}\n    graph:\n      - norm: {{}}\n      - norm: {{}}\n"
    with within(10):
        assert f"more than {MAX_NODES} nodes" in refused(text).message
    assert "larger than" in refused("a: " + "x" * MAX_TEXT_BYTES + "\n").message


# -- numbers ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("literal, message", [
    ("1e400", "'1e400' is too large: it overflows to infinity"),
    ("-1e999", "'-1e999' is too large: it overflows to infinity"),
    ("123456789012345678901234567890", "integer '12345678901234567890... (30 characters)' is too large"),
    ("9" * 5000, "integer '99999999999999999999... (5000 characters)' is too large"),
    (".nan", "'.nan' is not a finite number"),
])
def test_numbers_no_network_has_are_located_errors(literal, message):
    error = refused(HEAD + f"params:\n  a: {literal}\ngraph:\n  - norm: {{}}\n")
    assert error.message.startswith(message) and (error.loc.line, error.loc.col) == (5, 6)


def test_a_very_long_integer_given_with_set_is_located_on_the_command_line(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(HEAD.replace("name: chain\n", "name: chain\nparams:\n  d: 16\n") + "graph:\n  - norm: {}\n")
    result = cli("check", str(spec), "--set", "d=" + "9" * 5000)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("<command line>:1:3: error: integer '99999999999999999999... (5000 characters)'")


@pytest.mark.parametrize("value, message", [
    (float("nan"), "nan is not a finite number"), (float("inf"), "inf is not a finite number"),
    (2**70, "an integer too large"), ([1.0, float("-inf")], "-inf is not a finite number"),
])
def test_overrides_given_through_the_api_are_held_to_the_same(value, message):
    spec = HEAD.replace("name: chain\n", "name: chain\nparams:\n  d: 16\n") + "graph:\n  - norm: {}\n"
    error = refused(spec, overrides={"d": value})
    assert message in error.message and error.loc.file == "<command line>"


def test_a_huge_mlp_ratio_is_a_rule_error_not_an_overflow():
    error = refused(HEAD + "graph:\n  - mlp: {ratio: 1.0e+308}\n")
    assert "gives a hidden layer wider than" in error.message


# -- special files ------------------------------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "spec.yaml"
    os.mkfifo(path)
    return path


def test_a_fifo_as_the_spec_does_not_hang(fifo, tmp_path):
    with within(5):
        with pytest.raises(SpecError, match=r"is a named pipe \(FIFO\), not a spec file"):
            archspec.check(fifo)
        with pytest.raises(SpecError, match=r"is a named pipe"):
            archspec.build(fifo)
    began = time.monotonic()
    for command in (["check", str(fifo)], ["build", str(fifo), "--target", "eager", "-o", str(tmp_path / "out")]):
        result = cli(*command)
        assert result.returncode == 1 and "is a named pipe (FIFO), not a spec file" in result.stderr
    assert time.monotonic() - began < 60


@pytest.mark.parametrize("path, what", [("/dev/null", "a character device"), ("/dev/zero", "a character device")])
def test_devices_as_the_spec_are_refused_without_reading(path, what):
    with within(5):
        with pytest.raises(SpecError, match=f"is {what}, not a spec file"):
            archspec.check(path)


def test_extends_naming_a_fifo_does_not_hang(fifo, tmp_path):
    spec = tmp_path / "child.yaml"
    spec.write_text("extends: spec.yaml\nname: child\n")
    with within(5):
        with pytest.raises(SpecError, match="extends"):
            archspec.check(spec)


# -- checkpoints --------------------------------------------------------------------------------------------

TINY = HEAD.replace("name: chain", "name: tiny") + "graph:\n  - id: mlp\n    mlp: {hidden: 32}\n"


@pytest.fixture(scope="module")
def good_state():
    return archspec.build_text(TINY).state_dict()


def write_checkpoint(folder, name: str, good_state):
    import torch
    from safetensors.torch import save_file

    path = folder / name
    if name == "empty.pth":
        path.write_bytes(b"")
    elif name == "garbage.pt":
        path.write_bytes(b"PK\x03\x04" + b"\xff" * 100)
    elif name.endswith(".safetensors"):
        save_file({k: v.contiguous() for k, v in good_state.items()}, str(path))
        data = path.read_bytes()
        path.write_bytes({"truncated.safetensors": data[: len(data) // 2], "header.safetensors":
                          (10**12).to_bytes(8, "little") + b"{}", "empty.safetensors": b"",
                          "text.safetensors": b"hello world, not a checkpoint"}[name])
    else:
        torch.save({"bare.pt": torch.zeros(3), "list.pt": [torch.zeros(3)], "intkeys.pt": {1: torch.zeros(3)},
                    "values.pt": {"mlp.fc1.weight": 3}, "nan.pt": {k: torch.full_like(v, float("nan"))
                                                                   for k, v in good_state.items()},
                    "inf.pt": {k: v.clone().fill_(float("inf")) for k, v in good_state.items()},
                    "int.pt": {k: v.to(torch.int64) for k, v in good_state.items()},
                    "bool.pt": {k: v.to(torch.bool) for k, v in good_state.items()},
                    "half.pt": {k: v.half() for k, v in good_state.items()}}[name], path)
    return path


@pytest.mark.parametrize("name, problem", [
    ("empty.pth", "is empty (0 bytes), not a checkpoint"),
    ("garbage.pt", "cannot read {path} safely"),
    ("bare.pt", "{path} holds a Tensor, not a state dict"),
    ("list.pt", "{path} holds a list, not a state dict"),
    ("intkeys.pt", "{path}: 1 key(s) are not names: 1 (int)"),
    ("values.pt", "{path}: not a state dict of tensors (mlp.fc1.weight is not a tensor)"),
    ("truncated.safetensors", "{path} is not a valid .safetensors file"),
    ("header.safetensors", "{path} is not a valid .safetensors file"),
    ("empty.safetensors", "{path} is empty (0 bytes)"),
    ("text.safetensors", "{path} is not a valid .safetensors file"),
    ("nan.pt", "{path}: 6 tensor(s) hold NaN or infinite values"),
    ("inf.pt", "{path}: 6 tensor(s) hold NaN or infinite values"),
    ("int.pt", "{path}: 6 tensor(s) of the wrong kind: mlp.norm.weight (torch.int64, model torch.float32)"),
    ("bool.pt", "{path}: 6 tensor(s) of the wrong kind"),
])
def test_every_malformed_checkpoint_is_an_error_naming_the_file_and_the_problem(tmp_path, good_state, name, problem):
    path = write_checkpoint(tmp_path, name, good_state)
    with pytest.raises(SpecError) as caught:
        archspec.build_text(TINY, weights=str(path))
    assert caught.value.message.startswith("weights: ") and problem.format(path=path) in caught.value.message
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    result = cli("build", str(spec), "--target", "eager", "--weights", str(path), "-o", str(tmp_path / "out"))
    assert result.returncode == 1 and "Traceback" not in result.stderr and str(path) in result.stderr
    assert not (tmp_path / "out").exists()


def test_half_precision_weights_are_converted_and_nan_loads_when_asked(tmp_path, good_state, monkeypatch):
    import torch

    model = archspec.build_text(TINY, weights=str(write_checkpoint(tmp_path, "half.pt", good_state)))
    assert model.state_dict()["mlp.fc1.weight"].dtype == torch.float32
    monkeypatch.setenv("ARCHSPEC_ALLOW_NAN", "1")
    model = archspec.build_text(TINY, weights=str(write_checkpoint(tmp_path, "nan.pt", good_state)))
    assert torch.isnan(model.state_dict()["mlp.fc1.weight"]).all()


def test_a_state_dict_in_memory_with_a_non_string_key_is_named_as_such(good_state):
    with pytest.raises(SpecError, match=r"error: weights: the state dict: 1 key\(s\) are not names"):
        archspec.build_text(TINY, weights={**good_state, 7: good_state["mlp.fc1.weight"]})


@pytest.mark.parametrize("kind", ["fifo", "dir", "missing"])
def test_checkpoint_paths_that_are_no_files(tmp_path, kind):
    path = tmp_path / "w.pt"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    with within(5):
        with pytest.raises(SpecError, match=r"error: weights: (no such file|.* is (a directory|not a regular file))"):
            archspec.build_text(TINY, weights=str(path))


# -- a model too big to build -------------------------------------------------------------------------------


def test_a_model_too_big_for_memory_is_refused_before_torch_allocates(tmp_path):
    huge = "name: huge\ninputs:\n  x: [B, 16, 16777216]\ngraph:\n  - mlp: {hidden: 16777216}\n"
    with within(20):
        with pytest.raises(SpecError, match=r"building this model needs about 4\.0 PB of memory"):
            archspec.build_text(huge)
    spec = tmp_path / "huge.yaml"
    spec.write_text(huge)
    result = cli("build", str(spec), "--target", "eager", "-o", str(tmp_path / "out"))
    assert result.returncode == 1 and "huge.yaml:5:5: error: mlp: building this model needs" in result.stderr


GROWING = [  # (node, the path the refusal names, its fixed tables on a 16,777,216-pixel image)
    ("attention: {kind: shifted, heads: 2, window: 2}", "attention", "512.0 TB"),  # 2^44 tokens x (16 + 16) bytes
    ("attention: {kind: window, heads: 2, window: 2}", "attention", "256.0 TB"),  # the order and its inverse
    ("norm: {}", "patchify", "1.0 PB"),  # 2^44 positions x 16 x 4 bytes of sin-cos (patchify pos: sincos)
]


@pytest.mark.parametrize("node, path, tables", GROWING, ids=["shifted", "window", "sincos"])
def test_fixed_tables_that_grow_with_the_input_count_towards_the_memory_a_build_needs(node, path, tables):
    """Found by the fuzz (case 217:2897): a Swin block on a 16,777,216-pixel image has few
    parameters, but its window order and shift mask hold 2^44 tokens each: torch failed to
    allocate them inside the build (exit 3). The estimate counts such tables now."""
    pos = ", pos: sincos" if path == "patchify" else ""
    text = (f"name: wide\ninputs:\n  image: [B, 3, 16777216, 16777216]\ngraph:\n  - patchify: {{patch: 4, dim: 16{pos}}}\n"
            f"  - {node}\n")
    with within(20), pytest.raises(SpecError) as refused_:
        archspec.build_text(text)
    assert f"plus {tables} of fixed tables and masks), and " in str(refused_.value)
    assert refused_.value.diagnostics[0].path == path


@pytest.mark.parametrize("node", [n for n, _, _ in GROWING], ids=["shifted", "window", "sincos"])
def test_the_fixed_tables_estimate_equals_what_the_built_module_holds(node):
    pos = ", pos: sincos" if node == "norm: {}" else ""
    text = f"name: w\ninputs:\n  image: [B, 3, 64, 64]\ngraph:\n  - patchify: {{patch: 4, dim: 16{pos}}}\n  - {node}\n"
    report = archspec.check_text(text)
    model = archspec.build_text(text)
    held = sum(b.numel() * b.element_size() for _, b in model.named_buffers())
    assert sum(row.buffer_bytes for row in report.nodes) == held


def test_a_repetition_whose_every_node_is_left_out_builds_and_passes_its_input_on():
    """Found by the fuzz (case 7:53): a repeat whose first copy holds only an `if: false` node
    crashed the build while finding the stages (an empty repetition has no last node)."""
    import torch

    text = """archspec: 1
name: tiny_pvt
params:
  dims: [16, 32]
inputs:
  image: [B, 3, 32, 32]
graph:
  - id: stem
    patchify: {kernel: 7, stride: 4, padding: 3, dim: "${dims[0]}", norm: true}
  - id: stages
    repeat: 2
    as: s
    graph:
      - id: downsample
        if: ${s > 0}
        merge: {kind: conv, dim: "${dims[s]}"}
"""
    model = archspec.build_text(text).eval()
    out = model(torch.randn(2, 3, 32, 32))
    assert archspec.check_text(text).outputs["output"].shape[1:] == (16, 32)
    assert tuple(out.shape) == (2, 16, 32)  # stages.1's merge: 4x4 tokens of 32
    stages = model.forward_intermediates(torch.randn(2, 3, 32, 32), intermediates_only=True)
    assert len(stages) == 1  # stages.1 only: stages.0 holds no node
