"""blockwise: keys the kind's mask hides seen again within a block. Query i also sees key j when
both carry the same block id, 0 or more (ids int64 [B, N]; -1: a token of no block), Hugging
Face's `block_sequence_ids` overlay (masking_utils.blockwise_overlay) joined to the causal mask:
PaliGemma's prefix (image and prompt see each other both ways, the suffix stays causal), Gemma
3's images, GIT's image tokens. It only changes which keys are seen, so the attention stays one
fused SDPA with an additive mask [B, 1, N, N]; a padded key stays hidden.

    inputs:
      input_ids: {shape: [B, L], dtype: int64}
      block_ids: {shape: [B, L], dtype: int64}
    ...
      - attention: {kind: causal, heads: 8, scores: [{blockwise: {ids: block_ids}}]}
        from: [x, block_ids]
"""

from __future__ import annotations

from .....core.declared import Field
from ....base import Params, RuleError
from ....decoding import Mixes
from .....core.suggestions import Remedy
from ....registry import register
from .base import ScorePart, ScoreSite, register_score_decoding


class BlockwiseParams(Params):
    ids: str = Field(description="name of the block ids, int64 [B, N], one per token: a block's number (0 or more) "
                                 "or -1 (none); given in the node's `from:` after the token stream")

    @property
    def tensors(self) -> tuple[str, ...]:
        return (self.ids,)


class BlockwisePart(ScorePart):
    """Keys the kind's mask hides seen again where query and key carry one block id, 0 or more
    (Hugging Face's block_sequence_ids: PaliGemma's prefix, Gemma 3's images): a mask, fused SDPA."""

    name = "blockwise"
    Params = BlockwiseParams
    explicit = False
    sees_hidden_keys = True

    def check(self, p, site: ScoreSite) -> None:
        if not site.masks:
            raise RuleError("blockwise changes which keys the kind's mask hides, and this kind of attention does not "
                            "take mask parts", field="scores",
                            hint=Remedy("use it on causal or sliding attention"))
        if not site.self_attention:
            raise RuleError("blockwise compares the block ids of the queries and the keys of one sequence, and cross "
                            "attention's keys are another sequence's", field="scores",
                            hint=Remedy("use it on self-attention (causal)"))
        if len(site.tensors) != 1:
            raise RuleError(f"score part 'blockwise' reads one tensor ({p.ids}), and this attention gives its parts "
                            f"{len(site.tensors)}", field="scores",
                            hint=Remedy("name the block ids in the node's `from:` after the token stream, and no "
                                        "other part's tensors"))
        ids, length = site.tensors[0], site.x.shape[1]
        if ids.dtype != "int64" or len(ids.shape) != 2 or ids.shape[1] != length:
            raise RuleError(f"the block ids {p.ids!r} must be int64 [B, {length}], one per token, got "
                            f"{ids.describe()}", field="scores",
                            hint=Remedy("an input `{shape: [B, L], dtype: int64}` beside the token ids, or ids made "
                                        "from them (`compare` with dtype int64)"))


BLOCKWISE = register(BlockwisePart())
register_score_decoding(BLOCKWISE, Mixes("generate takes no block ids beside the prompt yet (the prompt's blocks would "
                                      "see each other, the new tokens causally)"))
