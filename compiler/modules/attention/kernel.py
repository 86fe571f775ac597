"""The attention kernel of the sequence kinds: softmax(q·k^T · scale + bias + mask) · v over
q, k and v already projected, normalised, rotated and shared among the query heads, in
FlexAttention's model: which keys a query sees is the kind's mask rule (`AllKeys`, and the
kinds' rules in causal.py, sliding.py, alibi.py), what changes the scores are the score parts,
and one kernel runs them. It holds no parameter and no state (the attention module around it
holds the projections and the parts, so their state-dict keys are the module's own; a rule's
table, ALiBi's slopes, is its non-persistent buffer), and it chooses the kernel per call:

- one F.scaled_dot_product_attention call (bias parts and masks as its additive mask; the plain
  causal mask as its is_causal),
- the same call with the sinks as one more zero key each (`sunk`),
- one flex_attention call under torch.compile where every part is an element-wise `modify`
  of the score (`flexed`),
- written out (`scored`): the products and the softmax as plain ops, with the parts' steps
  around the softmax, for targets with no such kernel and for parts that need it.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import attention_dropout
from .form import AttentionForm, softmax_written
from .scores.base import ScoreIndex


def hidden_keys(padding):
    """A 0/1 key-padding mask [B, M] -> True where a key is hidden, shaped [B, 1, 1, M]."""
    return (padding == 0)[:, None, None, :]


def later_or_outside(query, key, window=None):
    """True where a key may not be seen by a query: it comes later, or (with a window) `window`
    or more places before it. `query` and `key`: broadcastable slot indices (e.g. [N, 1], [1, M])."""
    hidden = key > query
    return hidden if window is None else hidden | (key <= query - window)


def additive(hidden, dtype):
    """A boolean 'hidden' mask -> an additive mask: 0 where seen, the dtype's minimum where
    hidden (a row with every key hidden then attends uniformly instead of giving NaN)."""
    return torch.zeros(hidden.shape, dtype=dtype, device=hidden.device).masked_fill(hidden, torch.finfo(dtype).min)


class AllKeys:
    """A kind's mask rule (FlexAttention's mask_mod): which keys a query sees, as a function of
    their indices. This one: every key (global, cross and class attention). A rule holds no
    tensor (its `table`, if any, is the kernel's buffer); its constructor arguments are its
    attributes, and its repr constructs it again (model.py)."""

    causal = False  # the plain causal mask: SDPA's is_causal when nothing else is masked
    hides_some = False  # `hides` can hide a key
    decodes = False  # generate can cache the keys: no query sees a later key
    adds_bias = False  # `bias` gives a bias of the distances (ALiBi): flex_attention is not used

    def hides(self, query, key):
        """True where the key is hidden from the query, at broadcastable indices; None: every key is seen."""
        return None

    def table(self):
        """A tensor the rule reads at every call (ALiBi's slopes), made once: the kernel keeps it as
        its non-persistent buffer `table` (it moves and casts with the model, and is no state), and
        gives it back to `bias`. None: none."""
        return None

    def bias(self, query, key, dtype, table=None):
        """An additive bias of the query and key indices ([h, N, M], or [B, h, N, M] at positions
        [B, 1, N, 1] and [B, 1, 1, M]), or None; `table`: the kernel's copy of `table()`."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class AttentionKernel(AttentionForm, nn.Module):
    """The attention of q [B, h, N, d] over k and v [B, h, M, d] (see the module docstring):
    `keys`, the kind's mask rule; `scale` (None: 1/sqrt(d)); `attn_drop`, dropout on the
    weights in training. Each call is given the score part modules, in order."""

    def __init__(self, keys: AllKeys, scale=None, attn_drop=0.0):
        super().__init__()
        self.keys, self.scale, self.attn_drop = keys, scale, attn_drop
        self.register_buffer("table", keys.table(), persistent=False)  # the rule's tensor, or None

    def extra_repr(self) -> str:
        return f"keys={self.keys!r}, scale={self.scale}, attn_drop={self.attn_drop}"

    def forward(self, q, k, v, bias=None, padding=None, parts=(), tensors=()):
        """q [B, h, N, d], k and v [B, h, M, d] -> [B, h, N, d]; `bias` an additive score bias
        ([B or 1, h or 1, N, M]) or None, `padding` a 0/1 key mask [B, M] or None, `tensors` the
        inputs the parts read by name."""
        N, M = q.shape[-2], k.shape[-2]
        if self.mixes_scores(parts) and self.flexes(q, k, bias, parts, tensors):
            return self.flexed(q, k, v, padding, parts, tensors)
        if self.sinks_alone(parts) and not self.writes_out(M, q):
            return self.sunk(q, k, v, bias, padding, parts, tensors)
        if self.mixes_scores(parts) or self.writes_out(M, q):
            return self.written_out(q, k, v, bias, padding, parts, tensors)
        if bias is None:
            attn_mask, is_causal = self.mask(N, M, padding, q.dtype, q.device, parts, tensors)
        else:  # the bias joins the mask made explicit
            mask = self.additive_mask(N, M, padding, q.dtype, q.device, parts, tensors)
            attn_mask, is_causal = (bias.to(q.dtype) if mask is None else mask + bias), False
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=attention_dropout(self),
                                              is_causal=is_causal, scale=self.scale)  # [B, h, N, d]

    # -- which keys are seen ------------------------------------------------------------------
    def hidden(self, q_len, k_len, device, parts=(), tensors=()):
        """True where query i may not see key j ([q_len, k_len], or [B, 1, q_len, k_len] where a
        part reads the row's tensors), or None: every key is seen."""
        return self.hides(*slots(q_len, k_len, device), parts, tensors)  # [q_len, k_len] or None

    def hides(self, query, key, parts=(), tensors=(), batch=None):
        """The kind's mask and the parts' (`hides`: local_window), less the keys a part sees again
        (`sees`: blockwise, from the parts' `tensors`), True where the key is hidden from the query,
        at broadcastable indices (with `batch`, one row's: flex_attention's mask_mod); None:
        every key is seen."""
        hidden = self.keys.hides(query, key)
        for part in masking_parts(parts):
            found = part.hides(query, key)
            hidden = found if hidden is None else hidden | found
        for part in seeing_parts(parts):
            if hidden is not None:
                hidden = hidden & ~part.sees(query, key, tensors, batch)  # [B, 1, N, M] at slots
        return hidden

    def mask(self, q_len, k_len, padding, dtype, device, parts=(), tensors=()):
        """(attn_mask, is_causal) for SDPA: the kind's own mask (and bias) and the padded keys, together."""
        i, j = slots(q_len, k_len, device)  # [N, 1], [1, M]
        hidden = self.hides(i, j, parts, tensors)  # [N, M], [B, 1, N, M] (blockwise) or None
        if self.keys.adds_bias:  # ALiBi: the distances' bias, the hidden keys at the dtype's minimum
            bias = self.keys.bias(i, j, dtype, self.table)  # [h, N, M]
            if padding is not None:
                hidden = hidden_keys(padding) if hidden is None else hidden | hidden_keys(padding)  # [B, 1, N, M]
            return (bias if hidden is None else torch.where(hidden, torch.finfo(dtype).min, bias)), False
        if padding is None:
            if hidden is None or (self.keys.causal and not masking_parts(parts) and not seeing_parts(parts)):
                return None, hidden is not None  # SDPA's own causal mask
            return additive(hidden, dtype), False
        padded = hidden_keys(padding)  # [B, 1, 1, M]
        if hidden is None:  # one row per query, as ONNX Runtime's Attention op requires of a mask
            return additive(padded.expand(-1, -1, q_len, -1), dtype), False  # [B, 1, N, M]
        return additive(padded | hidden, dtype), False  # [B, 1, N, M]

    def additive_mask(self, q_len, k_len, padding, dtype, device, parts=(), tensors=()):
        """The kind's mask and the padded keys as one additive mask (SDPA's causal flag made
        explicit), or None."""
        attn_mask, is_causal = self.mask(q_len, k_len, padding, dtype, device, parts, tensors)
        return additive(self.hidden(q_len, k_len, device, parts, tensors), dtype) if is_causal else attn_mask

    # -- what the parts do to the scores ------------------------------------------------------
    @staticmethod
    def score_steps(parts) -> list:
        """The parts that change the scores themselves (`before_softmax` / `after_softmax`, or a
        `sink_logit` column in the softmax), in order: the attention is then not one SDPA call."""
        return [part for part in parts if hasattr(part, "before_softmax") or hasattr(part, "sink_logit")]

    def mixes_scores(self, parts) -> bool:
        return bool(self.score_steps(parts))

    def sinks_alone(self, parts) -> bool:
        """Whether the only parts that change the scores are sinks (a `sink_logit` each): the
        attention then stays one SDPA call (`sunk`)."""
        steps = self.score_steps(parts)
        return bool(steps) and all(hasattr(part, "sink_logit") and not hasattr(part, "before_softmax")
                                   and not hasattr(part, "after_softmax") for part in steps)

    # -- the kernels ----------------------------------------------------------------------------
    def written_out(self, q, k, v, bias, padding, parts=(), tensors=()):
        """softmax(q·k^T · scale + bias) · v with the parts' steps around the softmax (see `scored`),
        the kind's mask and the padded keys hidden, the indices those of the slots."""
        mask = self.additive_mask(q.shape[-2], k.shape[-2], padding, q.dtype, q.device, parts, tensors)
        return self.scored(q, k, v, bias, mask, ScoreIndex.of_slots(q, k, tensors), parts)

    def scored(self, q, k, v, bias, mask, index, parts=()):
        """softmax(q·k^T · scale + bias) · v with the parts' steps around the softmax, in their
        order, and the mask added after those before it (timm TalkingHeadAttn's, Gemma 2's soft-cap
        order); a part's `sink_logit` [h] joins the softmax as one more column, dropped after it
        (GPT-OSS's sinks). q [B, h, N, d], k and v [B, h, M, d] (shared already), mask [B or 1,
        1 or h, N, M] or None, index: the ScoreIndex of the scores (slots, or positions while
        generate decodes). Shared by the forward and generate's cache (compiler/generate/cache.py)."""
        scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale
        scores = (q * scale) @ k.transpose(-2, -1)  # [B, h, N, M]
        if bias is not None:
            scores = scores + bias
        steps = self.score_steps(parts)
        for part in steps:
            if hasattr(part, "before_softmax"):
                scores = part.before_softmax(scores, index) if getattr(part, "reads_index", False) \
                    else part.before_softmax(scores)
        if mask is not None:
            scores = scores + mask
        B, h, N, _ = scores.shape
        sinks = sink_columns(steps, B, h, N, scores.dtype)  # each [B, h, N, 1]
        if sinks:
            scores = torch.cat([scores, *sinks], dim=-1)  # [B, h, N, M + sinks]
        weights = softmax_written(scores) if self.wants_written(q) else scores.softmax(dim=-1)  # form.py: why
        if sinks:
            weights = weights[..., : weights.shape[-1] - len(sinks)]  # [B, h, N, M]: the sinks' columns dropped
        for part in steps:
            if hasattr(part, "after_softmax"):
                weights = part.after_softmax(weights)
        weights = F.dropout(weights, attention_dropout(self))
        return weights @ v  # [B, h, N, d]

    def sunk(self, q, k, v, bias, padding, parts=(), tensors=()):
        """The sinks inside one SDPA call: each sink is one more key whose key and value are zeros
        (its score q·0 is 0) and whose column of the additive mask is the sink's logit, so the
        softmax holds it in the denominator and it adds nothing to the output, as `scored` writes
        out (GPT-OSS). q [B, h, N, d], k and v [B, h, M, d] (shared already) -> [B, h, N, d]."""
        B, h, N, d = q.shape
        M = k.shape[-2]
        mask = self.additive_mask(N, M, padding, q.dtype, q.device, parts, tensors)  # [B or 1, 1 or h, N, M] or None
        if bias is not None:
            mask = bias.to(q.dtype) if mask is None else mask + bias
        rows = (q.new_zeros(1, 1, N, M) if mask is None else mask).expand(B, h, N, M)  # [B, h, N, M]
        sinks = sink_columns(self.score_steps(parts), B, h, N, q.dtype)  # each [B, h, N, 1]
        mask = torch.cat([rows, *sinks], dim=-1)  # [B, h, N, M + sinks]
        zeros = q.new_zeros(B, h, len(sinks), d)  # [B, h, sinks, d]
        k, v = torch.cat([k, zeros], dim=-2), torch.cat([v, zeros.to(v.dtype)], dim=-2)  # [B, h, M + sinks, d]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=attention_dropout(self),
                                              scale=self.scale)  # [B, h, N, d]

    def flexes(self, q, k, bias, parts=(), tensors=()) -> bool:
        """Whether the parts run fused, as flex_attention's score_mod: under torch.compile (not
        torch.export, whose ONNX and TensorRT targets have no such kernel), with no score bias and
        no dropout, and every part an element-wise `modify` of the score (softcap, mod). Inductor's
        CPU kernel (torch 2.14) takes static sizes and heads of 16 or more: it fails to compile at a
        dynamic length (a C++ error) or a head of 8 (no kernel), and a score_mod reading a tensor
        computed in the graph (a mask from the ids: "NoValidChoicesError", the PaliGemma trial), so
        those stay written out; it reads parameters (a per-head bias)."""
        if not torch.compiler.is_compiling() or torch.compiler.is_exporting() or self.written:
            return False
        if q.device.type == "cpu" and (q.shape[-1] < 16 or not all(
                isinstance(size, int) for size in (*q.shape, *k.shape))):
            return False
        if q.device.type == "cpu" and not all(isinstance(t, torch.nn.Parameter) for t in tensors):
            return False
        if self.keys.adds_bias:
            return False  # a bias of the distances (alibi's): written out
        return bias is None and attention_dropout(self) == 0 and all(
            hasattr(part, "modify") and not hasattr(part, "after_softmax") and not hasattr(part, "sink_logit")
            for part in self.score_steps(parts))

    def flexed(self, q, k, v, padding, parts=(), tensors=()):
        """The attention as one flex_attention call: the parts' `modify` steps and the kind's mask
        (with the padded keys) as its score_mod, over the same q [B, h, N, d], k, v [B, h, M, d]."""
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        steps = self.score_steps(parts)
        named = [dict(zip(getattr(part, "tensors", ()), tensors)) for part in steps]
        lowest = torch.finfo(q.dtype).min

        def score_mod(score, b, h, q_idx, kv_idx):
            for part, found in zip(steps, named):
                score = part.modify(score, b, h, q_idx, kv_idx, found)
            if padding is None:
                return score
            return torch.where(padding[b, kv_idx] == 0, lowest, score)  # a padded key

        def mask_mod(b, h, q_idx, kv_idx):  # the kind's and the parts' masks, from the indices
            return ~self.hides(q_idx, kv_idx, parts, tensors, b)

        masked = self.keys.hides_some or masking_parts(parts)
        rows = q.shape[0] if seeing_parts(parts) else None  # a mask of each row's own tensors, or one for all
        blocks = create_block_mask(mask_mod, rows, None, q.shape[-2], k.shape[-2], device=q.device) if masked else None
        # Contiguous: inductor's CPU flex_attention (torch 2.14) reads q and k made inside the compiled
        # graph by a pointwise op on a transposed view (rotary's) with the wrong strides and returns
        # other numbers, silently (the PaliGemma trial: 0.09 on logits of 1.1; plain-torch repro in
        # tests/benchmarks/flex_cpu_strides_repro.py). A copy where they are not contiguous already.
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=blocks, scale=self.scale)  # [B, h, N, d]


def slots(q_len, k_len, device):
    """The query and key slot indices, [q_len, 1] and [1, k_len]."""
    return torch.arange(q_len, device=device)[:, None], torch.arange(k_len, device=device)[None, :]


def masking_parts(parts) -> list:
    """The parts that hide keys (`hides`: local_window), in order."""
    return [part for part in parts if hasattr(part, "hides")]


def seeing_parts(parts) -> list:
    """The parts that see keys the mask hides again (`sees`: blockwise), in order."""
    return [part for part in parts if hasattr(part, "sees")]


def sink_columns(parts, B, h, N, dtype) -> list:
    """Each sink part's logit [h] among `parts` as one more score column [B, h, N, 1] (GPT-OSS), in order."""
    return [part.sink_logit().to(dtype).view(1, h, 1, 1).expand(B, h, N, 1)  # [h] -> [B, h, N, 1]
            for part in parts if hasattr(part, "sink_logit")]
