"""ONNX_FUSION of every built-in op, registered from the ONNX backend's own file (TVM registers a
backend's attribute from the backend's file): which fused ONNX Runtime op a node of it becomes
after ONNX Runtime's own optimisations, what onnx.expected_fusions counts. A plugin's op gives its
own from its torch side (compiler/facts.py); an op in neither place has none, and a lookup of it
fails naming the op.

    FUSES        "attention" (an Attention or MultiHeadAttention op), "gelu" (BiasGelu/FastGelu
                 after a linear), or a function of the params that says which, or None
    NO_FUSION    the ops ONNX Runtime fuses into nothing archspec counts
"""

from __future__ import annotations

from archspec.primitives.ops.argsort import ARGSORT
from archspec.primitives.ops.attention.alibi import ALIBI
from archspec.primitives.ops.attention.causal import CAUSAL
from archspec.primitives.ops.attention.channel import CHANNEL
from archspec.primitives.ops.attention.class_ import CLASS
from archspec.primitives.ops.attention.convolutional import CONVOLUTIONAL
from archspec.primitives.ops.attention.cross import CROSS
from archspec.primitives.ops.attention.differential import DIFFERENTIAL
from archspec.primitives.ops.attention.global_ import GLOBAL
from archspec.primitives.ops.attention.latent import LATENT
from archspec.primitives.ops.attention.linear_sra import LINEAR_SRA
from archspec.primitives.ops.attention.nystrom import NYSTROM
from archspec.primitives.ops.attention.outlook import OUTLOOK
from archspec.primitives.ops.attention.pooled import POOLED
from archspec.primitives.ops.attention.shifted import SHIFTED
from archspec.primitives.ops.attention.sliding import SLIDING
from archspec.primitives.ops.attention.sra import SRA
from archspec.primitives.ops.attention.window import WINDOW
from archspec.primitives.ops.attention.xca import XCA
from archspec.primitives.ops.concat import CONCAT
from archspec.primitives.ops.constant import CONSTANT
from archspec.primitives.ops.conv import CONV
from archspec.primitives.ops.conv_transpose import CONV_TRANSPOSE
from archspec.primitives.ops.einsum import EINSUM
from archspec.primitives.ops.elementwise import ELEMENTWISE_OPS
from archspec.primitives.ops.embed import EMBED
from archspec.primitives.ops.expand import EXPAND
from archspec.primitives.ops.fold import FOLD
from archspec.primitives.ops.fourier import FOURIER
from archspec.primitives.ops.gather import GATHER
from archspec.primitives.ops.head.classify import CLASSIFY
from archspec.primitives.ops.head.contrastive import CONTRASTIVE
from archspec.primitives.ops.head.distilled import DISTILLED
from archspec.primitives.ops.head.features import FEATURES
from archspec.primitives.ops.head.lm import LM
from archspec.primitives.ops.head.pooler import POOLER
from archspec.primitives.ops.head.reconstruct import RECONSTRUCT
from archspec.primitives.ops.layout import RESIZE, TO_IMAGE, TO_TOKENS, UPSAMPLE
from archspec.primitives.ops.linear import LINEAR
from archspec.primitives.ops.loss.contrastive import CONTRASTIVE_LOSS
from archspec.primitives.ops.loss.cross_entropy import CROSS_ENTROPY
from archspec.primitives.ops.loss.masked_l1 import MASKED_L1
from archspec.primitives.ops.loss.mse import MSE
from archspec.primitives.ops.mask_token import MASK_TOKEN
from archspec.primitives.ops.merge.concat import CONCAT as MERGE_CONCAT
from archspec.primitives.ops.merge.conv import CONV as MERGE_CONV
from archspec.primitives.ops.mlp import MLP
from archspec.primitives.ops.norm.batch import BATCH
from archspec.primitives.ops.norm.group import GROUP
from archspec.primitives.ops.norm.layer import LAYER
from archspec.primitives.ops.norm.rms import RMS
from archspec.primitives.ops.norm.affine import AFFINE
from archspec.primitives.ops.pad import PAD
from archspec.primitives.ops.param import PARAM
from archspec.primitives.ops.patchify import PATCHIFY
from archspec.primitives.ops.pixel_shuffle import PIXEL_SHUFFLE
from archspec.primitives.ops.pool import POOL
from archspec.primitives.ops.rearrange import REARRANGE
from archspec.primitives.ops.reduce import REDUCE
from archspec.primitives.ops.relative_bias import RELATIVE_BIAS
from archspec.primitives.ops.relative_lookup import RELATIVE_LOOKUP
from archspec.primitives.ops.scatter import SCATTER
from archspec.primitives.ops.select import SELECT
from archspec.primitives.ops.slice import SLICE
from archspec.primitives.ops.softmax import SOFTMAX
from archspec.primitives.ops.squeeze_excite import SQUEEZE_EXCITE
from archspec.primitives.ops.tokens import TOKENS
from archspec.primitives.ops.topk import TOPK
from archspec.primitives.ops.unfold import UNFOLD

from ..facts import ONNX_FUSION
from ..modules.attention.sequence import attention_fusion
from ..modules.mlp import onnx_fusion as mlp_fusion

FUSES = {
    # one Attention op per node, unless a score part writes the scores out
    GLOBAL: attention_fusion, CAUSAL: attention_fusion, CROSS: attention_fusion, CLASS: attention_fusion,
    SLIDING: attention_fusion, ALIBI: attention_fusion, DIFFERENTIAL: attention_fusion,
    # one Attention op per node
    WINDOW: "attention", SHIFTED: "attention", SRA: "attention", LINEAR_SRA: "attention", LATENT: "attention",
    POOLED: "attention",  # one Attention op per node (the decomposed positions its bias)
    CHANNEL: "attention", XCA: "attention",  # one Attention op per node, over the heads transposed
    CONVOLUTIONAL: "attention",  # one Attention op per node (the convolutions before it)
    # fc1's bias and a GELU right after it: one BiasGelu (erf) or FastGelu (tanh)
    MLP: mlp_fusion,
}

NO_FUSION = (
    *ELEMENTWISE_OPS.values(), SOFTMAX, REDUCE,
    TO_IMAGE, TO_TOKENS, RESIZE, UPSAMPLE, PAD, POOL, PIXEL_SHUFFLE, REARRANGE,
    CONCAT, SLICE, SELECT, GATHER, SCATTER, ARGSORT, TOPK, MASK_TOKEN, TOKENS, CONSTANT, PARAM, EINSUM,
    EXPAND, UNFOLD, FOLD, FOURIER,
    OUTLOOK,  # a softmax over each place's k x k neighbourhood: no Attention op fits
    NYSTROM,  # three softmaxes over landmarks and an iterative inverse: no Attention op fits
    LINEAR, CONV, CONV_TRANSPOSE, SQUEEZE_EXCITE, EMBED, PATCHIFY, MERGE_CONCAT, MERGE_CONV, RELATIVE_BIAS, RELATIVE_LOOKUP,
    LAYER, RMS, BATCH, GROUP, AFFINE,
    CLASSIFY, CONTRASTIVE, DISTILLED, FEATURES, LM, POOLER, RECONSTRUCT,
    CONTRASTIVE_LOSS, CROSS_ENTROPY, MASKED_L1, MSE,
)

for _op, _fusion in FUSES.items():
    ONNX_FUSION.register(_op, _fusion)
for _op in NO_FUSION:
    ONNX_FUSION.register(_op, None)


def fusion_of(node) -> str | None:
    """The fused ONNX Runtime op an IR node becomes ("attention", "gelu" or None)."""
    fusion = ONNX_FUSION.of(node.op, node)
    return fusion(node.params) if callable(fusion) else fusion
