"""What a primitive is: one `Op` object per primitive, or per kind of a primitive, carrying
its parameter model and its rules (JAX's `Primitive` with `def_abstract_eval` is the model:
every rule hangs on the object).

    class Window(AttentionOp):            # archspec/primitives/ops/attention/window.py
        kind = "window"
        Params = WindowParams
        def shape(self, p, inputs, ctx): ...
        def cost(self, p, inputs, out, ctx): ...

    WINDOW = register(Window())

The torch side registers its lowering against the same object from its own file
(archspec/compiler/modules/...), keyed by the object, not a string. Adding a primitive or a
kind is a new file under archspec/primitives/ops/ (found by discovery, registry.py) plus its
torch file; no switch elsewhere names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Protocol, Union

from ..core.declared import Field, Model
from ..core.suggestions import Advice, GridOrigin, InputAdvice, Note, Suggestion
from ..core.types import TensorType

# -- parameter models --------------------------------------------------------------------------


class Params(Model):
    """Base of every primitive's parameters: strict types, unknown keys rejected, frozen
    (core/declared.py; a plugin's op declares its fields with this module's `Field`)."""


class NoParams(Params):  # an op that takes no parameters (add, to_image, ...): any key is unknown
    pass


MAX_SIZE = 1 << 24  # no width, length or count in a sane spec is larger
PositiveInt = Annotated[int, Field(gt=0, le=MAX_SIZE)]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_SIZE)]
PositivePair = Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]
NonNegPair = Annotated[list[NonNegInt], Field(min_length=2, max_length=2)]
PositiveSize = Union[PositiveInt, PositivePair]  # an int (both sides alike) or [h, w]
NonNegSize = Union[NonNegInt, NonNegPair]
Rate = Annotated[float, Field(ge=0.0, lt=1.0, description="a probability in [0, 1)")]
Eps = Annotated[float, Field(gt=0.0, lt=1.0, description="the norm's epsilon (added to the variance, or the mean square)")]
NormPlace = Literal["pre", "post", "res_post", "sandwich", "none"]


def size_pair(value) -> tuple[int, int]:
    """A PositiveSize or NonNegSize as (h, w): an int is the same on both sides."""
    return (value, value) if isinstance(value, int) else (value[0], value[1])


class SublayerParams(Params):
    """A transformer sub-layer with its norm and residual.

    norm: pre      x + drop_path(f(norm(x)))                 ViT, Swin v1, PVT, CLIP, Llama
    norm: post     norm(x + drop_path(f(x)))                 the 2017 Transformer
    norm: res_post x + drop_path(norm(f(x)))                 Swin v2
    norm: sandwich x + drop_path(post_norm(f(norm(x))))      CogView, Gemma 2
    norm: none     x + drop_path(f(x))

    With `layer_scale`, the branch is multiplied by a learned per-channel scale before the
    residual add (LayerScale, CaiT / timm `ls1.gamma`): x + drop_path(gamma * f(norm(x))); with
    `res_scale`, the shortcut x by one (timm MetaFormer's res_scale1); with
    `residual_gate: tanh`, by tanh of one learned number (Mllama's gated cross-attention).
    With `residual: false` the sub-layer returns its branch alone, drop_path(f(norm(x))): a
    parallel block (GPT-J, PaLM) adds two such branches and x with one `add`.
    With `norm_offset` each norm scales by (offset + weight), the weight starting at 1 - offset
    (Gemma's RMSNorm and Nemotron's LayerNorm1P: offset 1); with `norm_bias: false` each LayerNorm
    has a weight alone (MPT, DBRX), with `norm_affine: false` nothing (OLMo); with `branch_scale`
    the branch is multiplied by a fixed number (Granite's residual_multiplier).
    """

    norm: NormPlace = Field("pre", description="where the norm goes: pre, post, res_post, sandwich or none")
    res_post_init: Literal["zeros", "ones"] = Field(
        "zeros", description="norm: res_post: its weight at init: zeros (Swin v2, timm: each block starts as the "
                             "identity) or ones (OLMo 2, as Hugging Face's)")
    norm_kind: Literal["layer", "rms", "affine"] = Field(
        "layer", description="LayerNorm, RMSNorm (weight only), or affine: x * weight + bias, nothing normalised "
                             "(MobileBERT's NoNorm, ResMLP's Affine)")
    norm_eps: Eps = 1e-5
    norm_offset: float = Field(0.0, allow_inf_nan=False, description="scale by (offset + weight), the weight "
                                                                     "starting at 1 - offset (Gemma's RMSNorm, "
                                                                     "Nemotron's LayerNorm1P: 1)")
    norm_bias: bool = Field(True, description="norm_kind: layer: the LayerNorms' bias; false: a weight only "
                                              "(MPT, DBRX; torch's LayerNorm(bias=False))")
    norm_affine: bool = Field(True, description="norm_kind: layer: the LayerNorms' weight and bias; false: neither "
                                                "(OLMo's; torch's elementwise_affine=False)")
    residual: bool = Field(True, description="add the input back; false: return the branch alone (parallel blocks)")
    drop_path: Rate = Field(0.0, description="stochastic depth rate of this residual branch")
    layer_scale: float | None = Field(None, gt=0, description="LayerScale: initial value of a learned per-channel "
                                                              "scale of the branch (e.g. 1e-5); none: no scale")
    res_scale: float | None = Field(None, gt=0, allow_inf_nan=False,
                                    description="initial value of a learned per-channel scale of the shortcut: "
                                                "x * s + branch (timm MetaFormer's res_scale: CAFormer, ConvFormer, "
                                                "PoolFormer v2); state dict `<node>.res_scale.gamma` [C]; none: x")
    branch_scale: float = Field(1.0, allow_inf_nan=False,
                                description="the branch times this fixed number before the residual add (Granite's "
                                            "residual_multiplier; MiniCPM's scale_depth / sqrt(layers))")
    residual_gate: Literal["none", "tanh"] = Field(
        "none", description="tanh: the branch times tanh(g), g one learned number starting at 0, so that the "
                            "sub-layer starts as the identity (Mllama's and Flamingo's gated cross-attention: "
                            "`cross_attn_attn_gate`, `cross_attn_mlp_gate`); state dict `<node>.residual_gate` [1]")

    def check_without_affine(self) -> None:
        """norm_affine: false takes a LayerNorm's weight and bias away: the norm must be a
        LayerNorm (norm: none is check_no_norm_options'), and no option shapes its weight."""
        if self.norm_kind == "rms":
            raise RuleError("norm_affine: false takes the LayerNorm's weight and bias away, but it is a LayerNorm's "
                            "option", field="norm_affine", hint="drop norm_affine")
        for name in ("norm_bias", "norm_offset"):
            if name in self.model_fields_set:
                raise RuleError(f"{name} goes with the norms' weight, and norm_affine: false leaves none",
                                field=name, hint=f"drop {name}, or norm_affine: false")

    def check_no_norm_options(self) -> None:
        """norm: none: no option of the norm is given; all those given are named at once (the
        Moonshine trial met them one fix at a time)."""
        given = [name for name in NORM_OPTIONS if name in self.model_fields_set]
        if given:
            names = " and ".join(given) if len(given) < 3 else ", ".join(given[:-1]) + f" and {given[-1]}"
            verb = "is" if len(given) == 1 else "are"
            raise RuleError(f"{names} {verb} given but norm: none leaves no norm", field=given[0],
                            hint=f"drop {names}, or place a norm (pre, post, ...)")

    def check_structure(self) -> None:
        """RuleError for options that do not go together."""
        if self.norm_kind == "affine":
            for name in ("norm_eps", "norm_offset", "norm_affine"):
                if name in self.model_fields_set:
                    raise RuleError(f"{name} goes with a norm that normalises, and norm_kind: affine is x * weight + "
                                    "bias alone", field=name, hint=f"drop {name}")
        if self.res_scale is not None and not self.residual:
            raise RuleError("res_scale scales the shortcut, and residual: false leaves none", field="res_scale",
                            hint="drop res_scale, or keep the residual")
        if self.norm == "post" and not self.residual:
            raise RuleError("norm: post normalises the residual sum, and residual: false leaves no sum",
                            field="residual", hint="for a branch with its norm after the body use norm: res_post "
                                                   "with residual: false; or keep the residual")
        if self.norm == "none":
            self.check_no_norm_options()
        if self.norm != "res_post" and "res_post_init" in self.model_fields_set:
            raise RuleError(f"res_post_init sets the res_post norm's first weight, and this norm is {self.norm}",
                            field="res_post_init", hint="drop res_post_init, or norm: res_post")
        if not self.norm_affine:
            self.check_without_affine()
        if not self.norm_bias and self.norm_kind == "rms":
            raise RuleError("norm_bias: false takes the LayerNorm's bias away, but an RMSNorm has no bias",
                            field="norm_bias", hint="drop norm_bias")


NORM_OPTIONS = ("norm_kind", "norm_eps", "norm_bias", "norm_affine", "norm_offset")  # a sub-layer's norm's


def sublayer_params(p: SublayerParams, width: int) -> int:
    """Parameters of a sub-layer's norms and LayerScale (its body's are the op's own)."""
    norms = {"pre": 1, "post": 1, "res_post": 1, "sandwich": 2, "none": 0}[p.norm]
    per_norm = 0 if not p.norm_affine else width if p.norm_kind == "rms" or not p.norm_bias else 2 * width  # affine too
    scales = (p.layer_scale is not None) + (p.res_scale is not None)  # LayerScale's and res_scale's [C] each
    return norms * per_norm + scales * width + (p.residual_gate == "tanh")


# -- rule results ------------------------------------------------------------------------------


class RuleError(Exception):
    """A shape or consistency rule failed. `field` names the parameter to point at; `hint` is
    what to do (a `Divides`, `Remedy` or `SizeRemedy`; plain words are a `Note`); `grid`, set
    when the input size bears on the problem, how the grid came about; `input`, the rule's own
    guess at an input size that fits. Together they are the error's `suggestion`."""

    def __init__(self, message: str, hint: str | Advice | None = None, field: str | None = None, *,
                 grid: GridOrigin | None = None, input: InputAdvice | None = None):
        super().__init__(message)
        self.message = message
        advice = Note(hint) if isinstance(hint, str) else hint
        self.suggestion = Suggestion(field, advice, grid, input)

    @property
    def field(self) -> str | None:
        return self.suggestion.field


def not_tokens_hint(x) -> str | None:
    """How to make tokens of what an op that reads tokens was given (an image, a rank-3 tensor)."""
    if x.layout == "image":
        return "patchify the image first, or `to_tokens` for its pixels as tokens"
    if len(x.shape) == 3:
        return "a rearrange with `as: tokens` reads a rank-3 tensor as tokens"
    return None


def not_image_hint(x) -> str:
    """How to make an image of what an op that reads images was given (tokens, a rank-4 tensor)."""
    if x.layout == "tensor" and len(x.shape) == 4:
        return "a rearrange with `as: image` reads a rank-4 tensor as an image ('b c h w -> b c h w')"
    return "to_image turns tokens on a grid into an image"


def check_padding_mask(mask, length, counted: str = "keys") -> None:
    """A key-padding mask is int64 [B, L] (1 keeps, 0 pads), one value per of the `length`
    tokens it masks (`counted`: what they are, in the error)."""
    if mask.layout != "ids":
        computed_ints = mask.layout == "tensor" and len(mask.shape) == 2 and mask.dtype == "int64"
        compare = "`compare: {op: ne, value: 0, dtype: int64}` of it gives 0/1 values [B, L]"
        declare = "declare the mask input `{shape: [B, L], dtype: int64}` (Hugging Face's attention_mask), or "
        hint = None if len(mask.shape) != 2 else compare if computed_ints else declare + compare
        computed = (" (a computed tensor, which may hold any value: a mask is an int64 input [B, L], a slice of "
                    "one, or a `compare` with dtype int64)" if computed_ints else "")
        raise RuleError(f"the padding mask must be int64 0/1 values [B, L] (1 keep, 0 pad), got {mask.layout_name()} "
                        f"{mask.describe()}{computed}", field="from", hint=hint)
    if mask.length != length:
        raise RuleError(f"a padding mask of {mask.length} values for {length} {counted}", field="from")


def require_float(x, what: str, field: str | None = "from") -> None:
    """RuleError unless `x` holds floating-point values: '`what` reads floating-point values'."""
    if x.dtype != "float32":
        raise RuleError(f"{what} reads floating-point values, got {x.layout_name()} of {x.dtype}", field=field)


@dataclass(frozen=True)
class Cost:
    """Per-node cost. FLOPs per sample (batch 1), multiply-add = 2 FLOPs, counting what
    torch.utils.flop_counter.FlopCounterMode counts: matmuls, convolutions and attention
    (Q K^T and A V); norms, activations, softmax and element-wise ops are not counted.
    `buffer_bytes`: the fixed state the module precomputes besides its parameters (sin-cos
    tables, window orders and masks), in bytes: a build allocates it whatever the batch.
    `score_bytes`: the attention score matrices the node computes, float32, per sample (heads x
    queries x keys at the shortest lengths the spec allows; window kinds: summed over the
    windows), in bytes: what a run that spells the attention out (ONNX Runtime's MatMul and
    Softmax) holds, where a fused kernel streams them."""

    params: int
    flops: int
    buffer_bytes: int = 0
    score_bytes: int = 0


def no_cost(op, p, inputs, out, ctx) -> Cost:
    """The cost trait of an op with no parameters and no counted FLOPs (element-wise ops, layout
    changes, pads, pools, interpolations: FlopCounterMode counts none), said by the op itself as
    `cost = no_cost` (or by its family), never assumed: an op that says nothing has no cost rule."""
    return Cost(0, 0)


class RuleContext(Protocol):
    """What a rule may look at besides its parameters and inputs. Shape inference, costing
    and lowering each give one (lowering's adds what it needs to build modules)."""

    @property
    def node(self) -> Any:
        """The IR node the rule runs for (a core.ir.NodeView)."""

    def node_named(self, name: str) -> Any:
        """Another IR node, by path (e.g. the embed a `tie` names)."""

    def readers(self, name: str) -> list[str]:
        """The nodes that read the node `name`."""

    def reader_bounds(self, name: str) -> list[tuple[str, Any]]:
        """(reader, bound) for each node that reads the node `name` as integers it bounds
        (Op.value_range: an embed's vocabulary); shape inference's context has it."""

    def warn(self, message: str, field: str | None = None, hint: str | None = None) -> None:
        """A warning the report carries, located at `field` (the node checks all the same): for
        what is legal and rarely meant."""


# -- the primitive object ----------------------------------------------------------------------


class Op:
    """One primitive, or one kind of a primitive. Subclass it, set the class attributes,
    override the rules, and `register` an instance."""

    primitive: ClassVar[str]  # the op key in a spec: attention, mlp, ...
    kind: ClassVar[str | None] = None  # the `kind` it answers to; None for a primitive without kinds
    Params: ClassVar[type[Params]]
    refs: ClassVar[tuple[str, ...]] = ()  # parameters whose value names another node (`tie`)
    variadic: ClassVar[bool] = False  # reads its last input any number of times (concat)
    plugin: str | None = None  # the plugin that registered it (set by the registry); None: built in
    default: ClassVar[bool] = False  # the kind a node gets when it gives no `kind`
    objective: ClassVar[bool] = False  # a loss: lives under `objectives:`, not part of forward
    moves_batch: ClassVar[bool] = False  # its shape rule sets the output's batch (a rearrange folding axes into B)
    # more to say of an unknown key on this op than which other kinds take it (global attention's `window`:
    # sliding is causal; a window both ways is the local_window score part)
    key_hints: ClassVar[dict[str, str]] = {}
    # what other libraries call this kind, and whose word it is: an unknown kind that is one of them is
    # told this kind (GPT-Neo's `local` is sliding, which a did-you-mean would make `global`)
    also_called: ClassVar[dict[str, str]] = {}

    def one_grid(self, p) -> str | None:
        """What a node of this op keeps that is made for the grid it was built for (a table, a
        mask, an index), in words, or None: why an export with a dynamic image size fails."""
        return None

    @property
    def label(self) -> str:
        """`attention/window`; `norm` for a primitive without kinds or for its default kind."""
        return f"{self.primitive}/{self.kind}" if self.kind and not self.default else self.primitive

    @property
    def doc(self) -> str:
        return (type(self).__doc__ or "").strip()

    def __repr__(self) -> str:
        return f"<op {self.label}>"

    # -- rules -------------------------------------------------------------------------------
    def reads(self, p) -> tuple[str, ...]:
        """Names of the inputs the node reads, given its params (one per `from` entry; with
        `variadic`, the last name may be given any number of times, at least once)."""
        return ("x",)

    def named_inputs(self, p) -> dict[int, tuple[str, str]]:
        """Inputs an option names (a score part's `embeddings: rel`): slot in `from:` -> (the node
        named, the option's dotted field). The expander checks that `from:` gives that node there."""
        return {}

    def more_inputs_hint(self, p, count: int) -> str | None:
        """What option makes the op read the inputs a node gives beyond those it reads (an
        attention's `bias: true`), for the input-count error's hint; None: none does."""
        return None

    def reads_problem(self, p) -> "RuleError | None":
        """What in `p` keeps reads() from knowing every input (a malformed option that names
        inputs, as a score part's): said before an input count that follows from it."""
        return None

    def accepts(self, p, count: int) -> bool:
        """Whether the node may read `count` inputs."""
        names = self.reads(p)
        return count >= len(names) if self.variadic else count == len(names)

    def shape(self, p, inputs: list[TensorType], ctx: RuleContext) -> TensorType:
        """The output type, or RuleError."""
        raise NotImplementedError(f"{self.label} has no shape rule")

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx: RuleContext) -> Cost:
        raise NotImplementedError(f"{self.label} has no cost rule")

    def value_range(self, p, slot: int, ctx: RuleContext) -> int | None:
        """For an integer input at `slot`: the values it may hold are 0 .. this - 1 (an embed's
        vocabulary). Example inputs for export are drawn from it. None: no bound."""
        return None
