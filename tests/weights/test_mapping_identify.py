"""Each shipped language-model mapping's `identify` recognises its own checkpoints and no other
shipped naming claims them: a checkpoint two namings both claim would load through whichever is
tried first. The keys are those of tiny Hugging Face models (and torch.nn.Transformer) built on
the meta device: only the names count. `shipped_namings` and `timm_keys` serve the timm parity
files' own identify checks too.
"""

from __future__ import annotations

import pytest
import torch

from archspec.compiler.weights.load import SpecParams
from archspec.compiler.weights.mapping_file import read_mapping_file

from tests.conftest import ROOT

MAPPINGS = ROOT / "specs" / "mappings"


def models() -> dict:
    """checkpoint name -> a tiny model holding it; the name is the mapping file's stem, then (in
    brackets) which of its checkpoints where it has several."""
    import transformers as t

    small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
             "vocab_size": 100}
    return {
        "hf_opt": lambda: t.OPTForCausalLM(t.OPTConfig(hidden_size=64, ffn_dim=128, num_hidden_layers=1,
                                                       num_attention_heads=4, vocab_size=100, word_embed_proj_dim=64)),
        "hf_phi": lambda: t.PhiForCausalLM(t.PhiConfig(**small)),
        "hf_gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=100,
                                                              bos_token_id=0, eos_token_id=0)),
        "hf_llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**small)),
        "hf_llama (mistral)": lambda: t.MistralForCausalLM(t.MistralConfig(**small)),
        "hf_mixtral": lambda: t.MixtralForCausalLM(t.MixtralConfig(**small, num_local_experts=2)),
        "hf_gptj": lambda: t.GPTJForCausalLM(t.GPTJConfig(n_embd=64, n_layer=1, n_head=4, rotary_dim=8,
                                                          vocab_size=100, bos_token_id=0, eos_token_id=0)),
        "hf_gpt_neox": lambda: t.GPTNeoXForCausalLM(t.GPTNeoXConfig(**small)),
        "hf_bloom": lambda: t.BloomForCausalLM(t.BloomConfig(hidden_size=64, n_layer=1, n_head=4, vocab_size=100)),
        "hf_t5": lambda: t.T5ForConditionalGeneration(t.T5Config(d_model=64, d_ff=128, d_kv=16, num_layers=1,
                                                                  num_heads=4, vocab_size=100)),
        "hf_bert": lambda: t.BertModel(t.BertConfig(**small)),
        "hf_bart": lambda: t.BartForConditionalGeneration(t.BartConfig(
            vocab_size=100, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128)),
        "torch_transformer": lambda: torch.nn.Transformer(d_model=64, nhead=4, num_encoder_layers=1,
                                                          num_decoder_layers=1, dim_feedforward=128, batch_first=True),
    }


def checkpoint_keys() -> dict[str, list[str]]:
    """checkpoint name -> its state dict's keys; the base-model forms the hub also holds (OPTModel's,
    BartModel's: without `model.`, without the output layer) added."""
    with torch.device("meta"):
        keys = {name: list(make().state_dict()) for name, make in models().items()}
    for name, base in (("hf_opt (OPTModel)", "hf_opt"), ("hf_bart (BartModel)", "hf_bart")):
        keys[name] = [key.removeprefix("model.") for key in keys[base] if key.startswith("model.")]
    return keys


def spec_naming(mapping) -> str | None:
    """The first shipped spec whose `mappings:` names this file (a rule may read its params)."""
    return next((str(spec) for spec in sorted((ROOT / "specs").glob("*.yaml"))
                 if f"mappings/{mapping.name}" in spec.read_text()), None)


def shipped_namings() -> dict:
    """mapping file stem -> the naming read from it, for every shipped mapping file."""
    return {path.stem: read_mapping_file(path, params=SpecParams(None, spec_naming(path)))
            for path in sorted(MAPPINGS.glob("*.yaml"))}


def timm_keys(name: str) -> dict:
    """The state dict keys of timm's `name` (built on the meta device), as a checkpoint to identify."""
    import timm

    with torch.device("meta"):
        return dict.fromkeys(timm.create_model(name, pretrained=False).state_dict())


def test_each_checkpoint_is_claimed_by_its_own_naming_alone():
    """Among every shipped naming, timm's included."""
    pytest.importorskip("transformers")
    named = shipped_namings()
    claims = {checkpoint: [stem for stem, naming in named.items() if naming.applies_to(dict.fromkeys(keys))]
              for checkpoint, keys in checkpoint_keys().items()}
    wrong = {checkpoint: claimed for checkpoint, claimed in claims.items() if claimed != [checkpoint.split()[0]]}
    assert not wrong, wrong

