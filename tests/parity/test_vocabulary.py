"""The architectures the open vocabulary made possible, each against its reference
implementation: DeiT-S distilled, ViT-M/16 GAP (timm); BERT, GPT-2, Llama, SegFormer-B0
(Hugging Face transformers); SimMIM on Swin-T (written here from the paper's equations on
timm's Swin encoder).

For each: build the reference, put seeded noise on *every* parameter (references zero or
constant-initialise many, which would hide a wrong mapping), save its state dict to a file,
and load that file with `archspec.build(spec, weights=FILE)` alone (the spec names its
mapping file). Then the parameter counts agree (reference = module = checker), and the
outputs agree within 1e-5, relative to the largest output magnitude where that exceeds 1, at
the default size and one other size or length.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import archspec

from tests.conftest import ROOT, scratch

TOL = 1e-5
FLOPS_REL = 0.01


def perturb_everything(model: nn.Module, seed: int = 0, scale: float = 0.05,
                       norm_scale: float | None = None) -> nn.Module:
    """Seeded noise on every parameter: no two tensors a mapping could confuse stay equal;
    `norm_scale`, when given, for the parameters named `norm` (their 1s would hide an offset)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = norm_scale if norm_scale is not None and "norm" in name else scale
            p.add_(noise * torch.randn(p.shape, generator=generator))
    return model


def perturb_batch_norms(model: nn.Module, seed: int = 1, scale: float = 0.05) -> nn.Module:
    """Seeded noise on every BatchNorm's running mean, and a positive factor on its running
    variance: eval normalises with these, and their initial 0 and 1 would hide a wrong mapping."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.add_(scale * torch.randn(buffer.shape, generator=generator))
            elif name.endswith("running_var"):
                buffer.mul_(torch.exp(4 * scale * torch.randn(buffer.shape, generator=generator)))
    return model


def sharpen_tables(model: nn.Module, suffix: str, seed: int = 2) -> nn.Module:
    """Noise of 1, the order of trained values, on the parameters named `...suffix`: tables that
    start at zero (LeViT's and EfficientFormer's attention_biases) stay barely visible in the
    outputs under perturb_everything's 0.05, which would hide a wrong lookup or a bias left out."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, table in model.named_parameters():
            if name.endswith(suffix):
                table.add_(torch.randn(table.shape, generator=generator))
    return model


def close(reference, ours) -> float:
    """max |reference - ours| / max(1, max |reference|)."""
    reference, ours = reference.float(), ours.float()
    assert reference.shape == ours.shape, (reference.shape, ours.shape)
    return float((reference - ours).abs().max()) / max(1.0, float(reference.abs().max()))


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def count_flops(fn) -> int:
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), counter:
        fn()
    return counter.get_total_flops()


def images(batch: int, size: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def ids(batch: int, length: int, vocab: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


class TimmPair:
    """A timm reference (pretrained=False, `perturb`ed, frozen: FlopCounterMode's module tracker
    fails on views that require grad without a grad_fn, as PiT's expanded class token) and the
    spec built from the reference's own state dict file, `archspec.build(spec, overrides,
    weights=FILE)` alone."""

    def __init__(self, spec: str, timm_name: str, folder, file: str, overrides: dict | None = None,
                 timm_kwargs: dict | None = None, perturb=perturb_everything):
        import timm

        self.spec, self.overrides = spec, overrides
        torch.manual_seed(0)
        self.ref = perturb(timm.create_model(timm_name, pretrained=False, **(timm_kwargs or {})).eval())
        self.ref.requires_grad_(False)
        self.weights = str(folder / file)
        torch.save(self.ref.state_dict(), self.weights)
        self.report = archspec.check(spec, overrides)
        self.ours = archspec.build(spec, overrides, weights=self.weights).eval()

    def outputs(self, size: int, batch: int = 2) -> tuple:
        """(reference's, ours) on `batch` images of `size`; ours built at that size where it is
        not the pair's own (the same weights)."""
        ours = self.ours if size == (self.overrides or {}).get("img") else self.edited(img=size)
        image = images(batch, size)
        with torch.no_grad():
            return self.ref(image), ours(image)

    def wrong_gaps(self, edits: tuple, size: int) -> tuple[float, float]:
        """(close(reference, ours), close(reference, the spec with `edits` made)) on one image of
        `size`: what a check that can fail compares."""
        model = self.edited(*edits)
        image = images(1, size)
        with torch.no_grad():
            return close(self.ref(image), self.ours(image)), close(self.ref(image), model(image))

    def edited(self, *edits: tuple, **overrides) -> nn.Module:
        """The spec with each (right, wrong) edit made, `right` found once (or (right, wrong,
        count): found count times), from these weights."""
        text = Path(self.spec).read_text()
        for right, wrong, *count in edits:
            assert text.count(right) == (count[0] if count else 1), right
            text = text.replace(right, wrong)
        return archspec.build_text(text, {**(self.overrides or {}), **overrides}, weights=self.weights).eval()


def check_full_size(spec: str, timm_name: str, params: int, size: int) -> None:
    """The spec at its defaults has timm's parameter count, `params`, and its FLOPs at `size`."""
    import timm

    ref = timm.create_model(timm_name, pretrained=False).eval()
    report = archspec.check(spec)
    assert report.params == param_count(ref) == params
    measured = count_flops(lambda: ref(images(1, size)))
    assert report.flops == pytest.approx(measured, rel=FLOPS_REL), (report.flops, measured)


class Case:
    """One spec and its reference."""

    spec: str
    sizes: tuple = (None,)  # the default and another size (or length)

    def __repr__(self) -> str:
        return self.spec

    @property
    def path(self) -> str:
        return str(ROOT / "specs" / f"{self.spec}.yaml")

    def overrides(self, size):
        return None

    def reference(self, size) -> nn.Module:
        raise NotImplementedError

    def inputs(self, size) -> tuple:
        raise NotImplementedError

    def compare(self, ref, ours, args) -> dict[str, float]:
        """{output: relative difference}."""
        raise NotImplementedError

    def reference_flops(self, ref, report) -> int | None:
        return None


class Deit(Case):
    spec, sizes = "deit_s_distilled", (224, 256)

    def overrides(self, size):
        return None if size == 224 else {"img": size}

    def reference(self, size):
        import timm

        return timm.create_model("deit_small_distilled_patch16_224", pretrained=False, img_size=size)

    def inputs(self, size):
        return (images(2, size),)

    def compare(self, ref, ours, args):
        with torch.no_grad():
            eval_diff = close(ref(*args), ours(*args))
            ref.train(), ours.train()
            ref.set_distilled_training(True)  # timm returns the pair only when asked to
            (a, b), (c, d) = ref(*args), ours(*args)
            ref.eval(), ours.eval()
        return {"average (eval)": eval_diff, "class head (train)": close(a, c), "distillation head (train)": close(b, d)}

    def reference_flops(self, ref, report):
        return count_flops(lambda: ref(images(1, 224)))


class VitGap(Case):
    spec, sizes = "vit_m16_gap", (256, 224)

    def overrides(self, size):
        return None if size == 256 else {"img": size}

    def reference(self, size):
        import timm

        return timm.create_model("vit_medium_patch16_gap_256", pretrained=False, img_size=size)

    def inputs(self, size):
        return (images(2, size),)

    def compare(self, ref, ours, args):
        with torch.no_grad():
            return {"logits": close(ref(*args), ours(*args))}

    def reference_flops(self, ref, report):
        return count_flops(lambda: ref(images(1, 256)))


class Bert(Case):
    spec, sizes = "bert_base", (16, 37)  # sequence lengths

    def reference(self, size):
        from transformers import BertConfig, BertModel

        return BertModel._from_config(BertConfig(), attn_implementation="eager")

    def inputs(self, length):
        input_ids = ids(2, length, 30522)
        token_type_ids = torch.zeros(2, length, dtype=torch.long)
        token_type_ids[:, length // 2:] = 1  # a second segment
        attention_mask = torch.ones(2, length, dtype=torch.long)
        attention_mask[1, length - 5:] = 0  # the second sequence ends in padding
        return input_ids, token_type_ids, attention_mask

    def compare(self, ref, ours, args):
        input_ids, token_type_ids, attention_mask = args
        with torch.no_grad():
            out = ref(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
            hidden, pooled = ours(*args)
        return {"last_hidden_state": close(out.last_hidden_state, hidden),
                "pooler_output": close(out.pooler_output, pooled)}

    def reference_flops(self, ref, report):
        length = report.graph.dims["L"].hi  # the checker costs the longest sequence
        return count_flops(lambda: ref(input_ids=ids(1, length, 30522)))


class Gpt2(Case):
    spec, sizes = "gpt2", (16, 7)

    def reference(self, size):
        from transformers import GPT2Config, GPT2LMHeadModel

        return GPT2LMHeadModel._from_config(GPT2Config(), attn_implementation="eager")

    def inputs(self, length):
        return (ids(2, length, 50257),)

    def compare(self, ref, ours, args):
        (input_ids,) = args
        with torch.no_grad():
            out = ref(input_ids=input_ids, labels=input_ids)
            logits = ours(input_ids)
            loss = ours.loss(input_ids, input_ids)  # the spec's objective: next-token cross-entropy
        return {"logits": close(out.logits, logits), "loss": close(out.loss, loss)}

    def reference_flops(self, ref, report):
        length = report.graph.dims["L"].hi
        return count_flops(lambda: ref(input_ids=ids(1, length, 50257)))


class Llama(Case):
    spec, sizes = "llama", (16, 100)

    def reference(self, size):
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
                             num_key_value_heads=2, vocab_size=32000, max_position_embeddings=2048,
                             rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
        return LlamaForCausalLM._from_config(config, attn_implementation="eager")

    def inputs(self, length):
        return (ids(2, length, 32000),)

    def compare(self, ref, ours, args):
        (input_ids,) = args
        with torch.no_grad():
            out = ref(input_ids=input_ids, labels=input_ids)
            logits = ours(input_ids)
            loss = ours.loss(input_ids, input_ids)
        return {"logits": close(out.logits, logits), "loss": close(out.loss, loss)}

    def reference_flops(self, ref, report):
        length = report.graph.dims["L"].hi
        return count_flops(lambda: ref(input_ids=ids(1, length, 32000)))


class Segformer(Case):
    spec, sizes = "segformer_b0", (224, 256)

    def overrides(self, size):
        return None if size == 224 else {"img": size}

    def reference(self, size):
        from transformers import SegformerConfig, SegformerModel

        return SegformerModel(SegformerConfig())

    def inputs(self, size):
        return (images(2, size),)

    def compare(self, ref, ours, args):
        with torch.no_grad():
            return {"last_hidden_state": close(ref(pixel_values=args[0]).last_hidden_state, ours(*args))}

    def reference_flops(self, ref, report):
        return count_flops(lambda: ref(pixel_values=images(1, 224)))


class SimMimReference(nn.Module):
    """SimMIM (Xie et al. 2022) from its equations, on timm's Swin-T encoder (window 6):

        z = LN(PatchEmbed(x));  z_i <- m_i * e_mask + (1 - m_i) * z_i     (m: the patch mask)
        y = LN(Swin(z));  x_rec = PixelShuffle_32(Conv1x1(y))
        loss = sum(|x - x_rec| * M) / (sum(M) + 1e-5) / C   (M: m repeated to pixels, C = 3)

    Its state dict is written in the official code's naming (microsoft/SimMIM: the encoder's
    patch merging closes a stage, where timm's opens the next)."""

    def __init__(self, size: int = 192):
        import timm

        super().__init__()
        self.encoder = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=size,
                                         window_size=6, num_classes=0)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, 96))
        self.decoder = nn.Sequential(nn.Conv2d(768, 32 * 32 * 3, kernel_size=1), nn.PixelShuffle(32))

    def forward(self, x, mask):
        z = self.encoder.patch_embed(x)  # [B, H, W, 96], normed (timm works channels-last)
        m = mask.unsqueeze(-1).type_as(z)  # [B, H, W, 1]
        z = z * (1 - m) + self.mask_token.view(1, 1, 1, -1) * m
        y = self.encoder.norm(self.encoder.layers(z))  # [B, 6, 6, 768]
        reconstruction = self.decoder(y.permute(0, 3, 1, 2))  # [B, 3, 192, 192]
        pixels = mask.repeat_interleave(4, 1).repeat_interleave(4, 2).unsqueeze(1).type_as(x)  # [B, 1, 192, 192]
        loss = (F.l1_loss(x, reconstruction, reduction="none") * pixels).sum() / (pixels.sum() + 1e-5) / 3
        return reconstruction, loss

    def official_state_dict(self) -> dict:
        """The official SimMIM checkpoint's names: encoder.layers.S.downsample for timm's S + 1."""
        out = {}
        for key, value in self.state_dict().items():
            if key == "mask_token":
                key = "encoder.mask_token"
            elif key.startswith("encoder.layers.") and ".downsample." in key:
                stage = int(key.split(".")[2])
                key = key.replace(f"encoder.layers.{stage}.", f"encoder.layers.{stage - 1}.", 1)
            elif key.startswith("decoder.0."):
                pass
            out[key] = value
        return out


def simmim_mask(batch: int, size: int, seed: int = 0) -> torch.Tensor:
    """SimMIM's mask generator: 60% of the 32x32 cells masked, repeated to the 4x4 patches."""
    cells = size // 32
    generator = torch.Generator().manual_seed(seed)
    masks = []
    for _ in range(batch):
        flat = torch.zeros(cells * cells, dtype=torch.long)
        flat[torch.randperm(cells * cells, generator=generator)[: math.ceil(cells * cells * 0.6)]] = 1
        masks.append(flat.view(cells, cells).repeat_interleave(8, 0).repeat_interleave(8, 1))
    return torch.stack(masks)  # [B, size/4, size/4]


class SimMim(Case):
    spec, sizes = "simmim_swin_t", (192, 384)

    def overrides(self, size):
        return None if size == 192 else {"img": size}

    def reference(self, size):
        return SimMimReference(size)

    def inputs(self, size):
        return images(2, size), simmim_mask(2, size)

    def compare(self, ref, ours, args):
        with torch.no_grad():
            reconstruction, loss = ref(*args)
            return {"reconstruction": close(reconstruction, ours(*args)), "loss": close(loss, ours.loss(*args))}

    def reference_flops(self, ref, report):
        return count_flops(lambda: ref(images(1, 192), simmim_mask(1, 192)))


CASES = [Deit(), VitGap(), Bert(), Gpt2(), Llama(), Segformer(), SimMim()]


class Pair:
    """Reference and ours at one size; ours loaded from the reference's own checkpoint file."""

    def __init__(self, case: Case, size, folder):
        torch.manual_seed(0)
        self.case, self.size = case, size
        self.ref = perturb_everything(case.reference(size).eval())
        state = self.ref.official_state_dict() if isinstance(self.ref, SimMimReference) else self.ref.state_dict()
        path = folder / f"{case.spec}-{size}.pt"
        torch.save(state, path)
        self.report = archspec.check(case.path, case.overrides(size))
        self.ours = archspec.build(case.path, case.overrides(size), weights=str(path)).eval()


@pytest.fixture(scope="class", params=[(c, s) for c in CASES for s in c.sizes], ids=lambda p: f"{p[0]}@{p[1]}")
def pair(request, tmp_path_factory) -> Pair:
    case, size = request.param
    return Pair(case, size, scratch(request, tmp_path_factory, "weights"))


class TestParity:
    def test_parameter_count(self, pair):
        count = param_count(pair.ref)
        if isinstance(pair.case, Gpt2):
            assert pair.ref.lm_head.weight is pair.ref.transformer.wte.weight  # tied, counted once
        assert param_count(pair.ours) == pair.report.params == count

    def test_outputs_match(self, pair):
        diffs = pair.case.compare(pair.ref, pair.ours, pair.case.inputs(pair.size))
        assert all(d < TOL for d in diffs.values()), diffs  # all(): a NaN fails, where max() would hide it

    def test_flops_match_flop_counter(self, pair):
        if pair.size != pair.case.sizes[0]:
            pytest.skip("FLOPs are compared at the default size")
        measured = pair.case.reference_flops(pair.ref, pair.report)
        assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


def test_simmim_has_the_papers_parameter_count():
    assert archspec.check(str(ROOT / "specs" / "simmim_swin_t.yaml")).params == 29_875_194
