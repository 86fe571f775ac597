"""What a built spec is: an `ArchspecModel`, a torch.fx.GraphModule whose forward computes the
spec's outputs from its inputs, with the interface training code written for timm expects
(written once in model_interface.py, which a build's standalone model.py carries verbatim):

    forward_features(*inputs, output_fmt=None)     the network before its head: [B, H, W, C] for a
                                                   hierarchical grid model (Swin, PVT v2), as timm's
                                                   Swin; tokens [B, N, C] for others (output_fmt="NLC"
                                                   gives the tokens of any model; "NCHW" too)
    forward_head(x, pre_logits=False)              the head, on features in any of those formats
    num_classes, reset_classifier(num_classes)     a classify (or distilled) head
    no_weight_decay()                              positions, tokens, tables, scales, norms, biases
    group_matcher(coarse=False)                    layer ids for layer-wise lr decay
    set_grad_checkpointing(True)                   activation checkpointing per block
    forward_intermediates(*inputs, indices=...)    per-stage features, images [B, C, H, W]

A spec with several outputs returns them, in eager, as a `ModelOutput`: a tuple (out[0],
`a, b = out`) that also answers by name as Hugging Face's (out["last_hidden_state"],
out.last_hidden_state); under torch.compile and torch.export forward gives the plain tuple, so
exported programs and ONNX files are as before. The standalone model.py carries this class
verbatim and answers the same (compiler/backends/source.py).

and the spec's objectives (`objectives:`), computed by `loss` / `losses`, never by forward:
they read forward's outputs and the inputs and targets, and add no parameters.

What these methods need from the spec (which node is the head, which modules are blocks and
stages) is recorded at lowering in a `ModelFacts` (interface.py), `self.facts`.

Calling the model refuses an input outside its declared shape (a sequence longer than its
dim's range, an image of another size, another rank) with a ValueError naming the input, what
the spec declares and where (`InputShape`, input_check.py, recorded at lowering in meta["archspec_inputs"]).
The batch is not checked. The check is a few integer comparisons, made in eager only: under
torch.compile and torch.export (`torch.compiler.is_compiling()`) it is skipped, and the
exported program keeps its own guards (the dims' ranges).
"""

from __future__ import annotations

import functools

import torch
import torch.fx
import torch.utils._pytree

from .generate import generate as generate_tokens
from .input_check import InputShape, check_input_shapes, inputs_in_order
from .interface import ModelFacts, interface_facts
from .model_interface import InterfaceFacts, ModelInterface


def input_shapes(graph) -> tuple[InputShape, ...]:
    """Each model input's declared shape (for ArchspecModel's check), from the IR."""
    from archspec.core.types import Sym

    shapes = []
    for node in graph.inputs():
        t = node.type
        checks, symbols = [], {}
        batched = bool(t.shape) and isinstance(t.shape[0], Sym) and t.shape[0].name == "B"
        for index, d in enumerate(t.shape):
            if isinstance(d, Sym):
                if d.name == "B":
                    continue
                checks.append((index, d.lo, d.hi))
                symbols[index] = d.name
            else:
                checks.append((index, d, d))
        loc = node.loc
        shapes.append(InputShape(node.name, len(t.shape), tuple(checks), symbols,
                                 ", ".join(str(d) for d in t.shape), f"{loc.file}:{loc.line}" if loc else "",
                                 t.layout in ("ids", "tokens"), t.layout == "ids", batched,
                                 vocabulary(graph, node.name) if t.layout == "ids" else None))
    return tuple(shapes)


def vocabulary(graph, name: str) -> int | None:
    """The fewest values the readers of the ids input `name` take (readers_bounds: an embed's
    vocabulary), or None where none bounds them."""
    from archspec.primitives.infer import readers_bounds

    return min((bound for _, bound in readers_bounds(graph, name) if isinstance(bound, int)), default=None)


class ModelOutput(tuple):
    """Forward's outputs of a spec with several: a tuple (out[0], `a, b = out`, len, iteration,
    what exports and older code take) that also answers by the outputs' names, as Hugging Face's
    ModelOutput: out["last_hidden_state"], out.last_hidden_state, keys(), items(), to_tuple().
    Eager only: under torch.compile and torch.export forward gives the plain tuple (the exported
    program's outputs stay a tuple; ONNX's are positional with these names)."""

    def __new__(cls, values, names):
        out = super().__new__(cls, values)
        object.__setattr__(out, "_names", tuple(names))
        return out

    def __getitem__(self, key):
        if isinstance(key, str):
            try:
                return tuple.__getitem__(self, self._names.index(key))
            except ValueError:
                raise KeyError(f"{key!r}: the model's outputs are {', '.join(self._names)}") from None
        return tuple.__getitem__(self, key)

    def __getattr__(self, name):
        names = object.__getattribute__(self, "_names")
        if name in names:
            return tuple.__getitem__(self, names.index(name))
        raise AttributeError(f"{name!r}: the model's outputs are {', '.join(names)}")

    def __setattr__(self, name, value):
        raise AttributeError("a model's outputs are read-only (a tuple)")

    def __reduce__(self):
        return ModelOutput, (tuple(self), self._names)

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={_summary(v)}" for n, v in zip(self._names, self))
        return f"ModelOutput({fields})"

    def __contains__(self, key) -> bool:  # by name, as a dict (HF's ModelOutput); values by `in tuple(out)`
        return key in self._names if isinstance(key, str) else tuple.__contains__(self, key)

    def keys(self) -> tuple:
        return self._names

    def values(self) -> tuple:
        return tuple(self)

    def items(self) -> tuple:
        return tuple(zip(self._names, self))

    def to_tuple(self) -> tuple:
        return tuple(self)


def _summary(value) -> str:
    shape = getattr(value, "shape", None)
    return f"Tensor{list(shape)}" if shape is not None else repr(value)


def _output_flatten(out):
    return list(out), out._names


def _output_unflatten(values, names):
    return ModelOutput(values, names)


torch.utils._pytree.register_pytree_node(  # DDP, FSDP and torch.utils' tree maps see through it, as through HF's
    ModelOutput, _output_flatten, _output_unflatten,
    serialized_type_name="archspec.compiler.model.ModelOutput")


IMAGENET_MEAN = (0.485, 0.456, 0.406)  # timm's IMAGENET_DEFAULT_MEAN and _STD, the defaults of pretrained_cfg
IMAGENET_STD = (0.229, 0.224, 0.225)


class ArchspecModel(ModelInterface, torch.fx.GraphModule):
    """A built spec (see the module docstring); the timm-style methods come from ModelInterface."""

    def __call__(self, *args, **kwargs):
        if torch.compiler.is_compiling():
            return super().__call__(*args, **kwargs)
        given = self._in_order(args, kwargs)
        self.check_inputs(given)
        try:
            out = super().__call__(*args, **kwargs)
        except IndexError as exc:  # torch's "index out of range in self" for an id beyond the table
            self._explain_token_ids(given, exc)
            raise
        facts = self.__dict__.get("meta", {}).get("archspec")
        names = facts.outputs if facts is not None else ()
        if type(out) is tuple and len(names) == len(out) > 1:  # several outputs: by name too (ModelOutput)
            return ModelOutput(out, names)
        return out

    def _in_order(self, args, kwargs) -> tuple:
        """The inputs given, in the spec's order (input_check.inputs_in_order)."""
        return inputs_in_order(self.__dict__.get("meta", {}).get("archspec_inputs", ()), args, kwargs)

    def check_inputs(self, args) -> None:
        """ValueError for an input outside the shape its spec declares (input_check.check_input_shapes)."""
        check_input_shapes(self.__dict__.get("meta", {}).get("archspec_inputs", ()), args)

    def _explain_token_ids(self, args, exc: IndexError) -> None:
        """ValueError in words, from `exc`, where a token-id input holds an id outside the token table."""
        tables = [m.tokens.num_embeddings for m in self.modules()  # embed's token tables (modules/embed.py)
                  if isinstance(getattr(m, "tokens", None), torch.nn.Embedding)]
        for declared, x in zip(self.__dict__.get("meta", {}).get("archspec_inputs", ()), args):
            if not (declared.ids and isinstance(x, torch.Tensor) and x.numel()):
                continue
            rows = declared.vocab if declared.vocab is not None else min(tables, default=None)  # its readers' tables
            if rows is None:
                continue
            wrong = x[(x < 0) | (x >= rows)]
            if wrong.numel():
                where = f" ({declared.where})" if declared.where else ""
                raise ValueError(f"input '{declared.name}' holds token id {int(wrong[0])}, outside the vocabulary of "
                                 f"{rows:,} ids (0..{rows - 1}){where}") from exc

    @property
    def facts(self) -> ModelFacts:
        """What the model knows of its spec, written at lowering (kept in meta for pickling)."""
        return self.meta["archspec"]

    # -- timm's data config ------------------------------------------------------------------------
    @property
    def pretrained_cfg(self) -> dict:
        """timm's `pretrained_cfg` of a model that takes an image (an input [B, C, H, W] of fixed
        size), as timm.data.resolve_model_data_config reads it: input_size (C, H, W) as built
        (img=32 gives (3, 32, 32)), timm's defaults for the rest (ImageNet mean and std, bicubic,
        crop_pct 0.9) unless the build says otherwise (meta["archspec_data_cfg"], what a spec's
        `pretrained_cfg:` key declares, archspec/models.py), num_classes of the classifier (0:
        none). An AttributeError for a model without an image input (hasattr is False)."""
        image = next((s for s in self.__dict__.get("meta", {}).get("archspec_inputs", ())
                      if s.rank == 4 and not s.ids and not s.symbols), None)
        if image is None:
            raise AttributeError("pretrained_cfg: this model takes no image input [B, C, H, W] of a fixed size")
        size = {index: lo for index, lo, _ in image.checks}
        try:
            classes = self.num_classes
        except TypeError:  # no classifier head
            classes = 0
        cfg = {"input_size": (size[1], size[2], size[3]), "mean": IMAGENET_MEAN, "std": IMAGENET_STD,
               "interpolation": "bicubic", "crop_pct": 0.9, "crop_mode": "center", "num_classes": classes}
        cfg.update(self.meta.get("archspec_data_cfg", {}))
        return cfg

    @pretrained_cfg.setter
    def pretrained_cfg(self, cfg: dict) -> None:
        """timm's code sets it too (a dict whose keys then win over the computed ones)."""
        self.meta["archspec_data_cfg"] = dict(cfg)

    default_cfg = pretrained_cfg  # timm's older name for it

    # -- the model folder --------------------------------------------------------------------------
    def save_pretrained(self, save_directory) -> None:
        """The model folder (as Hugging Face's save_pretrained): the spec with its params as
        resolved, the weights as model.safetensors, config.json and a model card README.md
        (compiler/pretrained.py); archspec.from_pretrained(DIR) builds it again."""
        import os

        from .pretrained import save_folder

        save_folder(self, os.fspath(save_directory))

    # -- generation ---------------------------------------------------------------------------------
    # New tokens after `input_ids`, as Hugging Face's generate: greedy, sampled or beam search, with a
    # KV cache, processors, stopping criteria, a streamer, scores (compiler/generate/search.py,
    # docs/generate.md); its signature and docstring are search.generate's, every argument by name.
    @functools.wraps(generate_tokens)
    def generate(self, *args, **kwargs):
        from . import generate as generation  # looked up at each call (a test may put another in its place)

        return generation.generate(self, *args, **kwargs)

    # -- objectives ---------------------------------------------------------------------------------
    def loss(self, *args):
        """The total training loss, given the model's inputs and then the spec's targets."""
        return self.losses(*args)["loss"]

    def losses(self, *args) -> dict:
        """{objective name: value, ..., "loss": the weighted total}, given the inputs then the targets."""
        facts = self.facts
        count = len(facts.inputs)
        if self.__dict__.get("_objective") is None:
            raise TypeError("this model declares no objectives (a spec's `objectives:` section), so it has no loss: "
                            "add one (e.g. `loss: {kind: cross_entropy}` over the head and a target), or compute "
                            "the loss from forward's output yourself")
        if len(args) != count + len(facts.targets):
            raise TypeError(f"loss takes the inputs ({', '.join(facts.inputs)}) and the targets "
                            f"({', '.join(facts.targets) or 'none'}): {count + len(facts.targets)} tensors, "
                            f"got {len(args)}")
        return self.losses_from(self(*args[:count]), *args)

    def losses_from(self, outputs, *args) -> dict:
        """The objectives from forward's `outputs` (e.g. of a DDP- or FSDP-wrapped forward),
        given the inputs then the targets."""
        objective = self.__dict__.get("_objective")
        if objective is None:
            raise TypeError("this model declares no objectives (a spec's `objectives:` section)")
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        distinct = list(dict.fromkeys(self.facts.output_nodes))
        by_node = dict(zip(self.facts.output_nodes, outputs))
        values = objective(*(by_node[n] for n in distinct), *args)
        return {**dict(zip(self.facts.objectives, values[1:])), "loss": values[0]}

    # -- the timm-style interface (model_interface.py, shared with model.py) ------------------------------
    @property
    def _interface_facts(self) -> InterfaceFacts:
        """The plain values the interface methods read, from `facts`."""
        return interface_facts(self.facts)

    def _head_input(self, *inputs):
        """forward up to what the head reads: its tokens [B, N, C]."""
        features = self.__dict__.get("_features")
        if features is None:
            graph = graph_to_head(self)
            if graph is None:
                return super()._head_input(*inputs)  # a TypeError saying why there is none
            features = self.__dict__["_features"] = torch.fx.GraphModule(self, graph)
        if not torch.compiler.is_compiling():
            self.check_inputs(inputs)
        return features(*inputs)


def graph_to_head(gm: torch.fx.GraphModule) -> torch.fx.Graph | None:
    """The root graph up to the classifier head's call, returning what the head is called with
    (None: no head, or the root does not call it). Lowering makes the same graph when the head
    reads a top-level node (lower.features_graph); this one also serves a head that reads a node
    inside a group (PVT v2's stages.3.norm), and model.py's `_head_input`."""
    facts = gm.meta.get("archspec")
    if facts is None or facts.head is None:
        return None
    call = next((n for n in gm.graph.nodes if n.op == "call_module" and n.target == facts.head.path), None)
    if call is None or not call.args:
        return None
    graph, env = torch.fx.Graph(), {}
    for node in gm.graph.nodes:
        if node is call:
            break
        env[node] = graph.node_copy(node, lambda a: env[a])
    graph.output(env[call.args[0]])
    graph.owning_module = gm  # for eliminate_dead_code's purity check of module calls
    graph.eliminate_dead_code()
    return graph
