"""Mapping files that compute (compiler/weights/rules.py, mapping_file.py): affine (scale, add),
copy, create, `${...}` over the spec's params, and the warning for dropped learned tensors.

Each rule on a small ViT (specs/vit_b16.yaml made small with params) loaded from a hand-made
checkpoint, the loaded tensors checked exactly; one mapping file with `${...}` loads Llama
(specs/llama.yaml) at two sizes from Hugging Face checkpoints repacked in a per-group
interleaved qkv layout, outputs within 1e-5 of LlamaForCausalLM; bad rules are located errors.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

import archspec
from archspec.core.errors import SpecError
from archspec.compiler.weights.load import file_params, load_weights
from archspec.compiler.weights.mapping_file import read_mapping_file

from tests.conftest import ROOT

VIT = str(ROOT / "specs" / "vit_b16.yaml")
LLAMA = str(ROOT / "specs" / "llama.yaml")
SMALL = {"depth": 2, "dim": 64, "heads": 2, "img": 32}


def write(tmp_path: Path, rules: str, extra: str = "", name: str = "map.yaml") -> Path:
    path = tmp_path / name
    path.write_text("name: test\n" + extra + "rules:\n  - rename: {'^ref\\.': ''}\n" + textwrap.indent(textwrap.dedent(rules).strip("\n"), "  ")
                    + "\n")
    return path


def small_vit():
    return archspec.build(VIT, SMALL, seed=0).eval()


def noisy(model) -> dict:
    generator = torch.Generator().manual_seed(1)
    return {k: torch.randn(v.shape, generator=generator).to(v.dtype) if v.is_floating_point() else v.clone()
            for k, v in model.state_dict().items()}


def load(model, state: dict, path: Path, **kw):
    """Load `state`, its keys prefixed with 'ref.' (so that archspec's own naming does not fit it;
    write's mapping files take the prefix off first)."""
    return load_weights(model, {"ref." + k: v for k, v in state.items()}, mappings=[path], **kw)


# -- affine ----------------------------------------------------------------------------------------


def test_affine_scales_then_adds_exactly(tmp_path):
    model = small_vit()
    want = noisy(model)
    state = dict(want)
    state["norm.weight"] = want["norm.weight"] - 1.0  # stored as w where 1 + w scales (Gemma)
    state["blocks.0.attn.qkv.weight"] = want["blocks.0.attn.qkv.weight"] * 4.0
    path = write(tmp_path, r"""
        - affine: {match: '^norm\.weight$', add: 1.0}
        - affine: {match: '^blocks\.0\.attn\.qkv\.weight$', scale: 0.25}
    """)
    load(model, state, path)
    got = model.state_dict()
    assert torch.equal(got["norm.weight"], state["norm.weight"] + 1.0)
    assert torch.equal(got["blocks.0.attn.qkv.weight"], state["blocks.0.attn.qkv.weight"] * 0.25)
    assert torch.equal(got["blocks.0.attn.qkv.weight"], want["blocks.0.attn.qkv.weight"])  # powers of two: exact


def test_affine_order_is_scale_then_add(tmp_path):
    naming = read_mapping_file(write(tmp_path, "- affine: {match: '^w$', scale: 2, add: 3}"))
    out = naming.convert({"w": torch.tensor([1.0, -2.0]), "n": torch.tensor([5])}).state
    assert torch.equal(out["w"], torch.tensor([5.0, -1.0]))  # 1*2+3, -2*2+3
    assert torch.equal(out["n"], torch.tensor([5]))


# -- copy -------------------------------------------------------------------------------------------


def test_copy_puts_one_tensor_under_two_names(tmp_path):
    model = small_vit()
    want = noisy(model)
    state = {k: v for k, v in want.items() if not k.startswith("blocks.1.mlp.norm.")}
    state["shared_norm.weight"] = want.pop("blocks.0.mlp.norm.weight")
    state["shared_norm.bias"] = want.pop("blocks.0.mlp.norm.bias")
    del state["blocks.0.mlp.norm.weight"], state["blocks.0.mlp.norm.bias"]
    path = write(tmp_path, r"""
        - copy:
            match: '^shared_norm\.(weight|bias)$'
            into: ['blocks.0.mlp.norm.\1', 'blocks.1.mlp.norm.\1']
    """)
    fit = load(model, state, path)
    got = model.state_dict()
    for block in (0, 1):
        assert torch.equal(got[f"blocks.{block}.mlp.norm.weight"], state["shared_norm.weight"])
        assert torch.equal(got[f"blocks.{block}.mlp.norm.bias"], state["shared_norm.bias"])
    assert got["blocks.0.mlp.norm.weight"].data_ptr() != got["blocks.1.mlp.norm.weight"].data_ptr()
    assert fit.naming == "test"


# -- create -----------------------------------------------------------------------------------------


def test_create_makes_zeros_ones_eye_and_numbers_with_the_models_shapes(tmp_path):
    model = small_vit()
    state = noisy(model)
    for key in ("blocks.0.attn.proj.bias", "blocks.0.attn.norm.weight", "blocks.0.attn.proj.weight",
                "blocks.1.attn.proj.weight", "blocks.1.attn.norm.bias"):
        del state[key]
    path = write(tmp_path, r"""
        - create: {match: '\.proj\.bias$', fill: zeros}
        - create: {match: '\.norm\.weight$', fill: ones}
        - create: {match: '^blocks\.0\.attn\.proj\.weight$', fill: eye}
        - create: {match: '\.norm\.bias$', fill: 0.5}
        - create: {match: '\.proj\.weight$', fill: ones}
        - affine: {match: '^blocks\.1\.attn\.proj\.weight$', scale: 0.125}
    """)
    fit = load(model, state, path)
    got = model.state_dict()
    assert torch.equal(got["blocks.0.attn.proj.bias"], torch.zeros(64))
    assert torch.equal(got["blocks.0.attn.norm.weight"], torch.ones(64))
    assert torch.equal(got["blocks.0.attn.proj.weight"], torch.eye(64))
    assert torch.equal(got["blocks.1.attn.norm.bias"], torch.full((64,), 0.5))
    assert torch.equal(got["blocks.1.attn.proj.weight"], torch.full((64, 64), 0.125))  # created, then scaled
    assert torch.equal(got["blocks.1.attn.proj.bias"], state["blocks.1.attn.proj.bias"])  # it had one: kept
    assert sorted(fit.created) == sorted(["blocks.0.attn.proj.bias", "blocks.0.attn.norm.weight",
                                          "blocks.0.attn.proj.weight", "blocks.1.attn.norm.bias",
                                          "blocks.1.attn.proj.weight"])
    assert "created 5" in fit.summary()


def test_create_eye_of_a_vector_is_not_made_and_the_load_says_missing(tmp_path):
    model = small_vit()
    state = noisy(model)
    del state["norm.weight"]
    with pytest.raises(SpecError, match=r"missing \(norm\.weight\)"):
        load(model, state, write(tmp_path, r"- create: {match: '^norm\.weight$', fill: eye}"))


# -- ${...}: the spec's params -------------------------------------------------------------------


def test_expressions_read_the_specs_params(tmp_path):
    model = small_vit()
    want = noisy(model)
    state = dict(want)
    qkv = want["blocks.0.attn.qkv.weight"]  # [3 * dim, dim], rows [q; k; v], each [heads, hd]
    state["blocks.0.attn.qkv.weight"] = qkv.reshape(3, 2, 32, 64).transpose(0, 1).reshape(-1)  # per head [q k v], flat
    path = write(tmp_path, r"""
        - reshape: {match: '^blocks\.0\.attn\.qkv\.weight$', shape: ['${heads}', 3, '${dim // heads}', '${dim}']}
        - transpose4: []
    """.replace("        - transpose4: []\n", ""))
    path.write_text(path.read_text() + textwrap.dedent(r"""
      - split: {match: '^blocks\.0\.attn\.qkv\.weight$', into: [q, k, v], dim: 1}
      - reshape: {match: '^[qkv]$', shape: ['${dim}', '${dim}']}
      - fuse: {match: '^{part}$', parts: [q, k, v], into: 'blocks.0.attn.qkv.weight'}
    """).replace("\n- ", "\n  - "))
    fit = load(model, state, path, params=SMALL | {"depth": 2})
    assert fit.naming == "test"
    assert torch.equal(model.state_dict()["blocks.0.attn.qkv.weight"], qkv)


def test_a_rename_computes_with_its_groups_and_the_params(tmp_path):
    """g1, g2, ... are the pattern's groups (ints where they are digits), evaluated for each key
    the pattern matches, beside the spec's params and the replacement's own \\1."""
    naming = read_mapping_file(write(tmp_path, r"""
        - rename:
            '^layer(\d+)\.(w|b)$': 'blocks.${g1 - 1 if g1 <= depth else g1 + 100}.\2.${g2}'
    """), params=_params({"depth": 2}))
    rule = naming.rules[1]
    assert [rule.rename(k) for k in ("layer1.w", "layer2.b", "layer7.w", "other.w")] == [
        "blocks.0.w.w", "blocks.1.b.b", "blocks.107.w.w", "other.w"]


def test_a_computed_rename_is_refused_where_it_is_written(tmp_path):
    """A group the pattern lacks in a computed replacement (\\2 of one group) is refused when the
    file is read; an expression that fails on a key fails there, pointing into it."""
    with pytest.raises(SpecError, match="invalid group reference|unknown group|no such group") as info:
        read_mapping_file(write(tmp_path, r"- rename: {'^layer(\d+)$': 'b.${g1}.\2'}"), params=_params({}))
    assert info.value.diagnostics[0].loc.line == 4
    assert "'b.${g1}.\\2'" in str(info.value)  # the replacement quoted as written (its ${...} was dropped)
    # a g<n> the pattern lacks, read inside ${...}: refused when the file is read, not at the first key (GC ViT trial)
    with pytest.raises(SpecError, match="reads g3, and the pattern has 2 groups") as info:
        read_mapping_file(write(tmp_path, r"- rename: {'^l(\d+)\.c(\d+)$': 'b.${g3 - 1}'}"), params=_params({}))
    assert info.value.diagnostics[0].loc.line == 4
    naming = read_mapping_file(write(tmp_path, r"- rename: {'^layer(\d+)$': 'b.${10 // (g1 - 1)}'}"),
                               params=_params({}))
    assert naming.rules[1].rename("layer3") == "b.5"
    with pytest.raises(SpecError, match="division by zero") as info:
        naming.rules[1].rename("layer1")
    loc = info.value.diagnostics[0].loc
    assert loc.file.endswith("map.yaml") and loc.line == 4


@pytest.mark.parametrize("rule", [
    r"- rename: {'^l(\d+)$': 'b.${g1 // dim_heads}'}",
    r"- permute: {match: 'x(\d+)', dims: [1, 0], view: ['${g1 * dim_heads}', -1]}",
])
def test_a_name_neither_group_nor_param_is_refused_when_the_file_is_read(tmp_path, rule):
    """The CoAtNet trial's `dim_heads` (the param is dim_head) was found at the first key, under a
    hint that blamed the checkpoint."""
    with pytest.raises(SpecError, match="unknown name 'dim_heads'") as info:
        read_mapping_file(write(tmp_path, rule), params=_params({"dim_head": 8}))
    assert info.value.diagnostics[0].loc.line == 4 and "did you mean 'dim_head'" in str(info.value)


def test_expression_default_params_come_from_the_spec_file(tmp_path):
    naming_path = write(tmp_path, "- affine: {match: 'x', scale: '${1 / dim}'}")
    model = archspec.build(VIT, seed=0)  # default dim 768: no graph given, the spec file's values
    from archspec.compiler.weights.load import SpecParams, spec_params

    params = spec_params(model)
    assert isinstance(params, SpecParams) and params.lookup("dim") == 768
    naming = read_mapping_file(naming_path, params=params)
    assert naming.rules[1].scale == 1 / 768


# -- one mapping file, two sizes of Llama ------------------------------------------------------------

LLAMA_PACKED = r"""
name: packed llama
doc: Llama with one fused qkv per layer in Megatron's grouped layout, [kv_heads, group q heads + k + v, head_dim, dim]
identify: ['\.self_attn\.qkv_packed\.weight$']
rules:
  - reshape:
      match: '\.self_attn\.qkv_packed\.weight$'
      shape: ['${kv_heads}', '${heads // kv_heads + 2}', '${dim // heads}', '${dim}']
  - split:
      match: '^(.*\.self_attn)\.qkv_packed\.weight$'
      into: ['\1.q_proj.weight', '\1.k_proj.weight', '\1.v_proj.weight']
      sizes: ['${heads // kv_heads}', 1, 1]
      dim: 1
  - reshape: {match: '\.self_attn\.q_proj\.weight$', shape: ['${dim}', '${dim}']}
  - reshape: {match: '\.self_attn\.[kv]_proj\.weight$', shape: ['${kv_heads * (dim // heads)}', '${dim}']}
"""

LLAMA_SIZES = [None, {"dim": 128, "hidden": 344, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": 1000}]


def packed(state: dict, heads: int, kv_heads: int) -> dict:
    """HF Llama's q/k/v projections packed per kv group: [q heads of the group; k; v]."""
    out = {}
    for key, value in state.items():
        if ".self_attn.k_proj." in key or ".self_attn.v_proj." in key:
            continue
        if ".self_attn.q_proj." not in key:
            out[key] = value
            continue
        stem = key.rpartition(".q_proj.")[0]
        q, k, v = value, state[stem + ".k_proj.weight"], state[stem + ".v_proj.weight"]
        dim = q.shape[1]
        hd = dim // heads
        groups = [q.reshape(kv_heads, heads // kv_heads, hd, dim), k.reshape(kv_heads, 1, hd, dim),
                  v.reshape(kv_heads, 1, hd, dim)]
        out[stem + ".qkv_packed.weight"] = torch.cat(groups, dim=1).reshape(-1, dim)
    return out


@pytest.mark.parametrize("overrides", LLAMA_SIZES, ids=["default", "set"])
def test_one_mapping_file_loads_two_sizes_of_llama(tmp_path, overrides):
    from transformers import LlamaConfig, LlamaForCausalLM

    params = file_params(LLAMA, overrides)
    p = {name: params.get(name) for name in ("vocab", "dim", "hidden", "layers", "heads", "kv_heads", "eps")}
    config = LlamaConfig(hidden_size=p["dim"], intermediate_size=p["hidden"], num_hidden_layers=p["layers"],
                         num_attention_heads=p["heads"], num_key_value_heads=p["kv_heads"], vocab_size=p["vocab"],
                         max_position_embeddings=2048, rope_theta=10000.0, rms_norm_eps=p["eps"],
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    ref = LlamaForCausalLM._from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        for param in ref.parameters():
            param.add_(0.05 * torch.randn_like(param))
    checkpoint = tmp_path / "llama.pt"
    torch.save(packed(ref.state_dict(), p["heads"], p["kv_heads"]), checkpoint)
    (tmp_path / "packed.yaml").write_text(LLAMA_PACKED.lstrip())
    packed_rules = (tmp_path / "packed.yaml").read_text()
    hf_rules = (ROOT / "specs" / "mappings" / "hf_llama.yaml").read_text().split("rules:\n", 1)[1]
    (tmp_path / "packed.yaml").write_text(packed_rules + hf_rules)

    report = archspec.check(LLAMA, overrides)
    if isinstance(getattr(report.graph, "params", None), dict):  # the IR carries the checked params
        ours = archspec.build(LLAMA, overrides, weights=str(checkpoint), mapping=str(tmp_path / "packed.yaml"))
    else:
        ours = archspec.build(LLAMA, overrides, seed=0)
        fit = load_weights(ours, str(checkpoint), report.graph, [tmp_path / "packed.yaml"],
                           params={name: params.get(name) for name in params.names})
        assert fit.naming == "packed llama"
    ours.eval()
    ids = torch.randint(0, p["vocab"], (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(input_ids=ids).logits
        got = ours(ids)
    assert (got - want).abs().max().item() <= 1e-5 * max(1.0, want.abs().max().item())


# -- drop warns about learned tensors --------------------------------------------------------------


def test_dropping_learned_tensors_is_a_warning_that_names_them(tmp_path):
    model = small_vit()
    state = noisy(model)
    state["pooler.dense.weight"] = torch.randn(4, 4)
    state["pooler.dense.bias"] = torch.randn(4)
    state["embeddings.position_ids"] = torch.arange(4)  # integers: a buffer
    state["rotary.inv_freq"] = torch.randn(4)  # a known buffer name
    fit = load(model, state, write(tmp_path, r"- drop: ['pooler\.', 'position_ids$', 'inv_freq$']"))
    assert fit.dropped_learned == ["pooler.dense.weight", "pooler.dense.bias"]
    assert len(fit.warnings) == 1 and "pooler.dense.weight, pooler.dense.bias" in fit.warnings[0]
    assert "warning: the mapping dropped 2 learned tensor(s)" in fit.summary()


def test_dropping_a_tied_copy_warns_nothing(tmp_path):
    """BART and Whisper save the shared token table under several names: a dropped copy whose
    values are loaded under another name loses nothing; a dropped tensor of other values warns."""
    model = small_vit()
    state = noisy(model)
    state["decoder.embed_tokens.weight"] = state["head.fc.weight"]  # the same tensor, tied
    state["encoder.embed_tokens.weight"] = state["head.fc.weight"].clone()  # equal values, saved apart
    state["other.weight"] = state["head.fc.weight"] + 1.0  # other values: a loss
    fit = load(model, state, write(tmp_path, r"- drop: ['embed_tokens\.', '^other\.']"))
    assert fit.dropped_learned == ["other.weight"]


def test_dropping_only_buffers_warns_nothing(tmp_path):
    model = small_vit()
    state = noisy(model)
    state["blocks.0.attn.relative_position_index"] = torch.zeros(3, dtype=torch.long)
    state["blocks.0.attn.attn_mask"] = torch.zeros(3)
    fit = load(model, state, write(tmp_path, r"- drop: ['relative_position_index$', 'attn_mask$']"))
    assert fit.warnings == [] and "warning" not in fit.summary()


def test_build_prints_the_drop_warning(tmp_path, capsys):
    from archspec.cli.main import main

    model = small_vit()
    state = noisy(model)
    state["cls.predictions.bias"] = torch.randn(5)
    torch.save({"ref." + k: v for k, v in state.items()}, tmp_path / "w.pt")
    path = write(tmp_path, r"- drop: ['^cls\.']")
    args = [VIT, "--weights", str(tmp_path / "w.pt"), "--map", str(path), "-o", str(tmp_path / "out")]
    args += [a for key, value in SMALL.items() for a in ("--set", f"{key}={value}")]
    main(["build", *args])
    out = capsys.readouterr()
    assert ("dropped 1 learned tensor(s) of the checkpoint (floating point, not named like a buffer the model "
            "rebuilds; a buffer among them is no loss): cls.predictions.bias") in out.out + out.err


# -- bad rules: located errors --------------------------------------------------------------------


@pytest.mark.parametrize("rule, message, line_col", [
    ("- affine: {match: 'x'}", "give `scale`, `add` or both", (4, 5)),
    ("- affine: {match: 'x', scale: .nan}", "not a finite number", (4, 33)),
    ("- affine: {match: 'x', scale: one}", "scale", (4, 33)),
    ("- copy: {match: 'x', into: [a]}", "a copy needs two or more", (4, 30)),
    ("- copy: {match: 'x', into: [a, '\\2']}", "copy target", (4, 34)),
    ("- copy: {match: 'x', into: [a, a]}", "names a twice", (4, 30)),
    ("- create: {match: 'x', fill: eyes}", "fill", (4, 32)),
    ("- create: {match: '(a)\\1', fill: ones}", "cannot be matched in linear time", (4, 21)),
    ("- reshape: {match: 'x', shape: ['${head}', -1]}", "unknown name 'head'", (4, 38)),
    ("- reshape: {match: 'x', shape: ['${heads //}', -1]}", "invalid expression", (4, 46)),
    ("- reshape: {match: 'x', shape: ['${heads / 0}', -1]}", "", (4, 38)),
    ("- reshape: {match: 'x', shape: ['${dim / heads}', -1]}", "", (4, 35)),
    ("- copi: {match: 'x', into: [a, b]}", "unknown rule 'copi'", (4, 5)),
    # grouped-query attention gives k and v one shape: [q, v, k] loaded without a word (OLMo trial)
    ("- fuse: {match: 'a.{part}', parts: [q_proj, v_proj, k_proj], into: qkv}", "out of order", (4, 38)),
    ("- fuse: {match: 'a.{part}', parts: [value, key], into: kv}", "write parts: [key, value]", (4, 38)),
])
def test_bad_rules_are_located_errors(tmp_path, rule, message, line_col):
    path = write(tmp_path, rule)
    with pytest.raises(SpecError) as info:
        read_mapping_file(path, params=_params({"heads": 2, "dim": 64}))
    text = str(info.value)
    assert message in text
    loc = info.value.diagnostics[0].loc
    assert loc.file.endswith("map.yaml") and (loc.line, loc.col) == line_col, text
    assert info.value.diagnostics[0].hint, text


def test_an_expression_without_a_spec_is_a_located_error(tmp_path):
    path = write(tmp_path, "- reshape: {match: 'x', shape: ['${heads}', -1]}")
    with pytest.raises(SpecError, match="reads the spec's params") as info:
        read_mapping_file(path)
    assert (info.value.diagnostics[0].loc.line, info.value.diagnostics[0].loc.col) == (4, 35)


def _params(values: dict):
    from archspec.compiler.weights.load import SpecParams

    return SpecParams(values)
