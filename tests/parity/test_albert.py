"""Shared weights (`share: true` on a repeat) and specs/albert_base.yaml against Hugging Face
transformers' AlbertModel.

ALBERT applies one layer twelve times. The spec says so natively: `repeat: 12, share: true`.
Each copy keeps its module (layers.0 ... layers.11: the module tree is the call tree), and the
tensors of copies 1..11 are copy 0's, so the checker and model.parameters() count them once,
HF's single `albert_layer_groups.0.albert_layers.0.*` (or a checkpoint naming only layers.0.*)
loads strictly and fills every copy, one optimizer step moves them all alike (the gradient is
the sum over the copies), and torch.export and the standalone model.py keep the sharing.

The reference is built at its full width (hidden 768, 12 heads, 3072) with seeded noise on
every parameter, its state dict saved and loaded by `archspec.build(spec, weights=FILE)` alone;
outputs agree within 1e-5 (relative to the largest magnitude past 1) at two short lengths.
"""

from __future__ import annotations


import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.conftest import ROOT, scratch, standalone_copy
from tests.parity.test_vocabulary import TOL, close, ids, param_count, perturb_everything

SPEC = str(ROOT / "specs" / "albert_base.yaml")
HF_PARAMS = 11_683_584  # AlbertModel(AlbertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072))
LENGTHS = (7, 12)

SHARED = """\
archspec: 1
name: shared_stack
inputs:
  x: [B, 6, 32]
blocks:
  layer:
    graph:
      - {id: attn, attention: {kind: global, heads: 2, norm: post}}
      - {id: mlp, mlp: {ratio: 2, norm: post}}
graph:
  - {id: layers, repeat: 3, share: SHARE, layer: {}}
"""


def albert_reference():
    from transformers import AlbertConfig, AlbertModel

    config = AlbertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072)
    return AlbertModel._from_config(config, attn_implementation="eager")


@pytest.fixture(scope="module")
def pair(request, tmp_path_factory):
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    ref = perturb_everything(albert_reference().eval())
    ref.requires_grad_(False)
    folder = scratch(request, tmp_path_factory, "albert")
    weights = str(folder / "albert.pt")
    torch.save(ref.state_dict(), weights)
    return ref, archspec.build(SPEC, weights=weights).eval(), folder


def albert_inputs(length: int):
    input_ids = ids(2, length, 30000)
    token_type_ids = torch.zeros(2, length, dtype=torch.long)
    token_type_ids[:, length // 2:] = 1
    attention_mask = torch.ones(2, length, dtype=torch.long)
    attention_mask[1, length - 3:] = 0  # the second sequence ends in padding
    return input_ids, token_type_ids, attention_mask


# -- ALBERT --------------------------------------------------------------------------------------


def test_the_checker_counts_hugging_faces_parameters():
    assert archspec.check(SPEC).params == HF_PARAMS


def test_the_model_holds_hugging_faces_parameters_once(pair):
    ref, ours, _ = pair
    assert param_count(ours) == param_count(ref) == HF_PARAMS
    trainable = sum(p.numel() for p in ours.parameters() if p.requires_grad)
    assert trainable == HF_PARAMS  # every AlbertModel parameter trains (the fixture froze the reference's)
    assert len(ours.layers) == 12
    for k in range(1, 12):
        assert ours.layers[k].attn.qkv.weight is ours.layers[0].attn.qkv.weight
        assert ours.layers[k].mlp.norm.bias is ours.layers[0].mlp.norm.bias


@pytest.mark.parametrize("length", LENGTHS)
def test_outputs_match_hugging_face(pair, length):
    ref, ours, _ = pair
    args = albert_inputs(length)
    input_ids, token_type_ids, attention_mask = args
    with torch.no_grad():
        out = ref(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
        hidden, pooled = ours(*args)
    assert close(out.last_hidden_state, hidden) <= TOL
    assert close(out.pooler_output, pooled) <= TOL


def test_a_checkpoint_naming_only_the_first_copy_loads_strictly(pair):
    from archspec.compiler.weights.load import load_weights

    ref, ours, folder = pair
    first = {k: v.clone() for k, v in ours.state_dict().items()
             if not k.startswith("layers.") or k.startswith("layers.0.")}
    torch.save(first, folder / "first.pt")
    with torch.no_grad():
        for p in ours.parameters():
            p.zero_()
    fit = load_weights(ours, str(folder / "first.pt"))
    assert fit.naming == "archspec" and not fit.missing and not fit.kept, fit.summary()
    args = albert_inputs(LENGTHS[0])
    with torch.no_grad():
        out = ref(input_ids=args[0], token_type_ids=args[1], attention_mask=args[2])
        assert close(out.last_hidden_state, ours(*args)[0]) <= TOL


# -- shared weights on a small stack -----------------------------------------------------------


def shared(share: str = "true"):
    return archspec.build_text(SHARED.replace("SHARE", share))


def test_share_counts_the_weights_once():
    assert archspec.check_text(SHARED.replace("SHARE", "true")).params * 3 == \
        archspec.check_text(SHARED.replace("SHARE", "false")).params
    model = shared()
    assert param_count(model) == archspec.check_text(SHARED.replace("SHARE", "true")).params
    assert len(model.state_dict()) == len(shared("false").state_dict())  # every copy keeps its names
    assert [name for name, _ in model.named_children()] == ["layers"] and len(model.layers) == 3


def test_one_step_moves_every_copy_alike_by_the_summed_gradient():
    model, plain = shared(), shared("false")
    plain.load_state_dict({k: v for k, v in model.state_dict().items()})  # every copy: copy 0's values
    x = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(0))
    model(x).square().sum().backward()
    plain(x).square().sum().backward()
    for name, p in model.layers[0].named_parameters():
        summed = sum(plain.layers[k].get_parameter(name).grad for k in range(3))
        assert torch.allclose(p.grad, summed, atol=1e-6), name
    before = model.layers[0].mlp.fc1.weight.detach().clone()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert not torch.equal(model.layers[0].mlp.fc1.weight, before)
    for k in (1, 2):
        assert torch.equal(model.layers[k].mlp.fc1.weight, model.layers[0].mlp.fc1.weight)


def test_share_without_repeat_is_a_located_error():
    text = SHARED.replace("{id: layers, repeat: 3, share: SHARE, layer: {}}", "{id: layers, share: true, layer: {}}")
    with pytest.raises(SpecError) as info:
        archspec.check_text(text)
    diagnostic = info.value.diagnostics[0]
    assert "`share` goes with `repeat`" in diagnostic.message
    assert diagnostic.loc is not None and diagnostic.loc.line == text.splitlines().index(
        "  - {id: layers, share: true, layer: {}}") + 1


def test_copies_of_other_sizes_cannot_share():
    text = SHARED.replace("{id: layers, repeat: 3, share: SHARE, layer: {}}",
                          "{id: mlps, repeat: 3, share: true, mlp: {ratio: \"${2 + i}\"}}")
    with pytest.raises(SpecError) as info:
        archspec.check_text(text)
    assert "copy of a shared repeat" in info.value.diagnostics[0].message
    assert info.value.diagnostics[0].path == "mlps.1"
    dropped = SHARED.replace("- {id: mlp, mlp", "- {id: mlp, if: \"${use}\", mlp").replace(
        "graph:\n      - {id: attn", "params: {use: ~}\n    graph:\n      - {id: attn").replace(
        "layer: {}}", "layer: {use: \"${i == 0}\"}}").replace("share: SHARE", "share: true")
    with pytest.raises(SpecError) as info:
        archspec.check_text(dropped)
    assert "copies of a shared repeat differ: copy 1 has no 'mlp'" in info.value.diagnostics[0].message


def test_exports_and_model_py_keep_the_sharing(tmp_path):
    from archspec.compiler.backends.export import export_program
    report = archspec.check_text(SHARED.replace("SHARE", "true"))
    model = shared().eval()
    x = torch.randn(3, 6, 32, generator=torch.Generator().manual_seed(1))
    program = export_program(model, report.graph)
    unique = {id(v): v for v in program.state_dict.values()}  # one tensor under every copy's name
    assert sum(v.numel() for v in unique.values()) == report.params
    with torch.no_grad():
        assert torch.allclose(program.module()(x), model(x), atol=1e-6)
    again = standalone_copy(model, report.name, None, tmp_path)
    assert param_count(again) == param_count(model)
    assert again.layers[2].attn.qkv.weight is again.layers[0].attn.qkv.weight
    again.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(again(x), model(x))


def test_a_checkpoint_whose_copies_differ_is_refused(tmp_path):
    state = shared("false").state_dict()  # three layers trained apart
    torch.save(state, tmp_path / "apart.pt")
    with pytest.raises(SpecError) as info:
        archspec.build_text(SHARED.replace("SHARE", "true"), weights=str(tmp_path / "apart.pt"))
    assert "have different values under their names" in info.value.diagnostics[0].message
    assert "layers.0.attn.norm.weight" not in info.value.diagnostics[0].message  # equal at initialisation: fine
    torch.save({k: v for k, v in state.items() if not k.startswith(("layers.1.", "layers.2."))}, tmp_path / "one.pt")
    model = archspec.build_text(SHARED.replace("SHARE", "true"), weights=str(tmp_path / "one.pt"))
    assert torch.equal(model.layers[2].mlp.fc2.weight, state["layers.0.mlp.fc2.weight"])
