"""export: a torch.export program with a dynamic batch (and with --size, dynamic image sides),
saved as model.pt2; the first step of the ONNX and TensorRT builds. A decoder-only spec that
generates also gets prefill.pt2 and decode_step.pt2: the decode step with its KV cache, and
the prefill that fills it (decode_step.py); an encoder-decoder spec gets encoder.pt2,
decoder_prefill.pt2 and decoder_step.pt2 (generate/seq2seq_step.py)."""

from __future__ import annotations

from . import register
from .base import ModuleTarget

BF16_LATER = ("a bf16 model.pt2 is not built yet: build --target eager --precision bf16 for the bf16 module, "
              "or time it with `archspec bench SPEC --precision bf16`")


class Export(ModuleTarget):
    name = "export"
    doc = "a torch.export program (model.pt2), dynamic batch, loadable with plain torch"
    artifacts = "+ model.pt2"
    commands = ("build",)
    build_precisions = ("fp32",)
    not_built = {"bf16": BF16_LATER}
    default_for = ("build",)
    dynamic_sizes = True
    order = 30

    def steps(self, precision: str) -> int:
        return 1

    def build(self, context):
        """model.pt2; returns the program (TensorRT reuses it when its batch range is the same).
        Running out of memory while exporting or comparing with eager is a located error."""
        import torch

        from ..decode_step import decode_programs, unwritten_programs
        from ..export import export_program, export_range, gap_at_other_sizes

        sides = context.image_sizes()

        def export():
            program = export_program(context.model, context.graph, export_range(context.batch), sides)
            path = context.path("model.pt2")
            torch.export.save(program, path)
            context.written.append(path)
            if sides is not None:
                check_at_another_side(program, context, sides)
            return program, gap_at_other_sizes(program, context.model, context.graph, context.batch)

        def run():
            try:
                return export()
            except Exception as exc:  # noqa: BLE001 - only an allocation failure is turned into an error here
                from ..out_of_memory import out_of_memory_error, ran_out_of_memory

                if ran_out_of_memory(exc):
                    raise out_of_memory_error("torch.export's run of the model", context.graph, exc,
                                              scores=False) from None
                raise

        what = "dynamic batch" + (f", image sides {sides.said()}" if sides is not None else "")
        title = f"torch.export ({what}) -> model.pt2"
        programs = decode_programs(context.graph)
        unwritten = unwritten_programs(context.graph)
        if unwritten is not None:
            context.notes.append(unwritten)
        if programs is not None:  # and the decode programs, caches in and out (decode_step.py)
            title += ", " + programs.listed()
            whole = run

            def run():
                made = whole()
                paths = [context.path(name) for name in programs.files]
                step_gap = programs.save(context.model, *paths)
                context.written.extend(paths)
                return (*made, step_gap)

        program, gap, *step_gap = context.progress.run(title, run, describe)
        return program


def describe(made) -> str:
    """The build line's detail: how far the program (and the decode step) are from eager, and
    the values eager itself gives as NaN or infinity at the check's random inputs."""
    from ..export import not_finite_note

    gap, scale, (bad, total) = made[1]
    text = f"max |export - eager| {gap:.2e}"
    if scale > 1:  # large outputs: the gap relative to them reads truer
        text += f" ({gap / scale:.1e} of max |eager| {scale:.3g})"
    if bad:  # a random 0/1 mask may hide every key of a row: 0/0 in the model itself
        text += "; " + not_finite_note(bad, total) + (", the program the same there" if gap == gap else "")
    return text + (f", decode programs {made[2]:.2e}" if len(made) > 2 else "")


register(Export())


def check_at_another_side(program, context, sides) -> None:
    """The program exported for a range of image sides, run at another side than the spec's, against
    the spec built at that side: a part that takes its size from the size param (a pool kernel
    `${img // 4}`, a resize size `${img}`) stays the traced size's in the program, which then runs
    at every side with other numbers or shapes than the model's (the UperNet trial: 0.2 to 0.3 off,
    [1, 4, 32, 32] for a 64x64 image). A usage error then. Compared in the model's dtype, within
    1e-4 of the output's scale in fp32 and 2e-2 in bf16 or fp16 (a part of the traced size is off
    by a share of the scale, 0.2 to 0.3 in the trial)."""
    import torch

    from archspec.core.errors import UsageError

    from ..export import example_inputs, max_abs_difference

    own = next(i.type.shape[2] for i in context.graph.inputs() if i.type.layout == "image")
    lo, hi = sides.exported
    side = hi if hi != own else lo
    dtype = next((p.dtype for p in context.model.parameters() if p.is_floating_point()), torch.float32)
    built = context.model_at_size(side)
    built = built.to(dtype) if built is not None else None
    args = tuple(a.to(dtype) if a.is_floating_point() else a for a in example_inputs(context.graph, batch=1, size=side))
    with torch.no_grad():
        got = program.module()(*args)
        want = built(*args) if built is not None else None
    outputs = lambda value: value if isinstance(value, tuple) else (value,)  # noqa: E731
    if want is not None and [o.shape for o in outputs(got)] == [o.shape for o in outputs(want)]:
        gap, scale = max_abs_difference(got, want), max(float(o.float().abs().max()) for o in outputs(want))
        if gap <= (1e-4 if dtype == torch.float32 else 2e-2) * max(1.0, scale):
            return
        what = f"{gap:.2g} off it"
    else:
        what = ("its weights do not fit the model built there" if want is None else
                f"{[list(o.shape) for o in outputs(got)]} where it gives {[list(o.shape) for o in outputs(want)]}")
    raise UsageError(f"{context.graph.name} cannot take a dynamic image size ({sides.said()}): at {side}x{side} the "
                     f"exported program gives other values than the spec built at that size ({what}): a part takes "
                     "its size from a param the image size sets (a pool kernel, a resize size, a slice), and the "
                     "program keeps the traced size's; write that part so it follows the tensor (resize `like: "
                     "true`), or export at one size")
