"""The primitive registry: one entry per primitive, gathering its parameter model, its shape
rule and its cost rule (the torch side registers its module and lowering separately, in
compiler/modules/). Adding a primitive means adding a file and registering it; registering a
name twice is an error, never a silent overwrite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .types import TensorType

# -- shared parameter pieces -----------------------------------------------------------------


class Params(BaseModel):
    """Base of every primitive's parameters: strict types, unknown keys rejected, frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


MAX_SIZE = 1 << 24  # no width, length or count in a sane spec is larger
PositiveInt = Annotated[int, Field(gt=0, le=MAX_SIZE)]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_SIZE)]
Rate = Annotated[float, Field(ge=0.0, lt=1.0, description="a probability in [0, 1)")]
Eps = Annotated[float, Field(gt=0.0, lt=1.0, description="LayerNorm epsilon")]
NormPlace = Literal["pre", "post", "res_post", "none"]


class Sublayer(Params):
    """A transformer sub-layer with its norm and residual.

    norm: pre      x + drop_path(f(norm(x)))      ViT, Swin v1, PVT, CLIP
    norm: post     norm(x + drop_path(f(x)))      the 2017 Transformer
    norm: res_post x + drop_path(norm(f(x)))      Swin v2
    norm: none     x + drop_path(f(x))
    """

    norm: NormPlace = Field("pre", description="where the LayerNorm goes: pre, post, res_post or none")
    norm_eps: Eps = 1e-5
    drop_path: Rate = Field(0.0, description="stochastic depth rate of this residual branch")


# -- rule results ------------------------------------------------------------------------------


class RuleError(Exception):
    """A shape or consistency rule failed. `field` names the parameter to point at."""

    def __init__(self, message: str, hint: str | None = None, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.field = field


@dataclass(frozen=True)
class Cost:
    """Per-node cost. FLOPs per sample (batch 1), multiply-add = 2 FLOPs, counting what
    torch.utils.flop_counter.FlopCounterMode counts: matmuls, convolutions and attention
    (Q K^T and A V); norms, activations, softmax and element-wise ops are not counted."""

    params: int
    flops: int


def linear_flops(tokens: int, fan_in: int, fan_out: int) -> int:
    return 2 * tokens * fan_in * fan_out


def linear_params(fan_in: int, fan_out: int, bias: bool = True) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def attention_flops(queries: int, keys: int, width: int) -> int:
    """Q K^T and A V over all heads: 2 * 2 * Lq * Lk * C."""
    return 4 * queries * keys * width


def divisors(n: int) -> list[int]:
    """Divisors of n, ascending; O(sqrt(n))."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def trace_text(x: TensorType) -> str:
    """' (image 240 / patch 4 / merge 2)': how a grid came about, for error messages."""
    return f" ({' / '.join(x.trace)})" if x.trace else ""


def suggest_input(x: TensorType, grid: int, multiple: int) -> str:
    """' or an input of 224': the nearest square image whose grid here is a multiple of `multiple`."""
    if not x.trace or not x.trace[0].startswith("image ") or "x" in x.trace[0]:
        return ""
    image = int(x.trace[0].split()[1])
    if image % grid:
        return ""
    step = image // grid * multiple
    candidates = [k * step for k in (image // step, image // step + 1) if k > 0]
    best = min(candidates, key=lambda s: (abs(s - image), s))
    return f" or an input of {best}"


def norm_params(width: int) -> int:
    return 2 * width


# -- the registry ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Primitive:
    name: str
    params: Any  # a Params subclass, or an Annotated union discriminated by `kind`
    infer: Callable[..., TensorType]  # (params, inputs: list[TensorType], ctx) -> TensorType
    cost: Callable[..., Cost]  # (params, inputs, output) -> Cost
    input_names: Callable[[Any], tuple[str, ...]]  # names of the inputs it reads, given params
    doc: str = ""

    def adapter(self) -> TypeAdapter:
        return _adapter(self.name)


PRIMITIVES: dict[str, Primitive] = {}
_ADAPTERS: dict[str, TypeAdapter] = {}


def register(primitive: Primitive) -> Primitive:
    if primitive.name in PRIMITIVES:
        raise RuntimeError(f"primitive {primitive.name!r} is registered twice")
    PRIMITIVES[primitive.name] = primitive
    return primitive


def _adapter(name: str) -> TypeAdapter:
    if name not in _ADAPTERS:
        _ADAPTERS[name] = TypeAdapter(PRIMITIVES[name].params)
    return _ADAPTERS[name]


def one_input(_params) -> tuple[str, ...]:
    return ("x",)


def kinds_of(params_type) -> list[str] | None:
    """The `kind` values of a discriminated union of parameter models, if it is one."""
    if not getattr(params_type, "__metadata__", None):
        return None
    union = params_type.__origin__
    return [get_args(m.model_fields["kind"].annotation)[0] for m in get_args(union)]


def hidden_width(width: int, hidden: int | None, ratio: float | None) -> int:
    """Hidden width of an MLP, as timm computes it: int(dim * mlp_ratio)."""
    if hidden is not None:
        return hidden
    return int(width * ratio)
