"""embed (torch): token table (optionally shared), optional sqrt(dim) scale, positions."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from archspec.primitives.ops.embed import EMBED, table_shape

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make
from .tables import sinusoid_table


def rounded_to(value: float, dtype: torch.dtype) -> float:
    """`value` as a float32 number rounded to `dtype` (Hugging Face's Gemma: a float32 buffer, `.to(dtype)`)."""
    return float(torch.tensor(value, dtype=torch.float32).to(dtype))


class TokenEmbed(nn.Module):
    """Token ids [B, L] -> [B, L, dim]. The positions are 0..L-1, or `positions` [B, L] where the
    forward is given them (generate's decode graph: the tokens' positions in a decode step, or
    in a left-padded prompt; compiler/generate/cache.py)."""

    def __init__(self, vocab, dim, pos, max_len, scale, tied=False, dropout=0.0, types=None, pos_offset=0,
                 sincos_layout="interleaved", pad_id=None, pos_pad_id=None, multiplier=1.0, pos_frozen=False):
        super().__init__()
        self.multiplier = multiplier  # a fixed multiplier of the token embeddings (Granite, MiniCPM)
        self.pos_offset = pos_offset  # learned positions: rows of the table before the first position's
        self.pos_pad_id = pos_pad_id  # positions numbered from the ids (RoBERTa's), padding at this row
        self.scale = math.sqrt(dim) if scale else None
        self.scale_rounded = scale == "rounded"  # the scale in the table's dtype first (Gemma's embed_scale)
        # a tied table is set by the lowering
        self.tokens = None if tied else nn.Embedding(vocab, dim, padding_idx=pad_id)
        self.pos = nn.Embedding(pos_offset + max_len, dim, padding_idx=pos_pad_id) if pos == "learned" else None
        self.types = nn.Embedding(types, dim) if types else None
        if pos == "sincos" and pos_frozen:  # a parameter that never trains, in the state dict (Pegasus)
            self.pos_table = nn.Parameter(position_table(max_len, dim, sincos_layout, pos_pad_id), requires_grad=False)
        elif pos == "sincos":
            self.register_buffer("pos_table", position_table(max_len, dim, sincos_layout, pos_pad_id),
                                 persistent=False)  # [max_len (+ pos_pad_id + 1), dim]
        else:
            self.pos_table = None
        self.drop = nn.Dropout(dropout) if dropout > 0 else None
        for table in (self.tokens, self.pos, self.types):
            if table is not None:
                nn.init.normal_(table.weight, std=0.02)
                if table.padding_idx is not None:
                    nn.init.zeros_(table.weight[table.padding_idx])

    def forward(self, ids, types=None, positions=None):
        x = self.tokens(ids)  # [B, L] -> [B, L, dim]
        if self.types is not None:
            x = x + self.types(types)
        if self.scale is not None:
            x = x * (rounded_to(self.scale, x.dtype) if self.scale_rounded else self.scale)
        if self.multiplier != 1.0:
            x = x * self.multiplier
        if positions is not None:
            return self.at_positions(x, positions, ids)
        if self.pos_pad_id is not None:  # learned (RoBERTa) or sinusoids (fairseq): rows numbered from the ids
            rows = numbered_positions(ids, self.pos_pad_id)  # [B, L]
            return self.dropped(x + (self.pos(rows) if self.pos is not None else self.pos_table[rows]))  # [B, L, dim]
        if self.pos is not None:
            x = x + self.pos.weight[self.pos_offset: self.pos_offset + ids.shape[1]]  # [L, dim]
        if self.pos_table is not None:
            x = x + self.pos_table[: ids.shape[1]]
        return self.dropped(x)

    def at_positions(self, x, positions, ids):
        """The position embeddings of `positions` [B, L] added (generate(): a cached decode step
        or a left-padded prompt), then dropout. Numbered from the ids (`pos_pad_id`), a padding
        token takes the padding row wherever it is, as Hugging Face's cached steps give it."""
        if self.pos is not None:
            x = x + self.pos(self.padded_rows(positions + self.pos_offset, ids))  # [B, L, dim]
        if self.pos_table is not None:
            first = 0 if self.pos_pad_id is None else self.pos_pad_id + 1  # fairseq's rows start after the pad's
            x = x + self.pos_table[self.padded_rows(positions + first, ids)]  # [B, L, dim]
        return self.dropped(x)

    def padded_rows(self, rows, ids):
        """`rows` [B, L], with the padding row where a token is the padding id (pos_pad_id)."""
        if self.pos_pad_id is None:
            return rows
        return torch.where(ids == self.pos_pad_id, self.pos_pad_id, rows)

    def dropped(self, x):
        return self.drop(x) if self.drop is not None else x


def position_table(max_len: int, dim: int, layout: str, pos_pad_id: int | None):
    """The fixed sinusoids [max_len, dim]; numbered from the ids (`pos_pad_id`), fairseq's: row r
    is position r's, the first token at row pos_pad_id + 1, row pos_pad_id zeros (its padding)."""
    if pos_pad_id is None:
        return sinusoid_table(max_len, dim, layout)
    table = sinusoid_table(pos_pad_id + 1 + max_len, dim, layout)  # [pad + 1 + max_len, dim]
    table[pos_pad_id] = 0.0
    return table


def numbered_positions(ids, pad: int):
    """RoBERTa's position rows [B, L] (Hugging Face's create_position_ids_from_input_ids): pad + the
    count of non-padding tokens so far for each token, pad for each padding token."""
    real = (ids != pad).long()  # [B, L]
    return torch.cumsum(real, dim=1) * real + pad


@lowering(EMBED)
def lower(p, inputs, ctx):
    vocab, dim = table_shape(p, ctx)
    if p.tie is not None:
        ctx.tie("tokens", p.tie + ".tokens")
    return make(TokenEmbed, vocab=vocab, dim=dim, pos=p.pos, max_len=p.max_len, scale=p.scale,
                tied=p.tie is not None, dropout=p.dropout, types=p.types, pos_offset=p.pos_offset,
                sincos_layout=p.sincos_layout, pad_id=p.pad_id, pos_pad_id=p.pos_pad_id,
                **({"multiplier": p.multiplier} if p.multiplier != 1.0 else {}),  # model.py as before without them
                **({"pos_frozen": True} if p.pos_frozen else {}))


register_facts(EMBED, grid=KEEPS, classifier=None, resample=None)
