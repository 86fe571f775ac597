"""The spec document's structure as declared models (core/declared.py; validation.py turns
their errors into located, plain-language diagnostics).

Nodes of `graph` and of blocks are validated in expand (a node's op may be a user's block,
and its parameters may hold `${...}` expressions that are evaluated first); this module
validates everything around them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from ..core.declared import Field, Model

FORMAT_VERSION = 1
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
NAME_RULE = "letters, digits and _, not starting with a digit"
Name = Annotated[str, Field(pattern=IDENTIFIER)]  # a key that names something: letters, digits, _


class StrictSpecModel(Model):
    model_config = {"populate_by_name": True}  # `from_` is also found by its alias `from`


class InputDecl(StrictSpecModel):
    shape: list[Union[int, str]] = Field(
        description="[B, ...]: integers, `B`, a dim declared under `dims`, or an expression over params")
    dtype: Literal["float32", "int64"] = "float32"
    grid: list[Union[int, str]] | None = Field(
        None, description="tokens input: the (H, W) grid the tokens lie on: integers or expressions over params, as "
                          "`shape`'s")


class BlockDef(StrictSpecModel):
    doc: str = ""
    params: dict[Name, Any] = Field(default_factory=dict,
                                    description="parameters with defaults; a null default means required")
    inputs: list[Name] = Field(default_factory=lambda: ["x"], min_length=1,
                               description="names the block's nodes read its inputs by")
    graph: list[dict[str, Any]] = Field(min_length=1)


class InsertEdit(StrictSpecModel):
    before: str | None = Field(None, description="path of the base node to insert before")
    after: str | None = Field(None, description="path of the base node to insert after")
    nodes: list[dict[str, Any]] = Field(min_length=1, description="the nodes to insert")


class ParamType(StrictSpecModel):
    """What values a param may take (`param_types:`)."""

    type: Literal["int", "float", "bool", "str", "list"] | None = Field(None, description="the param's type")
    choices: list[Any] | None = Field(None, min_length=1, description="the values it may take")
    doc: str = ""


class FixedArg(StrictSpecModel):
    fixed: Any = Field(description="the one value of the keyword the spec is built for (it has no param for it)")


class DataConfig(StrictSpecModel):
    """timm's data config of the network the spec is (`pretrained_cfg:`): what a built image
    model's pretrained_cfg gives timm.data.resolve_model_data_config."""

    mean: list[float] | None = Field(None, min_length=1, description="per-channel mean the inputs are normalised by")
    std: list[Annotated[float, Field(gt=0)]] | None = Field(
        None, min_length=1, description="per-channel standard deviation the inputs are divided by")
    interpolation: Literal["nearest", "bilinear", "bicubic", "box", "hamming", "lanczos"] | None = Field(
        None, description="how images are resized")
    crop_pct: Annotated[float, Field(gt=0)] | None = Field(None, description="centre crop's share of the resized side")
    crop_mode: Literal["center", "squash", "border"] | None = Field(None, description="timm's crop mode")


class SpecDoc(StrictSpecModel):
    archspec: Literal[1] = Field(FORMAT_VERSION, description="spec format version")
    name: str = Field(pattern=IDENTIFIER)
    doc: str = ""
    extends: str | None = Field(None, description="path of a spec this one starts from (relative to this file)")
    params: dict[Name, Any] = Field(default_factory=dict, description="named values, usable anywhere as ${name}")
    param_types: dict[Name, ParamType] = Field(
        default_factory=dict, description="params' types and allowed values: norm: {type: str, choices: [layer, "
                                          "batch]}")
    timm_args: dict[Name, Union[Name, FixedArg]] = Field(
        default_factory=dict, description="timm.create_model's keywords this spec takes: the param each sets, or "
                                          "{fixed: VALUE} for one the spec is built for only")
    pretrained_cfg: DataConfig | None = Field(
        None, description="timm's data config of the reference: {mean: [...], std: [...], interpolation: bicubic, "
                          "crop_pct: 0.9}")
    dims: dict[Name, list[Union[int, str]]] = Field(
        default_factory=dict, description="symbolic sizes with their range, e.g. S: [1, 512] (bounds may be "
                                          "expressions over params)")
    inputs: dict[Name, Union[InputDecl, list[Union[int, str]]]] = Field(min_length=1)
    blocks: dict[Name, BlockDef] = Field(default_factory=dict)
    graph: list[dict[str, Any]] = Field(min_length=1)
    outputs: Union[list[str], dict[Name, str], None] = Field(
        None, description="nodes the compiled module returns (default: the last node)")
    targets: dict[Name, Union[InputDecl, list[Union[int, str]]]] = Field(
        default_factory=dict, description="training targets the objectives read (after the inputs, in model.loss)")
    objectives: list[dict[str, Any]] = Field(
        default_factory=list, description="training losses: nodes of op `loss` reading outputs, inputs and targets")
    requires: list[Name] = Field(
        default_factory=list, description="plugins this spec needs: names of installed archspec plugins")
    mappings: list[str] = Field(
        default_factory=list, description="weight mapping files (relative to the file that names them) that map "
                                          "reference checkpoints onto this model")
    remove: list[str] = Field(default_factory=list, description="with extends: paths of base nodes to remove")
    replace: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="with extends: base node path -> the node that takes its place")
    insert: list[InsertEdit] = Field(default_factory=list,
                                       description="with extends: nodes to insert before or after a base node")



META_KEYS = ("id", "from", "repeat", "as", "share", "weights_of", "if", "unused", "doc")
GROUP = "graph"  # the op key of an inline group of nodes (and the key of the top-level graph)


class NodeMeta(StrictSpecModel):
    """The keys of a graph node besides its op."""

    id: str | None = Field(None, pattern=IDENTIFIER, description="name of the node (its path segment)")
    from_: Union[str, list[str], None] = Field(None, alias="from", description="node(s) this node reads")
    repeat: Union[int, str, None] = Field(None, description="repeat the node N times, chained")
    as_: str | None = Field(None, alias="as", pattern=IDENTIFIER, description="name of the repeat index (default i)")
    share: bool | None = Field(None, description="with `repeat`: every copy uses the first copy's weights (one "
                                                 "set of parameters, applied N times: ALBERT)")
    weights_of: str | None = Field(None, description="path of another node whose weights this one uses (same op "
                                                     "and parameters: one linear applied to two inputs)")
    if_: Union[bool, str, None] = Field(None, alias="if", description="keep the node only if this is true")
    unused: Union[bool, str, None] = Field(
        None, description="true (or an expression ${...} giving it): kept for its parameters and never called, as a "
                          "module the reference builds and its forward never calls (an unused pooler, a mask token): "
                          "no warning, and an error if an output depends on it")
    doc: str | None = None
