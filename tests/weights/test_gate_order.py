"""A mapping that fuses a gated MLP's gate and up projections in the order the spec's mlp does not
hold them is a located error (the Pixtral trial: [up_proj, gate_proj] loaded without a word, the
MLP 2.6e-2 off; the halves have one shape). Checked with the shipped Hugging Face Llama mapping and
a copy of it with the parts swapped, loading a perturbed LlamaForCausalLM."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.conftest import ROOT
from tests.parity.test_llama3_rope import SPEC
from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=100, max_position_embeddings=64, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, eos_token_id=None, bos_token_id=None)
    torch.manual_seed(0)
    ref = LlamaForCausalLM(config).eval()
    perturb_everything(ref, seed=1, scale=0.1)
    folder = tmp_path_factory.mktemp("gate_order")
    torch.save(ref.state_dict(), folder / "ref.pt")
    shipped = (ROOT / "specs" / "mappings" / "hf_llama.yaml").read_text()
    assert shipped.count("parts: [gate_proj, up_proj]") == 1
    (folder / "swapped.yaml").write_text(shipped.replace("parts: [gate_proj, up_proj]", "parts: [up_proj, gate_proj]")
                                         .replace("name: hf llama", "name: hf llama swapped"))
    return ref, folder


def plain_spec(layout: str = "") -> str:
    text = SPEC.replace(", SCALING", "")
    return text.replace("gated: true,", f"gated: true, gate_layout: {layout},") if layout else text


def test_the_shipped_order_loads_hugging_faces_mlp(weights):
    ref, folder = weights
    model = archspec.build_text(plain_spec(), weights=str(folder / "ref.pt")).eval()
    ids = torch.randint(0, 100, (2, 12))
    with torch.no_grad():
        assert (model(ids) - ref(ids).logits).abs().max() < 1e-4


def test_swapped_parts_are_a_located_error_with_the_order(weights):
    _, folder = weights
    with pytest.raises(SpecError) as info:
        archspec.build_text(plain_spec(), weights=str(folder / "ref.pt"), mapping=str(folder / "swapped.yaml"))
    problem = info.value.diagnostics[0]
    assert "fuse: `parts` [up_proj, gate_proj] put the up projection first" in problem.message
    assert "write parts: [gate_proj, up_proj]" in str(problem.hint)
    assert problem.loc is not None and problem.loc.file.endswith("swapped.yaml")


def test_swapped_parts_load_into_an_mlp_that_holds_the_value_first(weights):
    ref, folder = weights
    model = archspec.build_text(plain_spec("value_first"), weights=str(folder / "ref.pt"),
                                mapping=str(folder / "swapped.yaml")).eval()
    ids = torch.randint(0, 100, (2, 12))
    with torch.no_grad():
        assert (model(ids) - ref(ids).logits).abs().max() < 1e-4


@pytest.mark.parametrize("part, role", [("gate_proj", "gate"), ("up_proj", "value"), ("w1", "gate"), ("w3", "value"),
                                        ("feed_forward.w1", "gate"), ("w2", None), ("down_proj", None), ("w13", None)])
def test_meta_names_say_their_half_too(part, role):
    """LFM2's trial: a mapping fusing [w3, w1] (Meta's names: w1 the gate, w3 up) loaded silently, 0.13 off."""
    from archspec.compiler.weights.load import gate_role

    assert gate_role(part) == role
