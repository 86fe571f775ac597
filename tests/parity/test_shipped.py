"""Parity with the reference implementations: every shipped spec is the real network.

For each spec: build the reference (timm, Hugging Face transformers, torch.nn.Transformer),
build ours, copy the reference's weights into ours with `load_weights`, then require
(a) the same parameter count (reference = module = checker), (b) the same outputs (fp32,
atol 1e-5) on the same random input, for Swin and PVT also at a second input size, and
(c) the checker's FLOPs within 1% of FlopCounterMode on the reference at batch 1, run with
attention as explicit matmuls so that they are counted on CPU.

Before copying, every reference parameter that its init leaves constant (LayerNorms at 1/0,
zero biases, Swin v2's zeroed res-post norms, logit scales) gets noise, so that no two
tensors that a mapping could confuse hold the same values, and a wrongly mapped tensor
shows in the outputs.

Also: every example spec (specs/examples/) checks, builds and trains one SGD step.
"""

from __future__ import annotations

from collections.abc import Hashable

import contextlib
import math
from pathlib import Path

import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import example_inputs
from archspec.compiler.weights.load import load_weights

from tests.conftest import (ALL_SPECS, EXAMPLES, LARGER_SIBLINGS, PIPELINE_ELSEWHERE, ROOT, perturb_constants,
                       run_capturing, spec_id)

ATOL = 1e-5
FLOPS_REL = 0.01
BATCH = 2


# -- helpers ---------------------------------------------------------------------------------------


def param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def images(batch: int, size: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def count_flops(fn) -> int:
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        fn()
    return counter.get_total_flops()


def max_diff(a, b) -> float:
    return float((a - b).abs().max())


# -- the references ----------------------------------------------------------------------------------


class Case:
    """One spec and its reference: how to build it, feed it, and read its output."""

    spec: str
    size: int | None = None  # default image size
    other: int | None = None  # a second valid image size (Swin, PVT)

    def __init__(self, spec: str):
        self.spec = spec

    def __repr__(self) -> str:
        return self.spec

    @property
    def path(self) -> str:
        return str(ROOT / "specs" / f"{self.spec}.yaml")

    def overrides(self, size):
        return None if size in (None, self.size) else {"img": size}

    def reference(self, size) -> nn.Module:
        raise NotImplementedError

    def reference_params(self, ref) -> int:
        return param_count(ref)

    def inputs(self, batch: int, size) -> tuple:
        return (images(batch, size),)

    def compare(self, ref, gm, args) -> dict[str, float]:
        """Max abs differences of the outputs, by name."""
        with torch.no_grad():
            return {"logits": max_diff(self.reference_output(ref, args), gm(*args))}

    def reference_output(self, ref, args):
        return ref(*args)

    def reference_flops(self, ref, report) -> int:
        return count_flops(lambda: self.reference_output(ref, self.inputs(1, self.size)))


class Timm(Case):
    def __init__(self, spec: str, name: str, size: int, other: int | None = None, fixed_size: bool = True):
        super().__init__(spec)
        self.name, self.size, self.other, self.fixed_size = name, size, other, fixed_size

    def reference(self, size) -> nn.Module:
        import timm

        kwargs = {"img_size": size} if self.fixed_size else {}  # PVT v2 takes any size as it is
        model = timm.create_model(self.name, pretrained=False, **kwargs)
        for m in model.modules():  # explicit attention matmuls, which FlopCounterMode counts on CPU
            if hasattr(m, "fused_attn"):
                m.fused_attn = False
        return model


class HfPvt(Case):
    size, other = 224, 256

    def reference(self, size) -> nn.Module:
        from transformers import PvtConfig, PvtForImageClassification

        # HF PVT's positions only fit the configured size: build it at that size
        return PvtForImageClassification(PvtConfig(image_size=size))  # attention is explicit matmuls

    def reference_output(self, ref, args):
        return ref(pixel_values=args[0]).logits


class HfClip(Case):
    size = 224
    EOS = 49407

    def reference(self, size) -> nn.Module:
        from transformers import CLIPConfig, CLIPModel

        return CLIPModel._from_config(CLIPConfig(), attn_implementation="eager")

    def inputs(self, batch: int, size) -> tuple:
        generator = torch.Generator().manual_seed(1)
        ids = torch.randint(0, self.EOS - 1, (batch, 77), generator=generator)
        ids[0, 10:] = self.EOS  # end-of-text, then padding with end-of-text (as CLIP's tokenizer pads)
        if batch > 1:
            ids[1, 40] = self.EOS  # a lone end-of-text mid-sequence ...
            ids[1, 60] = self.EOS  # ... and a later one: HF pools at the first
        return images(batch, size), ids

    def reference_output(self, ref, args):
        return ref(pixel_values=args[0], input_ids=args[1])

    def compare(self, ref, gm, args) -> dict[str, float]:
        with torch.no_grad():
            logits, inner = run_capturing(gm, args, ("visual.features", "textual.features"))
            out = self.reference_output(ref, args)
        return {"logits_per_image": max_diff(out.logits_per_image, logits),
                "image_embeds": max_diff(out.image_embeds, F.normalize(inner["visual.features"], dim=-1)),
                "text_embeds": max_diff(out.text_embeds, F.normalize(inner["textual.features"], dim=-1))}


class TorchTransformer(Case):
    """torch.nn.Transformer is the encoder-decoder core only. The embeddings it is fed are
    written here from the paper (Vaswani et al. 3.4, 3.5: table[ids] * sqrt(d) plus sinusoids,
    one table shared by source, target and output) using our model's table; ours must equal
    them, and the decoder output is compared before the LM head and after it."""

    VOCAB = 37000

    def reference(self, size) -> nn.Module:
        return nn.Transformer(d_model=512, nhead=8, batch_first=True)

    def reference_params(self, ref) -> int:
        return param_count(ref) + self.VOCAB * 512  # + the shared embedding table ours adds

    def inputs(self, batch: int, size) -> tuple:
        generator = torch.Generator().manual_seed(2)
        src = torch.randint(0, self.VOCAB, (batch, 11), generator=generator)
        tgt = torch.randint(0, self.VOCAB, (batch, 7), generator=generator)  # S != T on purpose
        return src, tgt

    @staticmethod
    def core(ref, src_tokens, tgt_tokens):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt_tokens.shape[1])
        return ref(src_tokens, tgt_tokens, tgt_mask=mask, tgt_is_causal=True)

    @staticmethod
    def paper_embedding(table, ids):
        """table[ids] * sqrt(d) + PE, PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
        d = table.shape[1]
        pos = torch.arange(ids.shape[1], dtype=torch.float64)[:, None]
        angle = pos / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # [L, d/2]
        pe = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).float()  # sin, cos interleaved: [L, d]
        return table[ids] * math.sqrt(d) + pe

    def compare(self, ref, gm, args) -> dict[str, float]:
        src, tgt = args
        table = gm.src_embed.tokens.weight
        with no_mha_fast_path(), torch.no_grad():
            logits, inner = run_capturing(gm, args, ("src_embed", "tgt_embed", "decoder.norm"))
            src_embed, tgt_embed = self.paper_embedding(table, src), self.paper_embedding(table, tgt)
            out = self.core(ref, src_embed, tgt_embed)
            ref_logits = F.linear(out, table)
        return {"src_embed": max_diff(src_embed, inner["src_embed"]), "tgt_embed": max_diff(tgt_embed, inner["tgt_embed"]),
                "decoder": max_diff(out, inner["decoder.norm"]), "logits": max_diff(ref_logits, logits)}

    def reference_flops(self, ref, report) -> int:
        """At the checker's lengths (the largest S and T), plus the LM head through the table."""
        S, T = report.graph.dims["S"].hi, report.graph.dims["T"].hi
        table = torch.randn(self.VOCAB, 512)

        def run():
            out = self.core(ref, torch.randn(1, S, 512), torch.randn(1, T, 512))
            F.linear(out, table)

        with no_mha_fast_path(), sdpa_kernel(SDPBackend.MATH):  # attention as counted matmuls
            return count_flops(run)


@contextlib.contextmanager
def no_mha_fast_path():
    """nn.TransformerEncoderLayer's fused eval kernel changes numerics and hides its FLOPs."""
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


CASES = [
    Timm("vit_ti16", "vit_tiny_patch16_224", 224),
    Timm("vit_s16", "vit_small_patch16_224", 224),
    Timm("vit_b16", "vit_base_patch16_224", 224),
    Timm("swin_t", "swin_tiny_patch4_window7_224", 224, other=448),
    Timm("swin_s", "swin_small_patch4_window7_224", 224, other=448),
    Timm("swin_b", "swin_base_patch4_window7_224", 224, other=448),
    Timm("swinv2_t", "swinv2_tiny_window8_256", 256, other=128),  # 128: the last stage's window shrinks to 4
    Timm("pvt_v2_b0", "pvt_v2_b0", 224, other=256, fixed_size=False),
    Timm("pvt_v2_b2", "pvt_v2_b2", 224, other=256, fixed_size=False),
    Timm("pvt_v2_b2_li", "pvt_v2_b2_li", 224, other=256, fixed_size=False),
    HfPvt("pvt_v1_tiny"),
    HfClip("clip_vit_b32"),
    TorchTransformer("transformer_base"),
]
OTHER_SIZES = [case for case in CASES if case.other]


class Pair:
    """A reference and our model at one input size, with the reference's weights loaded."""

    def __init__(self, case: Case, size):
        torch.manual_seed(0)
        self.case, self.size = case, size
        self.ref = perturb_constants(case.reference(size).eval())
        self.report = archspec.check(case.path, case.overrides(size))
        self.gm = archspec.build(case.path, case.overrides(size)).eval()
        self.fit = load_weights(self.gm, self.ref.state_dict())


@pytest.fixture(scope="class", params=CASES, ids=repr)
def pair(request) -> Pair:
    return Pair(request.param, request.param.size)


class TestParity:
    def test_parameter_count(self, pair):
        expected = pair.case.reference_params(pair.ref)
        assert param_count(pair.gm) == expected
        assert pair.report.params == expected

    def test_weights_map_completely(self, pair):
        assert pair.fit.naming != "archspec"
        ours = pair.gm.state_dict()
        assert pair.fit.state and all(torch.equal(ours[k], v) for k, v in pair.fit.state.items())  # all copied in
        if isinstance(pair.case, TorchTransformer):  # no embeddings in nn.Transformer: kept, and said so
            assert set(pair.fit.kept) == {"src_embed.tokens.weight", "tgt_embed.tokens.weight", "head.table.weight"}
        else:
            assert not pair.fit.kept

    def test_outputs_match(self, pair):
        args = pair.case.inputs(BATCH, pair.size)
        diffs = pair.case.compare(pair.ref, pair.gm, args)
        assert all(d < ATOL for d in diffs.values()), diffs  # (max() would let a NaN through)

    def test_flops_match_flop_counter(self, pair):
        measured = pair.case.reference_flops(pair.ref, pair.report)
        assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


@pytest.mark.parametrize("case", OTHER_SIZES, ids=lambda c: f"{c.spec}@{c.other}")
def test_outputs_match_at_other_size(case):
    other = Pair(case, case.other)
    assert param_count(other.gm) == other.report.params == case.reference_params(other.ref)
    diffs = case.compare(other.ref, other.gm, case.inputs(1, case.other))
    assert all(d < ATOL for d in diffs.values()), diffs


def test_transformer_outputs_depend_on_every_mapped_weight():
    """With every reference tensor distinct (random), a tensor mapped to the wrong place
    changes the outputs unless they do not depend on it: they depend on every one."""
    case = next(c for c in CASES if isinstance(c, TorchTransformer))
    pair = Pair(case, None)
    mapped = [k for k in pair.fit.state if k not in pair.fit.kept]
    assert len(mapped) > 100  # every tensor of 6 + 6 layers
    gm = pair.gm
    params = dict(gm.named_parameters(remove_duplicate=False))
    gm.zero_grad(set_to_none=True)
    _, inner = run_capturing(gm, case.inputs(BATCH, None), ("decoder.norm",), grad=True)
    weights = torch.randn(inner["decoder.norm"].shape, generator=torch.Generator().manual_seed(3))
    (inner["decoder.norm"] * weights).sum().backward()
    blind = [k for k in mapped if params[k].grad is None or float(params[k].grad.abs().max()) == 0.0]
    assert not blind


@pytest.mark.parametrize("name", sorted(PIPELINE_ELSEWHERE))
def test_pipeline_elsewhere_specs_use_only_ops_run_elsewhere(name):
    """What lets a spec's pipeline tests run in the slow tier only (conftest.PIPELINE_ELSEWHERE):
    every op and kind it has is one that a spec whose pipeline tests run in every run has, or
    one of the tensor ops that tests/primitives/test_every_op.py's EVERY_OP and tests/primitives/test_pad.py export,
    run in ONNX Runtime and check TensorRT's coverage of (test_op_coverage.py's REST: the xca and
    channel kinds of xcit_nano_12_p16 and davit_tiny)."""
    from tests.primitives.test_every_op import EVERY_OP
    from tests.primitives.test_pad import EVERYTHING
    from tests.primitives.test_outlook_attention import OUTLOOK_SPEC
    from tests.primitives.test_latent_attention import spec as latent_spec
    from tests.language.test_video_axes import VIDEO
    from tests.primitives.test_pooled_attention import POOLED_SPEC
    from tests.primitives.test_op_coverage import REST

    def labels(graph):
        return {n.op.label for n in graph.nodes() if not n.is_input}

    every_run = [p for p in ALL_SPECS if spec_id(p) not in LARGER_SIBLINGS and spec_id(p) not in PIPELINE_ELSEWHERE]
    elsewhere = set().union(*(labels(archspec.check(str(p)).graph) for p in every_run),
                            labels(archspec.check_text(EVERY_OP).graph), labels(archspec.check_text(EVERYTHING).graph),
                            labels(archspec.check_text(OUTLOOK_SPEC).graph),
                            labels(archspec.check_text(latent_spec(", q_rank: 24")).graph),
                            labels(archspec.check_text(VIDEO).graph), labels(archspec.check_text(POOLED_SPEC).graph),
                            labels(archspec.check_text(REST).graph))
    assert labels(archspec.check(str(ROOT / "specs" / f"{name}.yaml")).graph) <= elsewhere


@pytest.mark.parametrize("larger, smaller", LARGER_SIBLINGS.items(), ids=list(LARGER_SIBLINGS))
def test_larger_siblings_use_only_what_their_sibling_uses(larger, smaller):
    """What lets the pipeline tests (export, ONNX, TensorRT coverage) run a larger sibling in the
    slow tier only: every node it has is a node its smaller sibling has, up to sizes (the
    numbers: widths, heads, depths, rates)."""
    def kinds(name):
        graph = archspec.check(str(ROOT / "specs" / f"{name}.yaml")).graph
        return {(n.op.label, tuple((k, v if isinstance(v, Hashable) else repr(v)) for k, v in n.params
                                   if isinstance(v, bool) or not isinstance(v, (int, float))))
                for n in graph.nodes() if not n.is_input}

    assert kinds(larger) <= kinds(smaller)


# -- the examples -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=spec_id)
def test_example_trains_one_step(path: Path):
    report = archspec.check(str(path))
    gm = archspec.build(str(path), seed=0).train()
    assert param_count(gm) == report.params
    before = {name: p.detach().clone() for name, p in gm.named_parameters()}
    optimizer = torch.optim.SGD(gm.parameters(), lr=0.1)
    out = gm(*example_inputs(report.graph, batch=BATCH))
    outs = out if isinstance(out, tuple) else (out,)
    assert len(outs) == len(report.outputs)
    generator = torch.Generator().manual_seed(0)  # regress onto random targets (a LayerNorm's mean square is fixed)
    loss = sum(F.mse_loss(o.float(), torch.randn(o.shape, generator=generator)) for o in outs)
    assert torch.isfinite(loss)
    loss.backward()
    optimizer.step()
    unchanged = [name for name, p in gm.named_parameters() if torch.equal(p.detach(), before[name])]
    assert not unchanged
