"""generate(..., compile=True) (compiler/generate/compiled.py): the decode steps as one
AOTInductor program compiled frozen, over the caches the prefill filled, written in place at a
slot given as a tensor. It must give the tokens of the eager generate(), which test_generate.py
checks against Hugging Face's, for rotary positions with grouped-query attention (llama),
learned positions (gpt2), a left-padded batch and a sliding window's ring buffer; it must not
make the program again for the next call of the same shape, must make it again when the
weights change (it holds a frozen copy), and a copied model must not share it. Each compile
takes seconds: one model per case, small.

Also here: the cross attention of an encoder-decoder keeps the source's keys and values for
the whole decode (projected once per generate(), not once per token).
"""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.cli.main import main
from archspec.compiler.generate import generate
from archspec.compiler.modules.attention.cross import CrossAttention

from tests.conftest import ROOT
from tests.generate.test_generate import one_thread  # noqa: F401  (the autouse fixture: one intra-op thread)
from tests.generate.test_generate import GPT2_SMALL, LLAMA_SMALL, left_padded, noisy, prompt, sliding_llama, transformer_pair


def built(name: str, overrides: dict):
    torch.manual_seed(0)
    return noisy(archspec.build(str(ROOT / "specs" / f"{name}.yaml"), overrides).eval())


def programs_of(model) -> dict:
    """The compiled decode programs the model keeps, by (batch, cache capacity)."""
    from archspec.compiler.generate import decoder_of

    return decoder_of(model).compiled.programs


def test_compiled_llama_gives_eager_tokens_on_a_left_padded_batch_and_compiles_once():
    ours = built("llama", LLAMA_SMALL)
    ids, mask = left_padded()
    eager = generate(ours, ids, max_new_tokens=16, attention_mask=mask)
    assert torch.equal(generate(ours, ids, max_new_tokens=16, attention_mask=mask, compile=True), eager)
    made = dict(programs_of(ours))
    again = generate(ours, ids, max_new_tokens=16, attention_mask=mask, compile=True)  # same batch and length
    assert torch.equal(again, eager) and len(made) == 1 and programs_of(ours) == made  # the same program
    assert torch.equal(ours(ids), ours(ids))  # and forward is the ordinary one after
    assert all("kv_cache" not in vars(m) and "forward" not in vars(m) for m in ours.modules())  # nothing set on it


def test_new_weights_make_the_compiled_step_again():
    """The program holds a frozen copy of the weights: after they change, generate(compile=True)
    decodes with the new ones, as eager does."""
    ours = built("llama", LLAMA_SMALL)
    ids, mask = left_padded()
    generate(ours, ids, max_new_tokens=6, attention_mask=mask, compile=True)
    first = dict(programs_of(ours))
    with torch.no_grad():
        for p in ours.parameters():
            p.mul_(1.5)
    eager = generate(ours, ids, max_new_tokens=6, attention_mask=mask)
    assert torch.equal(generate(ours, ids, max_new_tokens=6, attention_mask=mask, compile=True), eager)
    assert programs_of(ours).keys() == first.keys() and all(programs_of(ours)[k] is not first[k] for k in first)


def test_a_copied_model_makes_its_own_compiled_step():
    import copy

    ours = built("llama", LLAMA_SMALL)
    ids, mask = left_padded()
    generate(ours, ids, max_new_tokens=4, attention_mask=mask, compile=True)
    twin = copy.deepcopy(ours)
    from archspec.compiler.generate import decoder_of

    assert decoder_of(twin).compiled is None  # nothing of the original's programs (its weights) carried over


def test_generate_compile_on_the_command_line_gives_eager_tokens_of_gpt2(capsys):
    sets = [a for k, v in GPT2_SMALL.items() for a in ("--set", f"{k}={v}")]
    code = main(["generate", "gpt2", *sets, "--ids", "5,6,7,8", "--max-new-tokens", "12", "--compile"])
    out = capsys.readouterr().out
    model = archspec.build(str(ROOT / "specs" / "gpt2.yaml"), GPT2_SMALL, seed=0).eval()  # learned positions
    expected = generate(model, torch.tensor([[5, 6, 7, 8]]), max_new_tokens=12, compile=False)[0, 4:].tolist()
    assert code == 0 and [int(t) for t in out.split()] == expected
    code = main(["generate", "transformer_base", "--set", "layers=1", "--set", "dim=32", "--set", "heads=2",
                 "--ids", "5,6", "--decoder-start", "1", "--compile"])
    assert code == 2 and "decoder-only" in capsys.readouterr().err


def test_compiled_sliding_window_decodes_over_its_ring():
    ours = sliding_llama(window=5)
    ids = prompt(1, 8, seed=7)  # longer than the window: the prefill fills the ring
    assert torch.equal(generate(ours, ids, max_new_tokens=14, compile=True),
                       generate(ours, ids, max_new_tokens=14, compile=False))


@pytest.mark.parametrize("heads, kv_heads, mask_heads", [(4, 4, 1), (8, 2, 1), (8, 2, 8)])
def test_one_query_attention_is_sdpa(heads, kv_heads, mask_heads):
    """The compiled step's attention (products and sums, grouped heads read in place) against
    SDPA over the repeated keys, with a padded and unwritten slots masked, or a per-head bias (ALiBi)."""
    import torch.nn.functional as F

    from archspec.compiler.generate.compiled import one_query_attention

    generator = torch.Generator().manual_seed(0)
    B, d, slots = 3, 16, 10
    q = torch.randn(B, heads, 1, d, generator=generator)
    k, v = (torch.randn(B, kv_heads, slots, d, generator=generator) for _ in range(2))
    mask = torch.randn(B, mask_heads, 1, slots, generator=generator)
    mask[:, :, :, 7:] = torch.finfo(torch.float32).min  # unwritten slots
    mask[0, :, :, :2] = torch.finfo(torch.float32).min  # the first sequence padded on the left
    group = heads // kv_heads
    expected = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                              attn_mask=mask, scale=0.3)
    assert torch.allclose(one_query_attention(q, k, v, mask, 0.3), expected, atol=1e-6, rtol=0)


def test_compile_with_an_encoder_decoder_is_refused_in_words():
    _, ours = transformer_pair()
    with pytest.raises(ValueError, match="decoder-only"):
        generate(ours, prompt(1, 5, seed=1), max_new_tokens=2, decoder_start_token_id=1, compile=True)


def test_cross_attention_projects_the_source_once_per_generate():
    _, ours = transformer_pair()
    cross = [m for m in ours.modules() if isinstance(m, CrossAttention)]
    calls = []
    hooks = [m.kv.register_forward_hook(lambda *_: calls.append(1)) for m in cross]
    try:
        out = generate(ours, prompt(2, 7, seed=5), max_new_tokens=10, decoder_start_token_id=1)
    finally:
        for hook in hooks:
            hook.remove()
    assert out.shape == (2, 11)
    assert len(calls) == len(cross) == 2  # once per layer, not once per layer and token
    assert all("memory_cache" not in m.__dict__ for m in cross)  # kept in the cache handed to them, not on them


# -- ALiBi: biases by distance, at the cached tokens' positions -----------------------------------------


def alibi_gpt2():
    text = (ROOT / "specs" / "gpt2.yaml").read_text().replace("attention: {kind: causal,", "attention: {kind: alibi,")
    assert "kind: alibi" in text
    torch.manual_seed(0)
    return noisy(archspec.build_text(text, GPT2_SMALL, name="alibi.yaml").eval())


def test_alibi_decodes_with_its_cache_as_forward_without_one():
    from tests.generate.test_generate import uncached_greedy

    ours = alibi_gpt2()
    ids, mask = left_padded()
    out = generate(ours, ids, max_new_tokens=12, attention_mask=mask)
    for row in range(3):  # each left-padded row decodes as it would alone, through forward
        start = int((mask[row] == 0).sum())
        assert torch.equal(out[row:row + 1, start:], uncached_greedy(ours, ids[row:row + 1, start:], 12))
    assert torch.equal(generate(ours, ids, max_new_tokens=12, attention_mask=mask, compile=True), out)
    from archspec.compiler.generate.step import DecodeStep

    from tests.generate.test_generate import decode_with_step

    step = DecodeStep(ours).eval()  # the decode program build exports: the cache as inputs and outputs
    assert torch.equal(decode_with_step(step, step, ids, mask, 12), out)
    cache = archspec.check_text((ROOT / "specs" / "gpt2.yaml").read_text().replace(
        "attention: {kind: causal,", "attention: {kind: alibi,"), name="alibi.yaml").to_json()["kv_cache"]
    assert cache["bytes_per_token"]["fp32"] == 12 * 2 * 768 * 4


# -- T5: a padded source with its mask, relative position biases at the cached slots ---------------------


def test_t5_greedy_equals_hugging_faces_on_a_padded_batch():
    from archspec.compiler.weights.load import load_weights

    from tests.parity.test_t5 import NOISE, RESIZED, padded_mask, reference
    from tests.parity.test_vocabulary import perturb_everything

    overrides, config, _ = RESIZED
    # as many decoder layers as encoder layers: transformers 5.24's generate sizes its cache by num_layers
    overrides, config = {**overrides, "decoder_layers": 2}, {**config, "num_decoder_layers": 2}
    torch.manual_seed(0)
    ref = perturb_everything(reference(config), scale=NOISE)
    with torch.no_grad():  # a smaller token table: else the residual carries the last token on and greedy repeats it
        ref.shared.weight.mul_(0.03)
    ours = archspec.build(str(ROOT / "specs" / "t5_small.yaml"), overrides).eval()
    load_weights(ours, ref.state_dict())
    source = torch.randint(1, 1000, (2, 11), generator=torch.Generator().manual_seed(4))
    mask = padded_mask(11)  # one source padded at the end, one at the start
    with torch.no_grad():
        expected = ref.generate(source, attention_mask=mask, max_new_tokens=24, do_sample=False,
                                decoder_start_token_id=0, eos_token_id=None, pad_token_id=0)
    out = generate(ours, source, attention_mask=mask, max_new_tokens=24, decoder_start_token_id=0)
    assert out.shape == (2, 25) and torch.equal(out, expected)
    assert all(len(set(row.tolist())) > 5 for row in out)  # not one token repeated: a wrong bias would show


def test_check_reports_t5s_decoder_cache_and_its_source_cache():
    cache = archspec.check(str(ROOT / "specs" / "t5_small.yaml")).to_json()["kv_cache"]
    assert [layer["path"] for layer in cache["layers"]] == [f"decoder.layers.{i}.self_attn" for i in range(6)]
    assert len(cache["cross_layers"]["layers"]) == 6 and cache["bytes_per_token"]["fp32"] == 6 * 2 * 8 * 64 * 4


# -- packed or not: the faster way on this machine, whatever compiled before in the process ------------


def linears_in(steps) -> dict[str, int]:
    """How many of the packages' linears run on packed weights (oneDNN's, or inductor's own C++
    GEMM kernels, which pack them for themselves), and how many are plain matrix products, read
    from the C++ that AOTInductor wrote into each package."""
    import glob
    import re
    import zipfile

    counts = {"packed": 0, "plain": 0}
    for path in glob.glob(f"{steps.folder.name}/*.pt2"):
        with zipfile.ZipFile(path) as package:
            files = {name: package.read(name).decode() for name in package.namelist() if name.endswith(".cpp")}
        kernels = "".join(code for name, code in files.items() if name.endswith(".kernel.cpp"))
        gemms = set(re.findall(r"inline void (cpp_\w+)_micro_gemm\(", kernels))  # inductor's GEMM kernels
        for name, code in files.items():
            if name.endswith(".wrapper.cpp"):
                counts["packed"] += code.count("aoti_torch_cpu__linear_pointwise(")
                counts["packed"] += code.count("aoti_torch_cpu__linear_pointwise_binary(")
                counts["packed"] += sum(code.count(f"{gemm}(") for gemm in gemms)
                counts["plain"] += code.count("aoti_torch_cpu_addmm_out(") + code.count("aoti_torch_cpu_mm_out(")
    return counts


def test_an_unpacked_step_does_not_leave_later_ones_unpacked(monkeypatch):
    """Where packed weights do not pay (fp32 on an Intel Xeon without AMX) the step compiles
    with inductor's packing off, in a process of its own: inductor registers its packing
    patterns once per process, so a compile with packing off here left a later bf16 step
    unpacked. Both ways give the eager tokens."""
    from archspec.compiler.generate import compiled, decoder_of

    ids = prompt(1, 5, seed=2)
    monkeypatch.setattr(compiled, "packing_pays", lambda weights: False)
    plain = built("llama", LLAMA_SMALL)
    assert torch.equal(generate(plain, ids, max_new_tokens=6, compile=True),
                       generate(plain, ids, max_new_tokens=6, compile=False))
    counts = linears_in(decoder_of(plain).compiled)
    assert counts["packed"] == 0 and counts["plain"] > 0, counts
    monkeypatch.setattr(compiled, "packing_pays", lambda weights: True)
    packed = built("llama", LLAMA_SMALL).to(torch.bfloat16)
    generate(packed, ids, max_new_tokens=6, compile=True)
    counts = linears_in(decoder_of(packed).compiled)
    assert counts["packed"] > 0, counts


def test_packing_is_no_question_where_onednn_cannot_run_the_weights():
    from archspec.compiler.inductor.matvec import packing_pays

    assert packing_pays([]) is None
    assert packing_pays([torch.randn(8, 4, dtype=torch.float64)]) is None  # oneDNN packs fp32 and bf16 only
    assert packing_pays([torch.randn(64, 32)]) is not None  # fp32 on the CPU: timed, either may win


def test_the_steps_argmax_is_torchs_on_ties_and_nan():
    """The compiled step takes greedy decoding's choice itself (compiled.first_best): torch.argmax's
    answer, the first of equal best and the first NaN, eagerly and as inductor compiles it."""
    from archspec.compiler.generate.compiled import first_best

    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(0))
    logits[1, [7, 200]] = 50.0  # a tie: the first wins
    logits[2, [3, 250]] = float("nan")  # NaN: the first NaN
    logits[3] = -float("inf")  # all equal
    logits[4, 299] = float("inf")
    expected = logits.argmax(dim=-1)
    assert expected.tolist()[1:4] == [7, 3, 0]
    assert torch.equal(first_best(logits), expected)
    assert torch.equal(torch.compile(first_best, dynamic=False)(logits), expected)
