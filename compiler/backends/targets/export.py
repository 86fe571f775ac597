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
            program = export_program(context.model, context.graph, export_range(context.batch), sides,
                                     built_at=context.model_at_size)
            path = context.path("model.pt2")
            torch.export.save(program, path)
            context.written.append(path)
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

