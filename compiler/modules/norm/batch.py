"""norm kind=batch (torch): nn.BatchNorm2d over an image's channels, nn.BatchNorm1d over a
feature vector's, and over tokens' channels with the tokens as the batch's other axis (as
timm's LeViT flattens them), so the state dict holds torch's own names (weight, bias,
running_mean, running_var, num_batches_tracked). `bias: false`: BatchNormWithoutBias, the same
with no bias tensor."""

from __future__ import annotations

from archspec.primitives.ops.norm.batch import BATCH

import torch.nn as nn

from ...facts import FEATURE_NORM, KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make


class TokenBatchNorm(nn.BatchNorm1d):
    """BatchNorm1d over the channels of tokens [B, N, C]: statistics over B and N, the tokens
    flattened into the batch as timm's LinearNorm does (no transposes: a transposed result
    made torch.compile's aot graphs view what only reshapes, and fail)."""

    def forward(self, x):
        return super().forward(x.flatten(0, 1)).view_as(x)  # [B, N, C] -> [B N, C] -> [B, N, C]


class BatchNormWithoutBias(nn.modules.batchnorm._BatchNorm):
    """A BatchNorm with a weight and no bias (F.batch_norm takes bias=None), over the channels of
    an image [B, C, H, W], a vector [B, C] or, with `tokens`, tokens [B, N, C] (as TokenBatchNorm)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, tokens=False):
        super().__init__(num_features, eps=eps, momentum=momentum)
        self.register_parameter("bias", None)
        self.tokens = tokens

    def reset_parameters(self):
        self.reset_running_stats()
        nn.init.ones_(self.weight)

    def _check_input_dim(self, x):
        pass  # an image, a vector or tokens: the layout was checked before the module was made

    def forward(self, x):
        if self.tokens:
            return super().forward(x.flatten(0, 1)).view_as(x)  # [B, N, C] -> [B N, C] -> [B, N, C]
        return super().forward(x)


@lowering(BATCH)
def lower(p, inputs, ctx):
    x = inputs[0]
    if not p.bias:
        return make(BatchNormWithoutBias, num_features=x.channels, eps=p.eps, momentum=p.momentum,
                    tokens=x.layout == "tokens")
    kind = {"image": nn.BatchNorm2d, "vector": nn.BatchNorm1d, "tokens": TokenBatchNorm}[x.layout]
    return make(kind, num_features=x.channels, eps=p.eps, momentum=p.momentum)


register_facts(BATCH, grid=KEEPS, classifier=None, resample=None)
FEATURE_NORM.register(BATCH, True)
