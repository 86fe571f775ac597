"""embed: token ids -> tokens. An embedding table (optionally shared with another embed
node: `tie`), optionally scaled by sqrt(dim) as in the 2017 Transformer, plus positions
(learned table, sinusoidal, or none), plus, with `types`, token-type (segment) embeddings
looked up from a second ids input (BERT)."""

from __future__ import annotations

from typing import Literal

from ...core.declared import Field
from ...core.types import Sym, TensorType, tokens
from ..base import Cost, NonNegInt, Op, Params, PositiveInt, Rate, RuleError
from ..counting import FLOAT_BYTES
from ..registry import register
from ..dtypes import READS, IDS_FIRST
from ..decoding import POSITIONAL, register_decoding


class EmbedParams(Params):
    vocab: PositiveInt | None = Field(None, description="vocabulary size (taken from `tie` when tied)")
    dim: PositiveInt | None = Field(None, description="width of the tokens (taken from `tie` when tied)")
    pos: Literal["learned", "sincos", "none"] = "learned"
    sincos_layout: Literal["interleaved", "halves", "fairseq"] = Field(
        "interleaved", description="pos: sincos: each frequency's sin and cos side by side, sin at 2i and cos at "
                                   "2i + 1 (interleaved: Vaswani et al.'s formula); all the sines, then all the "
                                   "cosines (halves: Hugging Face's Marian, frequencies 10000^(-i/(d/2))); or so at "
                                   "the frequencies 10000^(-i/(d/2 - 1)) (fairseq: tensor2tensor's, fairseq's, "
                                   "FSMT's, M2M100's and Whisper's sinusoids; fairseq numbers them from the ids: "
                                   "pos_pad_id)")
    max_len: PositiveInt | None = Field(None, description="longest sequence the positions cover (with pos_offset, "
                                                          "the rows after the offset's: Hugging Face's "
                                                          "max_position_embeddings minus pos_offset, 514 - 2 for "
                                                          "RoBERTa)")
    pos_offset: NonNegInt = Field(0, description="learned positions: the table has this many rows more, "
                                                 "before the first position's (BART, OPT: 2)")
    pos_frozen: bool = Field(False, description="pos: sincos: the sinusoid table is a parameter that never trains, "
                                                "in the state dict and counted among the parameters, as Hugging "
                                                "Face's Pegasus, Marian and BART-like sinusoids are (their "
                                                "embed_positions.weight loads into it); false: a buffer made at "
                                                "build, in no state dict")
    scale: bool | Literal["rounded"] = Field(
        False, description="multiply the embeddings by sqrt(dim) (Vaswani et al.); rounded: by sqrt(dim) kept as a "
                           "float32 number and rounded to the table's dtype first, as Hugging Face's Gemma family "
                           "(embed_scale.to(weight.dtype): sqrt(1152) is 34.0 in bf16, not 33.94)")
    multiplier: float = Field(1.0, allow_inf_nan=False,
                              description="multiply the token embeddings by this fixed number, before the positions "
                                          "(Granite's embedding_multiplier, MiniCPM's scale_emb)")
    dropout: Rate = 0.0
    tie: str | None = Field(None, description="share the table of this other embed node")
    types: PositiveInt | None = Field(None, description="token types (segments): read their ids as a second input "
                                                        "and add a table of this many rows (BERT: 2)")
    pad_id: NonNegInt | None = Field(None, description="the token table's padding row: zeros at first and never "
                                                       "trained (nn.Embedding's padding_idx; Hugging Face's BERT, "
                                                       "RoBERTa, BART: pad_token_id)")
    pos_pad_id: NonNegInt | None = Field(
        None, description="positions numbered from the ids, as RoBERTa's (Hugging Face's "
                          "create_position_ids_from_input_ids): each token that is not this id takes row pos_pad_id "
                          "+ its count among them, each padding token row pos_pad_id (never trained; zeros in a "
                          "sinusoid table); learned: pos_offset must be pos_pad_id + 1 (RoBERTa, XLM-R: pad 1, offset "
                          "2); sincos: the table's rows so numbered, as fairseq's (M2M100, NLLB, FSMT: "
                          "sincos_layout fairseq)")


def tied_table(tie: str, ctx) -> tuple[int, int]:
    """(vocab, dim) of the embed node `tie` names, which must own its table."""
    if tie == ctx.node.name:
        raise RuleError("an embed cannot tie to itself", field="tie", hint="name the embed node that owns the table")
    owner = ctx.node_named(tie)
    if owner.op is not EMBED:
        raise RuleError(f"`tie` must name an embed node; {tie} is {owner.op.label}", field="tie",
                        hint="tie to the embed node whose table you want to share")
    if owner.params.tie is not None:
        raise RuleError(f"`tie` must name the embed node that owns the table; {tie} shares {owner.params.tie}'s",
                        field="tie", hint=f"tie to {owner.params.tie}")
    if owner.params.vocab is None or owner.params.dim is None:  # its own rule reports it; no table to share
        raise RuleError(f"{tie} has no table to share: it lacks `{'vocab' if owner.params.vocab is None else 'dim'}`",
                        field="tie", hint=f"give {tie} its vocab and dim")
    return owner.params.vocab, owner.params.dim


def table_shape(p: EmbedParams, ctx) -> tuple[int, int]:
    """(vocab, dim) of the table, following `tie` to the node that owns it."""
    if p.tie is None:
        if p.vocab is None or p.dim is None:
            missing = "vocab" if p.vocab is None else "dim"
            raise RuleError(f"embed needs `{missing}` (or `tie` to share another embed's table)")
        return p.vocab, p.dim
    vocab, dim = tied_table(p.tie, ctx)
    for name, mine, theirs in (("vocab", p.vocab, vocab), ("dim", p.dim, dim)):
        if mine is not None and mine != theirs:
            raise RuleError(f"{name} {mine} differs from the tied table's {name} {theirs} ({p.tie})", field=name)
    return vocab, dim


def not_ids_hint(x: TensorType) -> str | None:
    """Why a computed [B, L] tensor is not token ids: ids come from an input declared as ids."""
    if len(x.shape) == 2 and x.layout == "tensor":
        return (f"this [B, L] {x.dtype} is a computed tensor, not token ids: embed reads an input declared "
                "{shape: [B, L], dtype: int64} (or a slice of one); positions numbered from the ids, as RoBERTa's, "
                "are embed's pos_pad_id")
    return None


def check_padding_rows(p: EmbedParams, vocab: int) -> None:
    """pad_id within the vocabulary; pos_pad_id with a position table, a learned one's pos_offset one past it."""
    if p.pad_id is not None and p.tie is not None:
        raise RuleError(f"pad_id marks a row of the table's owner, and this embed shares {p.tie}'s", field="pad_id",
                        hint=f"give pad_id on {p.tie}")
    if p.pad_id is not None and p.pad_id >= vocab:
        raise RuleError(f"pad_id {p.pad_id} is outside the table of {vocab} rows", field="pad_id")
    if p.pos_pad_id is None:
        return
    if p.pos not in ("learned", "sincos"):
        raise RuleError(f"pos_pad_id numbers a position table; these positions are {p.pos}",
                        field="pos_pad_id", hint="use pos: learned or sincos, or drop pos_pad_id")
    if p.pos == "learned" and p.pos_offset != p.pos_pad_id + 1:
        raise RuleError(f"pos_pad_id {p.pos_pad_id} puts the first token at row {p.pos_pad_id + 1}, and pos_offset "
                        f"says row {p.pos_offset}", field="pos_pad_id",
                        hint=f"give pos_offset: {p.pos_pad_id + 1} (RoBERTa: pad 1, offset 2)")


def sincos_rows(p: EmbedParams) -> int:
    """The rows of a sinusoid table: max_len, and fairseq's pos_pad_id + 1 before them where the
    positions are numbered from the ids."""
    return p.max_len + (p.pos_pad_id + 1 if p.pos_pad_id is not None else 0)


class Embed(Op):
    """Token ids -> tokens: a table (own, or tied to another embed), optional sqrt(dim) scale, positions."""

    primitive = "embed"
    Params = EmbedParams
    refs = ("tie",)

    def reads(self, p) -> tuple[str, ...]:
        return ("ids", "types") if p.types else ("ids",)

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if x.layout != "ids":
            raise RuleError(f"embed reads token ids, got {x.layout_name()}", hint=not_ids_hint(x))
        if p.types and (inputs[1].layout != "ids" or inputs[1].length != x.length):
            raise RuleError(f"token types must be ids [B, L] as long as the tokens ({x.length}), got "
                            f"{inputs[1].describe()}", field="from")
        _, dim = table_shape(p, ctx)
        length = x.length
        longest = length.hi if isinstance(length, Sym) else length
        if p.pos != "none":
            if p.max_len is None:
                raise RuleError(f"positions ({p.pos}) need `max_len`", field="pos")
            if longest > p.max_len:
                raise RuleError(f"sequences of up to {longest} tokens exceed max_len {p.max_len}", field="max_len",
                                hint=f"raise max_len to {longest} or shorten the input")
        if p.pos_offset and p.pos != "learned":
            raise RuleError(f"pos_offset moves a learned position table; these positions are {p.pos}",
                            field="pos_offset", hint="use pos: learned, or drop pos_offset")
        if p.pos_frozen and p.pos != "sincos":
            raise RuleError(f"pos_frozen freezes a sinusoid table, and these positions are {p.pos}", field="pos_frozen",
                            hint="use pos: sincos with it, or drop pos_frozen (a learned table trains)")
        if p.pos == "sincos" and dim % 2:
            raise RuleError(f"sinusoidal positions need an even width, got {dim}", field="pos")
        check_padding_rows(p, table_shape(p, ctx)[0])
        if p.pos != "sincos" and "sincos_layout" in p.model_fields_set:
            raise RuleError(f"sincos_layout orders sinusoidal positions; these positions are {p.pos}",
                            field="sincos_layout", hint="use pos: sincos, or drop sincos_layout")
        return tokens(length, dim)  # [B, L] -> [B, L, dim]

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        params = 0 if p.tie else p.vocab * p.dim
        params += (p.max_len + p.pos_offset) * out.channels if p.pos == "learned" else 0
        params += (p.types or 0) * out.channels
        params += sincos_rows(p) * out.channels if p.pos_frozen else 0  # a frozen table is a parameter
        fixed = p.pos == "sincos" and not p.pos_frozen
        table = sincos_rows(p) * out.channels * FLOAT_BYTES if fixed else 0  # the fixed sinusoids, a buffer
        return Cost(params, 0, table)

    def value_range(self, p, slot: int, ctx) -> int | None:
        return table_shape(p, ctx)[0] if slot == 0 else p.types  # ids index their tables


EMBED = register(Embed())
READS.register(EMBED, IDS_FIRST)
register_decoding(EMBED, POSITIONAL)
