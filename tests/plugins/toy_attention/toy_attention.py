"""Two toy attention kinds, for tests/core/test_decoding_facts.py. Like a plugin, this one file
registers each kind's rules, its lowering and its facts, and nothing outside it names them:

- `toy_causal`: causal attention under a name of its own, with its DECODE fact (a cache of its
  keys and values) and its RESAMPLE fact (no weight depends on the size), so generate() caches
  it, a checkpoint loads into it and export takes it;
- `toy_forgetful`: the same without DECODE and RESAMPLE, so what asks them fails naming the op
  and the fact.
"""

from __future__ import annotations

from typing import Literal

from archspec.compiler.facts import CLASSIFIER, KEEPS, TOKEN_GRID, register_facts
from archspec.compiler.lowering_rules import lowering
from archspec.compiler.modules.attention.causal import CausalMask
from archspec.compiler.modules.attention.sequence import SelfAttention, make_sequence_attention
from archspec.primitives.decoding import ROLE, SelfCache, register_decoding
from archspec.primitives.ops.attention.causal import CausalAttentionOp, CausalParams
from archspec.primitives.registry import register


class ToyCausalParams(CausalParams):
    kind: Literal["toy_causal"]


class ToyCausal(CausalAttentionOp):
    """Causal attention under another name."""

    kind = "toy_causal"
    Params = ToyCausalParams


class ToyForgetfulParams(CausalParams):
    kind: Literal["toy_forgetful"]


class ToyForgetful(CausalAttentionOp):
    """Causal attention whose file forgot its DECODE fact."""

    kind = "toy_forgetful"
    Params = ToyForgetfulParams


TOY_CAUSAL = register(ToyCausal())
TOY_FORGETFUL = register(ToyForgetful())
register_decoding(TOY_CAUSAL, SelfCache())
ROLE.register(TOY_FORGETFUL, None)

for op in (TOY_CAUSAL, TOY_FORGETFUL):
    lowering(op)(lambda p, inputs, ctx, op=op: make_sequence_attention(SelfAttention, op, p, inputs, keys=CausalMask()))
register_facts(TOY_CAUSAL, grid=KEEPS, classifier=None, resample=None)
TOKEN_GRID.register(TOY_FORGETFUL, KEEPS)
CLASSIFIER.register(TOY_FORGETFUL, None)
