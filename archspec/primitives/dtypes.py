"""READS: the dtypes an op reads, a fact registered against every op from its rule file
(facts.py), and the check that runs it before the op's shape rule (infer.py):

    READS.register(CONV, FLOATS)                      # conv.py: every input floating-point
    READS.register(GATHER, ANY)                       # gather.py: any dtype (its rule checks the index)
    READS.register_family(AttentionOp, FLOAT_FIRST)   # attention/common.py: the tokens float, the rest
                                                      # (a padding mask, a bias) checked by the kind's rule

Token ids (int64) reaching a float-only op is a located error at check: torch would refuse them
at build or at the first forward, or an einsum would compute in int64 what check typed float32.
A rearrange `as: image` or `as: tokens` changes the layout, never the dtype: ids laid out as an
image are still ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.interpreter import NodeFailed
from ..core.errors import Diagnostic
from .facts import Fact


@dataclass(frozen=True)
class Reads:
    """The dtype each input must have, in order ("float", "int64" or "any"); the last entry
    stands for every further input."""

    inputs: tuple[str, ...]

    def wanted(self, index: int) -> str:
        return self.inputs[min(index, len(self.inputs) - 1)]


FLOATS = Reads(("float",))  # every input floating-point (conv, linear, softmax, norms, einsum...)
ANY = Reads(("any",))  # any dtype: layout and index ops, comparisons; the op's rule says more
FLOAT_FIRST = Reads(("float", "any"))  # the main input floating-point; the others (masks, indices) the rule's
IDS_FIRST = Reads(("int64", "any"))  # token ids first (embed)

READS = Fact("READS", "the dtypes the op reads (dtypes.Reads: FLOATS, ANY, FLOAT_FIRST, IDS_FIRST)",
             where="the op's rule file (archspec/primitives/ops/<op>.py, or a plugin's), beside its shape rule")

WORDS = {"float": "floating-point values", "int64": "integer token ids (int64)"}


def is_float(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


def fits(dtype: str, wanted: str) -> bool:
    return wanted == "any" or (is_float(dtype) if wanted == "float" else dtype == wanted)


def check_reads(node, inputs: list) -> None:
    """NodeFailed, located at the node's `from`, when an input's dtype is not one the op reads
    (READS.of fails naming the op when it has none)."""
    reads = READS.of(node.op, node)
    for index, (name, t) in enumerate(zip(node.inputs, inputs)):
        dtype = getattr(t, "dtype", None)
        wanted = reads.wanted(index)
        if dtype is None or fits(dtype, wanted):
            continue
        which = f"its input '{name}'" if len(node.inputs) > 1 else f"'{name}'"
        hint = ("token ids become vectors through an `embed`; a rearrange `as: image` or `as: tokens` changes the "
                "layout, not the dtype" if dtype == "int64" else None)
        raise NodeFailed(Diagnostic(f"{node.op.label} reads {WORDS[wanted]}, and {which} is {t.layout_name()} "
                                    f"{t.describe()}", node.param_loc("from"), node.name, hint=hint))
