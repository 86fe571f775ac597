"""Torch pieces shared by the primitives' modules: stochastic depth, the reference
initialisation, LayerNorm, and `make`, which remembers how a module was constructed so that
the standalone model.py can construct it again.

Module classes in compiler/modules/ use only `math`, `torch`, `nn` and `F`, so that their
source can be copied into a standalone model.py.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .activations import NO_ACTIVATION, apply_activation, onednn_activation


class DropPath(nn.Module):
    """Stochastic depth: drop the whole residual branch per sample (identity in eval)."""

    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, x):
        if self.rate == 0.0 or not self.training:
            return x
        keep = 1.0 - self.rate
        mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)  # [B, 1, ..., 1]
        return x * mask / keep


def trunc_normal_linears(module: nn.Module, std: float = 0.02) -> None:
    """timm's init for transformer linears: truncated normal weights, zero biases."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def grid_as_image(x, grid):
    """Tokens on an (H, W) grid read as an image, channels-last (a view): [B, H*W, C] -> [B, C, H, W]."""
    return x.reshape(x.shape[0], grid[0], grid[1], -1).permute(0, 3, 1, 2)  # [B, HW, C] -> [B, C, H, W]


def image_as_tokens(x):
    """An image's cells as tokens (a view where the image is channels-last): [B, C, H, W] -> [B, H*W, C]."""
    return x.flatten(2).transpose(1, 2)  # [B, C, H, W] -> [B, HW, C]


def make(cls, **kwargs) -> nn.Module:
    """Construct a module and remember how, so model.py can construct it again."""
    module = cls(**kwargs)
    module._archspec_args = kwargs
    return module


class LayerScale(nn.Module):
    """A learned per-channel scale of a residual branch (CaiT; timm's `ls1.gamma`)."""

    def __init__(self, dim, init=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x):
        return x * self.gamma


# -- eager CPU inference: prepacked weights and cached constants -----------------------------------
#
# A module may precompute what does not change between calls (a weight reordered for oneDNN, an
# attention mask) only where nothing can observe the difference: eager calls (not torch.compile,
# torch.export, ONNX or jit tracing, which see the plain computation), in eval mode without
# autograd, on plain CPU tensors. The caches live in `_inference_cache` (not parameters or
# buffers: the state dict is unchanged), are keyed by the tensors they derive from (storage,
# version counter, dtype), so that a weight loaded or changed in place is packed again, and are
# left out when the module is pickled or deep-copied.


def eager_inference(module: nn.Module, x) -> bool:
    """Whether this call of `module` on `x` may use precomputed constants (see above)."""
    return (not module.training and type(x) is torch.Tensor and x.device.type == "cpu"
            and not torch.is_grad_enabled() and not torch.jit.is_tracing() and not torch.compiler.is_compiling())


def inference_cache(module: nn.Module) -> dict:
    """The module's cache of constants for eager inference (not part of its state)."""
    cache = module.__dict__.get("_inference_cache")
    if cache is None:
        cache = module.__dict__["_inference_cache"] = {}
    return cache


class TensorKey:
    """What identifies the values of some tensors: the tensor objects themselves (held, so that
    no new tensor can take a freed one's address while the cache entry lives), their storage,
    version counters, dtypes and devices."""

    __slots__ = ("tensors", "state")

    def __init__(self, tensors, state):
        self.tensors, self.state = tensors, state

    def __eq__(self, other) -> bool:
        return (isinstance(other, TensorKey) and self.state == other.state
                and all(a is b for a, b in zip(self.tensors, other.tensors)))

    __hash__ = None


def tensor_key(*tensors):
    """A TensorKey of `tensors`; None when one of them is an inference tensor (no version
    counter: its changes cannot be seen)."""
    state = []
    for t in tensors:
        if t is None:
            state.append(None)
            continue
        if t.is_inference():
            return None
        state.append((t.data_ptr(), t._version, t.dtype, t.device))
    return TensorKey(tensors, tuple(state))


def cached(module: nn.Module, name: str, key, compute):
    """compute(), kept in the module's inference cache under `name` while `key` stays the same."""
    if key is None:
        return compute()
    cache = inference_cache(module)
    entry = cache.get(name)
    if entry is None or entry[0] != key:
        entry = cache[name] = (key, compute())
    return entry[1]


def without_cache(state: dict) -> dict:
    """A module's __dict__ for pickling and deepcopy, without its inference cache."""
    state = dict(state)
    state.pop("_inference_cache", None)
    return state


def onednn_ready(module: nn.Module, x, weight) -> bool:
    """Eager CPU inference in float32 or bfloat16 with oneDNN available and the weight's dtype."""
    return (eager_inference(module, x) and x.dtype in (torch.float32, torch.bfloat16) and weight.dtype == x.dtype
            and torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available())


# Rows (tokens x batch) from which Linear takes oneDNN's packed path; below it F.linear's BLAS
# call is kept. The reason is exactness, not speed: oneDNN sums in another order than MKL, which
# moves BERT-base's pooler output by up to 6e-6, and with that its parity test against Hugging
# Face at 2 x 16 tokens (1e-5) failed at 1.03e-5. The vision models (thousands of rows per
# layer at any batch) are well above the threshold and pass their parity tests on this path.
PACKED_MIN_ROWS = 128


class Linear(nn.Linear):
    """nn.Linear (the same parameters, state dict and results within float rounding). In eager
    CPU inference it runs oneDNN's inner product on the weight reordered once into oneDNN's
    blocked layout (again only when the weight changes): 10-30% faster than F.linear's BLAS call
    on AVX-512 CPUs, and an activation applied to its output (`activate`) is fused into it.
    Everywhere else (training, autograd, torch.compile, torch.export, ONNX, CUDA) it is F.linear."""

    def forward(self, x):
        return self.activate(x, NO_ACTIVATION)

    def activate(self, x, fn: str = NO_ACTIVATION, bias=None):
        """fn(linear(x)) for an activation oneDNN fuses (activations.fusable) or NO_ACTIVATION;
        `bias` replaces the module's."""
        bias = self.bias if bias is None else bias
        ready = onednn_ready(self, x, self.weight) and x.numel() >= PACKED_MIN_ROWS * x.shape[-1]
        key = tensor_key(self.weight) if ready else None
        if key is not None and (bias is None or bias.dtype == x.dtype) and not (self._forward_hooks or
                                                                                 self._forward_pre_hooks):
            packed = cached(self, "weight", key,
                            lambda: torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), 128))
            attr, algorithm = onednn_activation(fn)
            return torch.ops.mkldnn._linear_pointwise(x, packed, bias, attr, [], algorithm)
        return apply_activation(F.linear(x, self.weight, bias), fn)

    def __getstate__(self):
        return without_cache(self.__dict__)


class Conv2d(nn.Conv2d):
    """nn.Conv2d (the same parameters and state dict). In eager CPU inference it calls oneDNN's
    convolution directly, which takes an activation fused into it (`activate`); it keeps the
    memory format of its input (channels-last in, channels-last out). Elsewhere it is F.conv2d."""

    def forward(self, x):
        return self.activate(x, NO_ACTIVATION)

    def activate(self, x, fn: str = NO_ACTIVATION):
        """fn(conv(x)) for an activation oneDNN fuses (activations.fusable) or NO_ACTIVATION."""
        if (onednn_ready(self, x, self.weight) and self.padding_mode == "zeros" and isinstance(self.padding, tuple)
                and x.dim() == 4 and not (self._forward_hooks or self._forward_pre_hooks)
                and (self.bias is None or self.bias.dtype == x.dtype)):
            attr, algorithm = onednn_activation(fn)
            return torch.ops.mkldnn._convolution_pointwise(x, self.weight, self.bias, list(self.padding),
                                                            list(self.stride), list(self.dilation), self.groups,
                                                            attr, [], algorithm)
        return apply_activation(self._conv_forward(x, self.weight, self.bias), fn)
