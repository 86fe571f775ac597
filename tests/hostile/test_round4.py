"""Issue 37 (hostile input, round four): generation, the tensor ops, checkpoints, training folders
and numbers. One test (or a few) per finding, each failing on the code before its fix:

 1  a FIFO with an image's name in a --data folder (and any user file) is refused, never waited on
 4  checkpoint values finite in float64 but not in the model's dtype are an error, not inf
 5  spec floats beyond float32 are located errors at check
 6  check's own crashes (einsum to a vector then linear; an add that broadcasts batch into height)
 9, 10, 15  generate's and model.generate's arguments: usage errors / plain Python errors
11, 12  checkpoint keys in computed renames: inserted literally; a huge index is a located error
13  float8 and sparse tensors in a .pt
16  class attention with grid score parts says why
"""

from __future__ import annotations

import os

import pytest
import torch

from archspec.cli.main import main

from tests.conftest import scratch
from tests.hostile.test_hostile import within

pytestmark = pytest.mark.usefixtures("outside_torchrun")

IMAGES = """\
name: tiny_images
params: {img: 16, dim: 16, classes: 2}
inputs:
  image: [B, 3, img, img]
graph:
  - {id: patch_embed, patchify: {patch: 4, dim: "${dim}", pos: none}}
  - {id: mlp, mlp: {ratio: 2}}
  - {id: head, head: {kind: classify, classes: "${classes}"}}
"""


def run_cli(capsys, *args: str, seconds: float = 120) -> tuple[int, str, str]:
    capsys.readouterr()
    with within(seconds):
        code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_located(code: int, err: str, *words: str, expected: int = 1) -> None:
    assert code == expected, err
    assert "Traceback" not in err and "bug in archspec" not in err, err
    for word in words:
        assert word in err, (word, err)


# -- 1: FIFOs are refused, never opened blocking --------------------------------------------------------------


@pytest.fixture(scope="module")
def image_spec(request, tmp_path_factory) -> str:
    path = scratch(request, tmp_path_factory, "spec") / "tiny_images.yaml"
    path.write_text(IMAGES)
    return str(path)


@pytest.mark.parametrize("split", ["train", "val"])
def test_a_fifo_named_like_an_image_in_a_data_folder_is_refused(image_spec, tmp_path, capsys, split):
    from tests.train.train_data_shapes import make_shapes

    make_shapes(str(tmp_path), classes=2, train=2, val=2, size=16, seed=1)
    folder = tmp_path / split / sorted(os.listdir(tmp_path / split))[0]
    os.mkfifo(folder / "x.png")
    code, _, err = run_cli(capsys, "train", image_spec, "--data", str(tmp_path), "--steps", "1", "--batch", "2",
                           seconds=60)
    assert_located(code, err, "x.png", "named pipe")


def test_open_regular_refuses_a_fifo_without_blocking(tmp_path):
    from archspec.core.files import SpecialFile, open_regular, read_regular_file

    fifo = tmp_path / "weights.pt"
    os.mkfifo(fifo)
    with within(10):
        with pytest.raises(SpecialFile):
            open_regular(str(fifo))
        with pytest.raises(SpecialFile):
            read_regular_file(str(fifo), 10)
    plain = tmp_path / "plain.bin"
    plain.write_bytes(b"abc")
    with open_regular(str(plain)) as f:
        assert f.read() == b"abc"


def test_an_image_swapped_for_a_fifo_after_listing_is_refused_at_loading(tmp_path):
    from archspec.core.errors import SpecError
    from archspec.train.data import load_image

    fifo = tmp_path / "x.png"
    os.mkfifo(fifo)
    with within(10), pytest.raises(SpecError, match="not a regular file"):
        load_image(str(fifo))


# -- 4, 13: checkpoint values as the model will hold them -----------------------------------------------------

LINEAR = """\
name: tiny_linear
inputs:
  x: [B, 8]
graph:
  - {id: fc, linear: {dim: 4}}
"""


@pytest.fixture(scope="module")
def linear_spec(request, tmp_path_factory) -> str:
    path = scratch(request, tmp_path_factory, "linear") / "tiny_linear.yaml"
    path.write_text(LINEAR)
    return str(path)


def linear_state(dtype=torch.float32) -> dict:
    return {"fc.weight": torch.randn(4, 8).to(dtype), "fc.bias": torch.zeros(4).to(dtype)}


def save(state: dict, path) -> str:
    path = str(path)
    if path.endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file(state, path)
    else:
        torch.save(state, path)
    return path


def build_with(capsys, spec: str, checkpoint: str, tmp_path) -> tuple[int, str]:
    code, _, err = run_cli(capsys, "build", spec, "--weights", checkpoint, "-o", str(tmp_path / "out"))
    return code, err


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_float64_values_beyond_float32_are_not_finite_weights(linear_spec, tmp_path, capsys, suffix):
    state = linear_state(torch.float64)
    state["fc.weight"][0, 0] = 1e300
    code, err = build_with(capsys, linear_spec, save(state, tmp_path / f"big{suffix}"), tmp_path)
    assert_located(code, err, "fc.weight", "NaN or infinite")


def test_a_float64_checkpoint_within_float32_still_loads(linear_spec, tmp_path, capsys):
    code, err = build_with(capsys, linear_spec, save(linear_state(torch.float64), tmp_path / "ok.pt"), tmp_path)
    assert code == 0, err


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_a_float8_checkpoint_loads_as_it_does_from_safetensors(linear_spec, tmp_path, capsys, suffix):
    code, err = build_with(capsys, linear_spec, save(linear_state(torch.float8_e4m3fn), tmp_path / f"f8{suffix}"),
                           tmp_path)
    assert code == 0, err


def test_a_float8_checkpoint_with_nan_is_refused(linear_spec, tmp_path, capsys):
    state = linear_state(torch.float32)
    state["fc.weight"][1, 1] = float("nan")
    state = {k: v.to(torch.float8_e4m3fn) for k, v in state.items()}
    code, err = build_with(capsys, linear_spec, save(state, tmp_path / "f8nan.pt"), tmp_path)
    assert_located(code, err, "fc.weight", "NaN or infinite")


def test_a_sparse_tensor_in_a_pt_is_a_located_error(linear_spec, tmp_path, capsys):
    state = linear_state()
    state["fc.weight"] = state["fc.weight"].to_sparse()
    code, err = build_with(capsys, linear_spec, save(state, tmp_path / "sparse.pt"), tmp_path)
    assert_located(code, err, "fc.weight", "sparse", "dense")


# -- 11, 12: checkpoint keys in computed renames ------------------------------------------------------------

RENAMES = r"""archspec: 1
name: test
rules:
  - rename:
      '^layer_([^.]+)\.': 'f${g1}.'
"""


def computed_rename(tmp_path, text: str = RENAMES):
    from archspec.compiler.weights.mapping_file import read_mapping_file
    from archspec.compiler.weights.load import SpecParams

    path = tmp_path / "map.yaml"
    path.write_text(text)
    return read_mapping_file(str(path), params=SpecParams({})).rules[0]


@pytest.mark.parametrize("part", ["\\9", "\\g<", "\\g<zz>", "\\g<0>", "\\1", "\\n", "a\\"])
def test_checkpoint_text_is_inserted_literally_in_a_computed_rename(tmp_path, part):
    rule = computed_rename(tmp_path)
    assert rule.rename(f"layer_{part}.weight") == f"f{part}.weight"


def test_the_mapping_files_own_backreferences_still_expand(tmp_path):
    rule = computed_rename(tmp_path, RENAMES.replace("'f${g1}.'", r"'f${g1}.\1.'"))
    assert rule.rename("layer_3.weight") == "f3.3.weight"


@pytest.mark.parametrize("digits", [25, 5000])
def test_a_huge_block_index_is_an_error_naming_the_checkpoint_and_its_key(tmp_path, capsys, digits):
    spec = os.path.join(os.path.dirname(__file__), "..", "..", "specs", "efficientformer_l1.yaml")
    timm = {"stem.conv1.weight": torch.zeros(1), "head_dist.weight": torch.zeros(1),  # what identifies timm's
            "stages.0.blocks.0.token_mixer.attention_biases": torch.zeros(1),
            f"stages.3.blocks.{'9' * digits}.mlp.fc1.weight": torch.zeros(1)}
    code, err = build_with(capsys, spec, save(timm, tmp_path / "odd.pt"), tmp_path)
    assert_located(code, err, "odd.pt", "checkpoint key 'stages.3.blocks.999", "digits")
    assert len(err) < 5000, err


# -- 3, 9, 10, 15: generate's arguments and memory -----------------------------------------------------------

LLAMA_SMALL = {"dim": 32, "hidden": 48, "layers": 1, "heads": 2, "kv_heads": 1, "vocab": 50, "context": 200_000}
LLAMA_SETS = [a for k, v in LLAMA_SMALL.items() for a in ("--set", f"{k}={v}")]
SPECS = os.path.join(os.path.dirname(__file__), "..", "..", "specs")


@pytest.fixture(scope="module")
def llama():
    import archspec

    return archspec.build(os.path.join(SPECS, "llama.yaml"), LLAMA_SMALL, seed=0).eval()


def test_a_tiny_temperature_samples_the_greedy_choice(llama):
    ids = torch.tensor([[1, 2, 3]])
    greedy = llama.generate(ids, max_new_tokens=5)
    for temperature in (1e-40, 1e-45, 5e-324):
        sampled = llama.generate(ids, max_new_tokens=5, do_sample=True, temperature=temperature,
                                 generator=torch.Generator().manual_seed(0))
        assert torch.equal(sampled, greedy)


@pytest.mark.parametrize("kwargs, kind, words", [
    ({"eos_token_id": 2**70}, ValueError, "eos_token_id must be from 0 to 49"),
    ({"eos_token_id": [1, -1]}, ValueError, "eos_token_id must be from 0 to 49"),
    ({"eos_token_id": 1.5}, TypeError, "eos_token_id must be an integer"),
    ({"pad_token_id": 50, "eos_token_id": 1}, ValueError, "pad_token_id must be from 0 to 49"),
    ({"attention_mask": torch.tensor([[1, -1, 1]])}, ValueError, "attention_mask must hold 1"),
    ({"attention_mask": torch.tensor([[1.0, float("nan"), 1.0]])}, ValueError, "attention_mask must hold 1"),
    ({"attention_mask": torch.tensor([[0, 0, 0]])}, ValueError, "every token of a sequence as padding"),
    ({"attention_mask": [[1, 1, 1]]}, TypeError, "attention_mask must be a tensor"),
    ({"max_new_tokens": 2**70}, ValueError, "new tokens"),
    ({"max_new_tokens": "5"}, TypeError, "max_new_tokens must be an integer"),
    ({"do_sample": True, "temperature": float("inf")}, ValueError, "temperature must be a positive finite"),
    ({"do_sample": True, "temperature": float("nan")}, ValueError, "temperature must be a positive finite"),
    ({"do_sample": True, "top_k": 2**80}, None, None),  # as many as the vocabulary: fine
    ({"do_sample": True, "top_p": 2.0}, ValueError, "top_p must be in (0, 1]"),
    ({"generator": 5}, TypeError, "generator must be a torch.Generator"),
])
def test_model_generate_refuses_bad_arguments_in_words(llama, kwargs, kind, words):
    ids, kwargs = torch.tensor([[1, 2, 3]]), {"max_new_tokens": 2, **kwargs}
    if kind is None:
        assert llama.generate(ids, **kwargs).shape == (1, 5)
        return
    with pytest.raises(kind) as info:
        llama.generate(ids, **kwargs)
    assert words in str(info.value)


def test_model_generate_refuses_a_batch_of_none(llama):
    with pytest.raises(ValueError, match="batch of 0"):
        llama.generate(torch.zeros(0, 3, dtype=torch.long), max_new_tokens=2)


def test_a_finished_sequence_pads_with_a_valid_pad_token(llama):
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    first = int(llama.generate(ids[:1], max_new_tokens=1)[0, -1])
    out = llama.generate(ids, max_new_tokens=4, eos_token_id=first, pad_token_id=49)
    assert out.shape[0] == 2


def test_generate_refuses_a_cache_beyond_memory_before_allocating(llama, monkeypatch):
    from archspec.core.errors import SpecError

    monkeypatch.setenv("ARCHSPEC_MAX_BUILD_BYTES", str(4 << 20))
    with within(20), pytest.raises(SpecError, match="run out of memory") as info:
        llama.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=150_000)
    assert "key/value cache" in str(info.value)


def generate_cli(capsys, *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, "generate", "llama", *LLAMA_SETS, "--ids", "1,2,3", *args)


@pytest.mark.parametrize("args, words", [
    (["--eos", "99999999999999999999999"], "--eos must be from 0 to 49"),
    (["--eos", "50"], "--eos must be from 0 to 49"),
    (["--eos", "-1"], "--eos must be from 0 to 49"),
    (["--do-sample", "--temperature", "inf"], "--temperature must be a positive finite number"),
])
def test_cli_generate_options_out_of_range_are_usage_errors(capsys, args, words):
    code, _, err = generate_cli(capsys, "--max-new-tokens", "2", *args)
    assert_located(code, err, words, expected=2)


def test_cli_generate_with_a_tiny_temperature_is_greedy(capsys):
    code, greedy, err = generate_cli(capsys, "--max-new-tokens", "4")
    assert code == 0, err
    code, sampled, err = generate_cli(capsys, "--max-new-tokens", "4", "--do-sample", "--temperature", "1e-45")
    assert code == 0, err
    assert sampled == greedy


def test_cli_generate_refuses_a_cache_beyond_memory(capsys, monkeypatch):
    import archspec.core.memory as memory
    import archspec.compiler.generate.arguments as arguments

    monkeypatch.setattr(arguments, "available_bytes", lambda: 4 << 20)
    code, _, err = generate_cli(capsys, "--max-new-tokens", "150000")
    assert_located(code, err, "run out of memory", "key/value cache")
    del memory


# -- 5: spec floats beyond float32 ---------------------------------------------------------------------------

FLOAT_SPECS = {
    "scale": ("x: [B, 16, 32]", "- {id: attn, attention: {kind: global, heads: 2, scale: 1.0e300}}"),
    "softcap": ("x: [B, 16, 32]", "- {id: attn, attention: {kind: global, heads: 2, scores: [{softcap: {cap: 1.0e300}}]}}"),
    "theta": ("x: [B, 3, 16, 16]", "- {id: p, patchify: {patch: 4, dim: 32, pos: none}}\n  "
                                   "- {id: attn, attention: {kind: global, heads: 2, scores: [{rotary_grid: {theta: 1.0e-300}}]}}"),
    "constant": ("x: [B, 4]", "- {id: c, constant: {shape: [1, 4], value: 1.0e300}}"),
    "clamp": ("x: [B, 4]", "- {id: c, clamp: {min: -1.0e308, max: 1.0e308}}"),
    "expression": ("x: [B, 16, 32]", "- {id: attn, attention: {kind: global, heads: 2, scale: '${10.0 ** 39}'}}"),
}


@pytest.mark.parametrize("case", sorted(FLOAT_SPECS))
def test_spec_floats_beyond_float32_are_located_errors_at_check(case):
    import archspec
    from archspec.core.errors import SpecError

    inputs, graph = FLOAT_SPECS[case]
    text = f"name: floats\ninputs:\n  {inputs}\ngraph:\n  {graph}\n"
    with pytest.raises(SpecError) as info:
        archspec.check_text(text, name="floats.yaml")
    first = info.value.diagnostics[0]
    assert "float32" in first.message and first.loc is not None and first.loc.line >= 5, info.value


# -- 6: check's own crashes ------------------------------------------------------------------------------------

CHECK_CRASHES = {
    "einsum_to_the_batch_then_linear": (
        "inputs:\n  x: [B, 4]\ngraph:\n  - {id: e, einsum: {eq: 'b k -> b'}}\n  - {id: fc, linear: {dim: 4}}\n",
        "has only its batch axis"),
    "an_image_plus_a_vector_then_to_tokens": (
        "inputs:\n  image: [B, 3, 16, 16]\n  v: [B, 8]\ngraph:\n  - {id: r, from: image, resize: {size: [1, 1]}}\n"
        "  - {id: a, from: [r, v], add: {}}\n  - {id: t, to_tokens: {}}\n",
        "its batch axis B would meet axis 2"),
}


@pytest.mark.parametrize("case", sorted(CHECK_CRASHES))
def test_check_gives_a_located_error_not_a_crash(case, tmp_path, capsys):
    text, words = CHECK_CRASHES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(f"name: crash\n{text}")
    code, _, err = run_cli(capsys, "check", str(path), seconds=30)
    assert_located(code, err, words)


# -- 16: class attention with grid score parts says why --------------------------------------------------------


@pytest.mark.parametrize("part", ["decomposed", "relative_table"])
def test_class_attention_with_a_grid_part_says_its_queries_are_the_class_tokens(part):
    import archspec
    from archspec.core.errors import SpecError

    text = ("name: cls\ninputs:\n  image: [B, 3, 32, 32]\ngraph:\n"
            "  - {id: p, patchify: {patch: 4, dim: 32, cls_token: true}}\n"
            f"  - {{id: attn, attention: {{kind: class, heads: 2, scores: [{part}]}}}}\n")
    with pytest.raises(SpecError) as info:
        archspec.check_text(text, name="cls.yaml")
    message = info.value.diagnostics[0].message
    assert "class tokens" in message and "got a 8x8 token grid" not in message, message


# -- 14: out of memory while making the module ---------------------------------------------------------------


def test_running_out_of_memory_while_making_the_module_is_a_located_error(tmp_path):
    """A 4 GiB constant under a 6 GiB address-space limit (the estimate let through by a large
    ARCHSPEC_MAX_BUILD_BYTES, as when another process takes the memory meanwhile): exit 1, located."""
    import subprocess
    import sys

    spec = tmp_path / "big.yaml"
    spec.write_text("name: big\ninputs:\n  x: [B, 4]\ngraph:\n"
                    "  - {id: c, constant: {shape: [1, 1024, 1024, 1024], value: 1.0}}\n")
    code = ("import resource, sys\nimport torch\nfrom archspec.cli.main import main\n"
            "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"
            f"sys.exit(main(['build', {str(spec)!r}, '-o', {str(tmp_path / 'out')!r}]))\n")
    env = {**os.environ, "ARCHSPEC_MAX_BUILD_BYTES": str(1 << 40)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "big.yaml:5:" in done.stderr and "ran out of memory" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "bug in archspec" not in done.stderr, done.stderr
