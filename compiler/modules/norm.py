"""norm (torch): a LayerNorm over the channels."""

from __future__ import annotations

from .common import Emitter, layer_norm, register_lowering


@register_lowering("norm")
def lower(node, inputs, emit: Emitter, args):
    emit.install(layer_norm(node.type.channels, node.params.eps))
    return emit.call("", *args)
