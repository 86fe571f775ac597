"""torch.export backend: an ExportedProgram with a dynamic batch (and dynamic sequence
lengths where the spec declares ranges), saved as .pt2 and loadable with plain torch.

The batch range is the caller's (`archspec build --batch MIN:OPT:MAX`, default 1:8:64).
Optionally (`size_range`) the height and width of the image inputs are dynamic too, each any
multiple of `step` from `min` to `max` (`SizeRange`; the face takes the range and step from
the size solver, archspec/sizes.py, so that every size in it passes the checker). The lowered
modules hold their token grid as plain numbers (`grid`; `in_grid` for a patch embedding that
reads tokens as an image); while tracing, a forward around the model's sets each to the grid
the input's symbolic size gives, so the program computes every grid from the input. Only some
architectures are truly size-free: PVT v2 (no position embedding; convolutions, sr-attention,
depthwise-conv MLPs) exports this way; learned or sin-cos position embeddings (ViT, DeiT, CLIP,
PVT v1) and Swin's shifted-window masks fix the grid, and export says so.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping

import torch

from archspec.core.errors import InternalError, UsageError
from archspec.core.ir import Graph
from archspec.core.types import Sym
from archspec.primitives.infer import readers_bounds

from ..facts import KEEPS, TOKEN_GRID

EXAMPLE_BATCH = 2  # not 0 or 1, which torch.export would specialise on


def example_inputs(graph: Graph, batch: int = EXAMPLE_BATCH, longest: bool = False,
                   lengths: Mapping[str, int] | None = None, size=None) -> tuple[torch.Tensor, ...]:
    """One tensor per graph input: random images/tokens, and integer inputs drawn from the whole
    range their readers accept (an embed's vocabulary). Symbolic lengths are `lengths[name]`, else
    short (8), or with `longest` as long as they may be (what costs are for). `size` gives images
    another height and width: N (square) or (H, W)."""
    generator = torch.Generator().manual_seed(0)
    tensors = []
    for node in graph.inputs():
        shape = [batch] + [_example_size(d, longest, lengths or {}) for d in node.type.shape[1:]]
        if size is not None and node.type.layout == "image":
            shape[2:] = [size, size] if isinstance(size, int) else list(size)
        if node.type.dtype == "int64":
            tensors.append(torch.randint(0, value_bound(graph, node.name), shape, generator=generator))
        else:
            tensors.append(torch.randn(shape, generator=generator))
    return tuple(tensors)


def other_lengths(graph: Graph) -> dict[str, int]:
    """Sizes for the symbolic lengths that differ from the traced ones (8) and from each other:
    running an export at these shows that its lengths really are dynamic."""
    names = sorted(graph.dims.keys() - {"B"})
    return {name: min(graph.dims[name].hi, max(graph.dims[name].lo, 5 + 6 * i)) for i, name in enumerate(names)}


def _example_size(dim, longest: bool, lengths: Mapping[str, int]) -> int:
    if not isinstance(dim, Sym):
        return dim
    if longest:
        return dim.hi
    return lengths.get(dim.name, min(dim.hi, max(dim.lo, 8)))


def value_bound(graph: Graph, input_name: str) -> int:
    """Integer inputs hold 0 .. this - 1: the smallest bound its readers' ops state
    (Op.value_range: an embed's vocabulary), or 2 when none states one."""
    return min((bound for _, bound in readers_bounds(graph, input_name)), default=2)


@dataclass(frozen=True)
class SizeRange:
    """Image heights and widths from `min` to `max` that are multiples of `step` (each side on
    its own: 224x288 is in 32:320 step 32)."""

    min: int
    max: int
    step: int = 1

    def __post_init__(self):
        if not 1 <= self.step <= self.max or not 1 <= self.min <= self.max:
            raise UsageError(f"a size range needs 1 <= MIN <= MAX and 1 <= STEP <= MAX, got {self}")
        lo, hi = self.steps
        if max(lo, 2) >= hi:  # torch.export needs two sizes or more, and specialises on one step
            raise UsageError(f"a dynamic size needs two multiples of {self.step} or more between {self.min} and "
                             f"{self.max} (and beyond {self.step}); export at one size instead")

    @property
    def steps(self) -> tuple[int, int]:
        """The range of size // step."""
        return -(-self.min // self.step), self.max // self.step

    def example(self, preferred: int) -> int:
        """A size to trace with: `preferred` when it is in the range, else one near it; never
        one step (torch.export would specialise on 1)."""
        lo, hi = self.steps
        k = min(max(round(preferred / self.step), lo, 2), hi)
        return k * self.step

    def __str__(self) -> str:
        return f"{self.min}:{self.max}" + (f" step {self.step}" if self.step > 1 else "")

    @property
    def exported(self) -> tuple[int, int]:
        """The least and most side the program takes: one step is never dynamic (torch.export
        specialises on 1), so its least is two steps where the range starts at one."""
        lo, hi = self.steps
        return max(lo, 2) * self.step, hi * self.step

    def said(self) -> str:
        """The sides the program takes, in words."""
        lo, hi = self.exported
        return f"{lo} to {hi}" + (f", multiples of {self.step}" if self.step > 1 else "")


def dynamic_shapes(graph: Graph, batch_range: tuple[int, int] | None = None,
                   size_range: SizeRange | None = None) -> dict:
    """torch.export dynamic_shapes: B (and declared symbolic dims) per input; with `size_range`
    also the height and width of every image input (step * a Dim, one per side)."""
    dims: dict[str, torch.export.Dim] = {}
    spec = {}
    for node in graph.inputs():
        axes = {}
        for axis, d in enumerate(node.type.shape):
            if isinstance(d, Sym):
                lo, hi = (batch_range if d.name == "B" and batch_range else (d.lo, d.hi))
                if d.name not in dims:
                    dims[d.name] = torch.export.Dim(_dim_name(d.name), min=lo, max=hi)
                axes[axis] = dims[d.name]
        if size_range is not None and node.type.layout == "image":
            for axis, side in ((2, "height"), (3, "width")):
                if side not in dims:
                    lo, hi = size_range.steps
                    steps = torch.export.Dim(f"{side}_steps", min=max(lo, 2), max=hi)
                    dims[side] = steps * size_range.step if size_range.step > 1 else steps
                axes[axis] = dims[side]
        spec[node.name] = axes
    return spec


def _dim_name(name: str) -> str:
    return "batch" if name == "B" else name


def export_program(gm: torch.fx.GraphModule, graph: Graph, batch_range: tuple[int, int] | None = None,
                   size_range: SizeRange | None = None, built_at=None) -> torch.export.ExportedProgram:
    """The model as an ExportedProgram: dynamic batch; with `size_range`, dynamic image height and
    width too (UsageError when the model fixes its grid). `built_at(side)`: the spec built at
    another image side with gm's weights (None where they do not fit), which the program must
    match there (`archspec build --size` gives it)."""
    gm.eval()
    if size_range is None:
        args = example_inputs(graph)
        with torch.no_grad():
            program = torch.export.export(gm, args, dynamic_shapes=dynamic_shapes(graph, batch_range), strict=False)
        return with_spec_frames(program, graph)
    images = [i for i, node in enumerate(graph.inputs()) if node.type.layout == "image"]
    if not images:
        raise UsageError(f"{graph.name} has no image input: a size range applies to images")
    own = graph.inputs()[images[0]].type.shape[2]
    if not size_range.min <= own <= size_range.max:  # the build checks the program against eager at its own size
        raise UsageError(f"{graph.name}'s image is {own}x{own}, outside the size range {size_range}: the build "
                         f"compares the program with the model at its own size; give a range that holds {own}, or "
                         f"--set the spec's image size into {size_range}")
    args = example_inputs(graph, size=size_range.example(own))
    sized = _sized(gm, graph, images[0])
    try:
        with torch.no_grad():
            program = torch.export.export(sized, args, dynamic_shapes=dynamic_shapes(graph, batch_range, size_range),
                                          strict=False)
    except (UsageError, InternalError):  # InternalError: an op without its TOKEN_GRID fact
        raise
    except Exception as exc:  # noqa: BLE001 - torch's guard and tracing errors, said plainly
        raise UsageError(f"{graph.name} cannot take a dynamic image size ({size_range}): torch.export finds its "
                         f"model fixed to one grid ({_first_line(exc)}); {why_one_grid(graph, size_range)}") from exc
    finally:
        sized.restore()
    _runs_at_another_size(program, graph, size_range, size_range.example(own))
    if built_at is not None:
        lo, hi = size_range.exported
        _same_as_built(program, gm, graph, size_range, hi if hi != own else lo, built_at)
    if size_range.step > 1:
        guard_steps(program, [graph.inputs()[i].name for i in images], size_range)
    return with_spec_frames(program, graph)


def guard_steps(program, names: list[str], size_range: SizeRange) -> None:
    """Each image side a multiple of the step, asserted in the program's graph: torch.export binds
    a side of `step * Dim` to a side that is no multiple without a word (torch 2.14), and the
    program then ran at sizes the spec refuses, with other numbers than the model's (the FocalNet
    trial: 0.11 off at 40 in a range of step 8)."""
    import operator

    graph = program.graph_module.graph
    placeholders = {node.name: node for node in graph.nodes if node.op == "placeholder"}
    step, (lo, hi) = size_range.step, size_range.exported
    for name in names:
        anchor = image = placeholders[name]
        for axis, side in ((2, "height"), (3, "width")):
            with graph.inserting_after(anchor):
                size = graph.call_function(torch.ops.aten.sym_size.int, (image, axis))
            with graph.inserting_after(size):
                left = graph.call_function(operator.mod, (size, step))
            with graph.inserting_after(left):
                whole = graph.call_function(operator.eq, (left, 0))
            with graph.inserting_after(whole):
                anchor = graph.call_function(torch.ops.aten._assert_scalar.default, (whole, (
                    f"{name}'s {side} must be a multiple of {step} from {lo} to {hi} (the sizes its spec passes)")))
            symbolic = image.meta["val"].shape[axis]  # step * s
            size.meta["val"], left.meta["val"] = symbolic, symbolic % step
            whole.meta["val"], anchor.meta["val"] = (symbolic % step) == 0, None
    program.graph_module.recompile()


def _runs_at_another_size(program, graph: Graph, size_range: SizeRange, traced: int) -> None:
    """torch.export may keep a size fixed by a runtime assertion instead of failing (a learned
    position table for 197 tokens): run the program once at another size to find out."""
    lo, hi = size_range.steps
    other = next((k * size_range.step for k in range(max(lo, 2), hi + 1) if k * size_range.step != traced), None)
    if other is None:
        return
    try:
        with torch.no_grad():
            program.module()(*example_inputs(graph, batch=1, size=other))
    except Exception as exc:  # noqa: BLE001 - a guard of the program, said plainly
        raise UsageError(f"{graph.name} cannot take a dynamic image size ({size_range}): the exported program runs "
                         f"only at {traced}x{traced} ({_first_line(exc)}); {why_one_grid(graph, size_range)}") from exc


def _same_as_built(program, gm, graph: Graph, size_range: SizeRange, side: int, built_at) -> None:
    """The program at image side `side` (another than the spec's own) against the spec built at
    that side, `built_at(side)`: a part that takes its size from the size param (a pool kernel
    `${img // 4}`, a resize size `${img}`) stays the traced size's in the program, which then runs
    at every side with other numbers or shapes than the model's (the UperNet trial: 0.2 to 0.3
    off, [1, 4, 32, 32] for a 64x64 image). A usage error then. Compared in the model's dtype,
    within 1e-4 of the output's scale in fp32 and 2e-2 in bf16 or fp16 (such a part is off by a
    share of the scale)."""
    dtype = next((p.dtype for p in gm.parameters() if p.is_floating_point()), torch.float32)
    args = tuple(a.to(dtype) if a.is_floating_point() else a for a in example_inputs(graph, batch=1, size=side))
    built = built_at(side)
    outputs = lambda value: value if isinstance(value, tuple) else (value,)  # noqa: E731
    with torch.no_grad():
        got = program.module()(*args)
        want = built.to(dtype)(*args) if built is not None else None
    if want is not None and [o.shape for o in outputs(got)] == [o.shape for o in outputs(want)]:
        gap, scale = max_abs_difference(got, want), max(float(o.float().abs().max()) for o in outputs(want))
        if gap <= (1e-4 if dtype == torch.float32 else 2e-2) * max(1.0, scale):
            return
        what = f"{gap:.2g} off it"
    else:
        what = ("its weights do not fit the model built there" if want is None else
                f"{[list(o.shape) for o in outputs(got)]} where it gives {[list(o.shape) for o in outputs(want)]}")
    raise UsageError(f"{graph.name} cannot take a dynamic image size ({size_range.said()}): at {side}x{side} the "
                     f"exported program gives other values than the spec built at that size ({what}): a part takes "
                     "its size from a param the image size sets (a pool kernel, a resize size, a slice), and the "
                     "program keeps the traced size's; write that part so it follows the tensor (resize `like: "
                     "true`), or export at one size")


def why_one_grid(graph: Graph, size_range: SizeRange) -> str:
    """Why a program keeps one grid, in words: a grid of one row or column at the range's smaller
    sizes (torch.export specialises a size of 1, the ConvNeXt V2 trial's last stage below 64 px),
    with the least size from which none is; else what the spec makes for one grid."""
    lo, hi = size_range.steps
    thin = [k * size_range.step for k in range(max(lo, 1), hi + 1) if _one_wide(graph, k * size_range.step)]
    if not thin:
        return f"{one_grid_parts(graph)}: export it at one size instead"
    node, grid = _one_wide(graph, thin[0])
    wider = [k * size_range.step for k in range(max(lo, 1), hi + 1) if k * size_range.step > thin[-1]]
    fix = f"start the range at {wider[0]} (--size {wider[0]}:{size_range.max})" if len(wider) > 1 else \
        "export it at one size instead"
    return (f"at {thin[0]}x{thin[0]} the grid of '{node}' is {grid[0]}x{grid[1]}, and torch.export keeps no size of "
            f"1 dynamic: {fix}")


def _one_wide(graph: Graph, side: int) -> tuple[str, tuple] | None:
    """The first node whose grid (or image size) has a side of 1 at an image of `side`, or None."""
    try:
        grids = grids_for(graph, (side, side))
    except Exception:  # noqa: BLE001 - a size the spec's ops do not take: not this question's
        return None
    return next(((name, grid) for name, grid in grids.items() if grid is not None and 1 in tuple(grid)), None)


def one_grid_parts(graph: Graph) -> str:
    """What in `graph` is made for one grid (each op's `one_grid`), each with the first node that has it."""
    found: dict[str, str] = {}
    for node in graph.nodes():
        what = None if node.is_input else node.op.one_grid(node.params)
        if what is not None:
            found.setdefault(what, node.name)
    if not found:
        sized = [node.name for node in graph.nodes()
                 if not node.is_input and node.op.primitive == "rearrange" and getattr(node.params, "sizes", None)]
        if sized:  # the Idefics3 trial's pixel shuffle: 'b (h sh w sw) c -> ...' with sizes h and w of one grid
            return ("a part of it is made for one grid; perhaps a rearrange whose `sizes` fix an axis the image's "
                    f"size sets ({', '.join(sized[:3])}{', ...' if len(sized) > 3 else ''})")
        return "a part of it is made for one grid (a position table, a mask, an index)"
    return "made for one grid here: " + ", ".join(f"{what} ({name})" for what, name in found.items())


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


class _SizedModel(torch.nn.Module):
    """The model for tracing with a dynamic image size: the same modules, parameters and
    buffers under the same names, and a forward that first gives each grid-holding module the
    grid the image's (symbolic) size gives, then runs the model's own forward code.

    (torch.export traces neither forward hooks nor a forward patched on a GraphModule: it
    needs a module of its own. The grids are restored afterwards, by `restore`.)"""

    def __init__(self, gm: torch.nn.Module, graph: Graph, image_slot: int):
        super().__init__()
        for name, module in gm.named_children():
            self.add_module(name, module)
        for name, param in gm.named_parameters(recurse=False):
            self.register_parameter(name, param)
        for name, buffer in gm.named_buffers(recurse=False):
            self.register_buffer(name, buffer)
        self.__dict__["graph"], self.__dict__["slot"] = graph, image_slot
        self.__dict__["code"] = type(gm).forward
        self.__dict__["saved"] = {}
        for node in graph.nodes():
            module = _submodule(self, node.name)
            if module is not None and getattr(module, "grid", None) is not None:
                self.saved[node.name] = (module, module.grid, getattr(module, "in_grid", None))

    def set_grids(self, image) -> None:
        grids = grids_for(self.graph, (image.shape[2], image.shape[3]))
        for name, (module, _, _) in self.saved.items():
            node = self.graph.node(name)
            if hasattr(module, "in_grid"):  # a patch embedding: its output grid, and the grid it reads
                module.grid = grids[name]
                if module.in_grid:
                    module.in_grid = grids[node.inputs[0]]
            else:  # every other module holds the grid of what it reads
                module.grid = grids[node.inputs[0]]

    def restore(self) -> None:
        for module, grid, in_grid in self.saved.values():
            module.grid = grid
            if in_grid is not None:
                module.in_grid = in_grid


def _sized(gm: torch.nn.Module, graph: Graph, image_slot: int) -> _SizedModel:
    """A _SizedModel whose forward has the model's own signature (export matches inputs by name)."""
    code = type(gm).forward

    @functools.wraps(code)
    def forward(self, *args, **kwargs):
        self.set_grids(args[self.slot])
        return self.code(self, *args, **kwargs)

    cls = type(f"Sized{type(gm).__name__}", (_SizedModel,), {"forward": forward})
    return cls(gm, graph, image_slot)


def _submodule(root: torch.nn.Module, name: str):
    try:
        return root.get_submodule(name)
    except AttributeError:
        return None


def grids_for(graph: Graph, size) -> dict:
    """Each node's token grid for an image of `size` (H, W), which may be symbolic; for an image
    node, its height and width (an image's spatial size is its grid here: a patchify or a
    to_tokens reading it needs it). Each op maps its first input's grid by its TOKEN_GRID fact
    (compiler/facts.py: patchify, merge, conv, upsample, pixel_shuffle by their geometry; KEEPS
    for an op that passes the grid on). An op without the fact fails naming it. An image whose
    size export cannot follow (a 1x1 image from a reduce, an op that changes the size but says
    KEEPS) gets None, and fails only when a node that needs a grid reads it (UsageError naming
    the op that lost the size)."""
    grids: dict = {}
    lost: dict[str, str] = {}  # image nodes without a followed size -> the node that lost it
    for node in graph.nodes():
        if node.is_input:
            grids[node.name] = tuple(size) if node.type.layout == "image" else node.type.grid
            continue
        rule = TOKEN_GRID.of(node.op, node)
        if _spatial(node.type) is None:
            grids[node.name] = None
        elif node.type.layout == "image":
            grids[node.name] = _image_size(graph, node, rule, grids, lost)
        else:
            _not_lost(graph, node, lost)
            if rule == KEEPS:
                grids[node.name] = _kept_grid(graph, node, grids)
            else:
                grids[node.name] = rule(node.params, grids.get(node.inputs[0]))
    return grids


def _spatial(t) -> tuple | None:
    """A type's (H, W) as the checker sees it: its token grid, or an image's height and width."""
    if t is None:
        return None
    if t.grid:
        return tuple(t.grid)
    return tuple(t.shape[2:]) if t.layout == "image" else None


def _image_size(graph: Graph, node, rule, grids: dict, lost: dict):
    """The (H, W) of an image node for its first input's (H, W) in `grids`: by its rule, or kept;
    None (the node recorded in `lost`) where the rule, applied to the checked sizes, does not
    give the node's checked size (the op changes it in a way export does not follow)."""
    source = grids.get(node.inputs[0]) if node.inputs else None
    if source is None:
        lost[node.name] = lost.get(node.inputs[0], node.name) if node.inputs else node.name
        return None
    before, after = _spatial(graph.type_of(node.inputs[0])), _spatial(node.type)
    if rule == KEEPS:
        follows = before == after
    else:
        try:
            follows = tuple(rule(node.params, before)) == after
        except Exception:  # noqa: BLE001 - a rule that cannot map this input: export does not follow it
            follows = False
    if not follows:
        lost[node.name] = node.name
        return None
    return source if rule == KEEPS else tuple(rule(node.params, source))


def _not_lost(graph: Graph, node, lost: dict) -> None:
    """UsageError when the node's first input is an image whose size export does not follow."""
    if node.inputs and node.inputs[0] in lost:
        culprit = graph.node(lost[node.inputs[0]])
        raise UsageError(f"{graph.name} cannot take a dynamic image size: {node.name} ({node.op.label}) reads "
                         f"{node.inputs[0]}, whose height and width {culprit.name} ({culprit.op.label}) changes "
                         "in a way export does not follow")


def _kept_grid(graph: Graph, node, grids: dict):
    """The grid of the node's first input that has the output's (a token grid, or an image's
    height and width): an element-wise op's output keeps the grid of whichever input carries it
    (a `multiply` of a param and tokens, in either order). UsageError where none has it."""
    for name in node.inputs:
        if _spatial(graph.type_of(name)) is not None and _spatial(graph.type_of(name)) == _spatial(node.type):
            return grids.get(name)
    raise UsageError(f"{graph.name} cannot take a dynamic image size: {node.name} ({node.op.label}) "
                     "changes the grid in a way export does not follow")


def with_spec_frames(program: torch.export.ExportedProgram, graph: Graph) -> torch.export.ExportedProgram:
    """Add to every exported op's stack trace a frame 'File "<spec>", line N, in <node path>' for
    the spec node it came from (read from the module stack torch.export records): later passes
    (TensorRT's lowering, decompositions) drop the module stack but keep stack traces, so a
    failure there can still be located at the spec."""
    from ..lower import locate, module_paths_of

    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        path, loc = locate(graph, None, module_paths_of(node))
        if path is not None and loc is not None:
            frame = f'  File "{loc.file}", line {loc.line}, in {path}\n'
            node.meta["stack_trace"] = (node.meta.get("stack_trace") or "").rstrip("\n") + "\n" + frame
    return program


def max_abs_difference(a, b) -> float:
    """The largest |a - b| over all outputs, where equal values (the same infinity) and NaN in
    both at one place agree; NaN if one side alone is NaN there (max() would hide it)."""
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    if len(a) != len(b):
        raise ValueError(f"{len(a)} outputs compared with {len(b)}")
    return float(torch.stack([agreement_gap(x.float(), y.float()) for x, y in zip(a, b)]).max())


def agreement_gap(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """max |x - y| (a 0-d tensor), 0 where both are the same value or both NaN."""
    same = (x == y) | (torch.isnan(x) & torch.isnan(y))
    gaps = (x - y).abs().masked_fill(same, 0.0)
    return gaps.max() if gaps.numel() else torch.zeros(())


def not_finite(outputs) -> tuple[int, int]:
    """(values that are NaN or infinite, all values) over all outputs."""
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return (sum(int((~torch.isfinite(x.float())).sum()) for x in outputs), sum(x.numel() for x in outputs))


def not_finite_note(bad: int, total: int) -> str:
    """What a build line says when eager itself gives NaN or infinity on the check's random inputs."""
    return (f"eager itself gives NaN or infinity at {bad} of {total} output values on the check's random inputs "
            "(float inputs are normal noise, int64 ones any value their readers take: a float input the model "
            "reads as a 0/1 mask or a scale, or a row whose every key is hidden, can give them)")


def export_range(batch) -> tuple[int, int] | None:
    """model.pt2's batch range for a BatchRange: the range itself when torch.export can trace it
    (a real range holding the example batch); else None, the spec's own dynamic batch."""
    lo, hi = batch.min, batch.max
    return (lo, hi) if lo < hi and lo <= EXAMPLE_BATCH <= hi else None


def largest_magnitude(outputs) -> float:
    """max |x| over the ordinary values of all outputs, what a gap between two runs is measured
    against: finite, and below half their dtype's largest (a logit masked with float32's lowest,
    Chameleon's image tokens, made any gap look small: the ONNX check accepted 1e-3 of 3.4e38)."""
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return max((ordinary_largest(x) for x in outputs if x.numel()), default=0.0)


def ordinary_largest(x: torch.Tensor) -> float:
    limit = torch.finfo(x.dtype).max / 2 if x.is_floating_point() else float("inf")
    values = x.float().abs()
    values = values[torch.isfinite(values) & (values < limit)]
    return float(values.max()) if values.numel() else 0.0


def gap_at_other_sizes(program, gm, graph: Graph, batch) -> tuple[float, float, tuple[int, int]]:
    """Run the exported program at another batch size (and lengths) than it was traced with, against
    eager: (max |export - eager|, max |eager|, (eager's values that are NaN or infinite, all))."""
    lo, hi = export_range(batch) or (graph.dims["B"].lo, graph.dims["B"].hi)
    size = EXAMPLE_BATCH + 1 if EXAMPLE_BATCH + 1 <= hi else lo
    args = example_inputs(graph, batch=size, lengths=other_lengths(graph))
    with torch.no_grad():
        eager = gm(*args)
        return max_abs_difference(program.module()(*args), eager), largest_magnitude(eager), not_finite(eager)
