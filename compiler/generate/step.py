"""The decode step as a program to export: `DecodeStep(model)` is an nn.Module whose forward
takes the cache as inputs and gives it back as outputs, as Hugging Face's ONNX exports name them:

    forward(input_ids [B, N], attention_mask [B, P + N], position_ids [B, N],
            past_key_values.0.key, past_key_values.0.value, ...  [B, h_kv, P, d] each,
            past_conv.0, ...  [B, count, C] each: a causal conv's last inputs, zeros before the prompt)
        -> (logits [B, N, vocab], present.0.key, present.0.value, ...  [B, h_kv, P + N, d],
            present_conv.0, ...  [B, count, C])

One module serves both programs of a decoder-only spec: the prefill (P = 0, N the prompt) and
the single-token decode step (N = 1, P the tokens so far); `export_decode_step` and
`export_prefill` trace them with torch.export (`export_decode_step_onnx` and
`export_prefill_onnx` with torch.onnx, through `export_onnx`, which seq2seq_step.py's ONNX
files share), the batch and the cache or prompt length dynamic.
Where generate() keeps a preallocated cache (cache.py), this one is explicit state: the caller
keeps the present keys and values and passes them back, so the exported program has no hidden
mutation. The step calls the model's decode graph (decode_graph.py) with a DecodeCache of
ExplicitCaches, as generate() calls it with its KVCaches; the module is that graph, at the
model's paths (`model.layers.0.attn...`), so the program names its weights as the model does.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..modules.attention.kernel import additive, later_or_outside
from .cache import DecodeCache, KVCache, RecentTokens
from .driver import Decoder

DECODE_OPSET = 18  # the decode programs' ONNX opset: model.onnx's plain one (backends/onnx.py's OPSET), any runtime


class StepState:
    """What the layers of one step share: positions given, a mask from the attention mask."""

    def __init__(self, attention_mask: torch.Tensor, position_ids: torch.Tensor, queries: int):
        self.attention_mask, self.position_ids, self.queries = attention_mask, position_ids, queries
        self._masks: dict = {}

    @property
    def end(self) -> int:
        """The slots after this step, P + N."""
        return self.attention_mask.shape[1]

    @property
    def start(self) -> int:
        """This step's first slot, P (a relative bias places its queries there)."""
        return self.end - self.queries

    def positions(self) -> torch.Tensor:
        return self.position_ids

    def current_seen(self) -> torch.Tensor:
        """Which of this step's tokens are real [B, N] (0: left padding)."""
        return self.attention_mask[:, self.start:]

    def key_positions(self) -> torch.Tensor:
        """The positions of every key, past and current [B, P + N] (0 on padding, which the mask hides)."""
        return (self.attention_mask.cumsum(-1) - 1).clamp(min=0)

    def mask(self, window: int | None, dtype) -> torch.Tensor:
        """[B, 1, N, P + N]: a later key, a padded key, or one `window` or more back is hidden."""
        key = (window, dtype)
        if key not in self._masks:
            total = self.attention_mask.shape[1]
            past = total - self.queries
            query = torch.arange(self.queries, device=self.attention_mask.device)[:, None] + past  # [N, 1]
            slot = torch.arange(total, device=self.attention_mask.device)[None, :]  # [1, P + N]
            hidden = later_or_outside(query, slot, window)  # [N, P + N]
            padded = (self.attention_mask == 0)[:, None, None, :]
            self._masks[key] = additive(padded | hidden, dtype)
        return self._masks[key]


class ExplicitCache(KVCache):
    """One layer's cache as tensors in and out: the past keys and values, then with this step's."""

    ring = False  # every token is kept (a sliding window is the mask's)

    def __init__(self, state: StepState, key: torch.Tensor, value: torch.Tensor, window: int | None = None):
        self.state, self.window = state, window
        self.keys, self.values = key, value  # [B, h_kv, P, d]

    def store(self, k, v):
        self.keys = torch.cat([self.keys, k], dim=2)  # [B, h_kv, P + N, d]
        self.values = torch.cat([self.values, v], dim=2)
        return self.keys, self.values, self.state.mask(self.window, k.dtype)


class DecodeStep(nn.Module):
    """A decoder-only model with its cache as inputs and outputs (see the module docstring);
    `model` is its decode graph."""

    def __init__(self, model):
        super().__init__()
        self.decoder = Decoder(model)
        if self.decoder.encoder_decoder:
            raise NotImplementedError("the exported decode step covers decoder-only specs")
        self.model = self.decoder.decoding

    def cache_shapes(self, batch: int, length: int) -> list[tuple[int, ...]]:
        """The shape of each past key and value, layer by layer: [B, h_kv, length, d] (a latent
        attention layer's: its latent [B, 1, length, kv_rank] and rotary key [B, 1, length, rope])."""
        shapes = []
        for module in self.decoder.attention:
            heads, key, value = module.cache_entry()
            shapes += [(batch, heads, length, key), (batch, heads, length, value)]
        return shapes + self.recent_shapes(batch)

    def recent_shapes(self, batch: int) -> list[tuple[int, ...]]:
        """The shape of each causal conv's recent inputs, [B, count, C], whatever the length."""
        d = self.decoder
        return [(batch, count, conv.conv.in_channels) for conv, count in zip(d.recent, d.recent_counts)]

    def names(self) -> tuple[list[str], list[str]]:
        """(input names, output names), Hugging Face's ONNX naming (LFM2's for a causal conv's state)."""
        layers, convs = range(len(self.decoder.attention)), range(len(self.decoder.recent))
        past = [f"past_key_values.{i}.{kind}" for i in layers for kind in ("key", "value")]
        present = [f"present.{i}.{kind}" for i in layers for kind in ("key", "value")]
        return (["input_ids", "attention_mask", "position_ids", *past, *(f"past_conv.{i}" for i in convs)],
                ["logits", *present, *(f"present_conv.{i}" for i in convs)])

    def forward(self, input_ids, attention_mask, position_ids, *past):
        state = StepState(attention_mask, position_ids, input_ids.shape[1])
        d = self.decoder
        held = past[2 * len(d.paths):]  # each causal conv's recent inputs, after the keys and values
        recent = {path: RecentTokens(state, count, inputs) for path, count, inputs in zip(d.recent_paths,
                                                                                        d.recent_counts, held)}
        cache = DecodeCache(state, {path: ExplicitCache(state, past[2 * i], past[2 * i + 1], window)
                                    for i, (path, window) in enumerate(zip(d.paths, d.windows))}, recent=recent)
        out = self.model(input_ids, cache)
        logits = out[self.decoder.output] if isinstance(out, (tuple, list)) else out
        return (logits, *cache.tensors())  # [B, N, vocab], each layer's [B, h_kv, P + N, d]


def example_step(step: DecodeStep, batch: int = 2, past: int = 5):
    """Example inputs of one decode step: a token per sequence after `past` cached tokens."""
    ids = torch.zeros(batch, 1, dtype=torch.long)
    mask = torch.ones(batch, past + 1, dtype=torch.long)
    positions = torch.full((batch, 1), past, dtype=torch.long)
    weight = next(step.model.parameters())
    caches = [torch.zeros(shape, dtype=weight.dtype) for shape in step.cache_shapes(batch, past)]
    return (ids, mask, positions, *caches)


def step_dynamic_shapes(step: DecodeStep, longest: int):
    """Dynamic dims of the decode step's inputs: the batch and the cache length."""
    batch = torch.export.Dim("batch", min=1, max=1024)
    past = torch.export.Dim("past", min=1, max=longest - 1)
    count = len(step.decoder.attention) * 2
    convs = tuple({0: batch} for _ in step.decoder.recent)  # [B, count, C]: the batch alone
    return ({0: batch}, {0: batch, 1: past + 1}, {0: batch}, tuple({0: batch, 2: past} for _ in range(count)) + convs)


def export_decode_step(model, max_length: int | None = None):
    """torch.export of the single-token decode step, batch and cache length dynamic."""
    step = DecodeStep(model).eval()
    shapes = step_dynamic_shapes(step, max_length or step.decoder.max_length or 4096)
    with torch.no_grad():
        return torch.export.export(step, example_step(step), dynamic_shapes=shapes)


def example_prefill(step: DecodeStep, batch: int = 2, tokens: int = 5):
    """Example inputs of the prefill: a prompt of `tokens` per sequence, the past empty."""
    ids = torch.zeros(batch, tokens, dtype=torch.long)
    mask = torch.ones(batch, tokens, dtype=torch.long)
    positions = torch.arange(tokens).expand(batch, tokens)  # [B, N]
    weight = next(step.model.parameters())
    caches = [torch.zeros(shape, dtype=weight.dtype) for shape in step.cache_shapes(batch, 0)]  # [B, h_kv, 0, d]
    return (ids, mask, positions, *caches)


def prefill_dynamic_shapes(step: DecodeStep, longest: int):
    """Dynamic dims of the prefill's inputs: the batch and the prompt's length (the past stays empty)."""
    batch = torch.export.Dim("batch", min=1, max=1024)
    tokens = torch.export.Dim("tokens", min=1, max=longest - 1)
    count = len(step.decoder.attention) * 2 + len(step.decoder.recent)
    return ({0: batch, 1: tokens}, {0: batch, 1: tokens}, {0: batch, 1: tokens}, tuple({0: batch} for _ in range(count)))


def export_prefill(model, max_length: int | None = None):
    """torch.export of the prefill: the prompt in, its logits and the cache it fills out (the
    decode step's first input), batch and prompt length dynamic."""
    step = DecodeStep(model).eval()
    shapes = prefill_dynamic_shapes(step, max_length or step.decoder.max_length or 4096)
    with torch.no_grad():
        return torch.export.export(step, example_prefill(step), dynamic_shapes=shapes)


def export_decode_step_onnx(model, path: str, max_length: int | None = None) -> tuple[list[str], list[str]]:
    """The decode step as an ONNX file at `path` (torch.onnx's dynamo exporter), its inputs and
    outputs named as Hugging Face's (DecodeStep.names), batch and cache length dynamic;
    returns those names."""
    step = DecodeStep(model).eval()
    shapes = step_dynamic_shapes(step, max_length or step.decoder.max_length or 4096)
    return export_onnx(step, example_step(step), shapes, path)


def export_prefill_onnx(model, path: str, max_length: int | None = None) -> tuple[list[str], list[str]]:
    """The prefill as an ONNX file at `path`: the decode step's inputs and outputs, the past
    empty ([B, h_kv, 0, d]), batch and prompt length dynamic; returns the names."""
    step = DecodeStep(model).eval()
    shapes = prefill_dynamic_shapes(step, max_length or step.decoder.max_length or 4096)
    return export_onnx(step, example_prefill(step), shapes, path)


def export_onnx(program: nn.Module, example, shapes, path: str) -> tuple[list[str], list[str]]:
    """`program` (a decode program with `names()`: DecodeStep, or seq2seq_step.py's EncoderStep
    and Seq2SeqStep) traced at `example` by torch.onnx's dynamo exporter, one self-contained
    file at `path`; returns its (input names, output names).

    SDPA is held to its math kernel while exporting, as model.onnx's opset 18 export is
    (backends/onnx.py): with the fused CPU kernel (its output [B, N, h, d] in memory), torch
    2.14's ONNX decomposition turns the heads' merge after attention (sequence.py's
    `x.transpose(1, 2).reshape(B, N, -1)`) into a view that the decomposed attention's output
    does not allow, and fails ("Cannot view a tensor with shape [B, N, h, d] ... as [B, N, h*d]":
    T5's attention, its bias as the mask). The eager model is not touched."""
    import warnings

    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = program.names()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on dim names, not the user's business
        torch.onnx.export(program, example, path, dynamo=True, dynamic_shapes=shapes, input_names=names[0],
                          output_names=names[1], external_data=False, verbose=False, opset_version=DECODE_OPSET)
    return names
