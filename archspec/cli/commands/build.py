"""`archspec build`: check, lower, load weights, export, and write the artifacts, showing
progress as it goes.

The artifacts are written into a staging folder and put in place at the end, in one step
(artifacts.py): OUTDIR holds exactly one complete build, the previous one until the new one
is done. Interrupted (Ctrl-C, SIGTERM), a build removes its staging folder, leaves OUTDIR as
it was and exits with 130 (SIGINT) or 143 (SIGTERM).

Writes into OUTDIR (default build/<name>/):
  manifest.json the files this build wrote, and what made them
  report.json   the check report (shapes, params, FLOPs per node), and under "build" the
                spec's path and sha256, the overrides, the archspec and torch versions;
                with --target onnx, under "onnx" what model.onnx holds (variant, opset,
                op domains, node count, fused ops), read back from the file
  report.html   the same as a page: the graph's picture, params and FLOPs per stage, the node table
  model.py      standalone readable source of the module (needs torch and safetensors), headed by the same
  model.safetensors  its state dict (safetensors; tied names once, compiler/safetensors_file.py)
  config.json, SPEC.yaml, README.md  with model.safetensors a model folder: the spec (and the files
                it extends and the mappings it names, from its folder), its params as resolved, a
                model card (params, FLOPs, reference, deviation, targets); archspec.from_pretrained(OUTDIR)
                builds it again (compiler/pretrained.py)
  model.pt2     torch.export program, dynamic batch           (--target export, onnx, tensorrt)
                (with --size MIN:MAX: dynamic image height and width too)
  model.onnx    ONNX, dynamic batch, fused for ONNX Runtime    (--target onnx)
                (opset 23: one Attention op per attention; --plain-onnx: opset 18,
                attention spelled out, for other runtimes)
  model.int8.onnx  its linear layers quantized to int8           (--target onnx --precision int8)
  precision.json   the deviation of a bf16 or int8 build from fp32 (--precision bf16, int8)
  model.engine  serialized TensorRT engine                    (--target tensorrt)
  tensorrt.json the engine's bindings, shape profile, versions (--target tensorrt)
  model.trt.pt2 torch-tensorrt program, on a CUDA machine      (--target tensorrt)
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field

from ... import __version__
from ...budget import check_build_memory
from ...compiler.backends import targets
from ...compiler.backends.targets.base import BuildContext
from ...core.errors import UsageError
from ...core.types import BATCH
from ...core.files import read_regular_file
from ...language.limits import MAX_TEXT_BYTES
from ...pipeline import check_file
from ...report import human
from ..artifacts import OutputDir
from ...core.output import print_warnings
from ..progress import Progress
from .common import (add_spec_arguments, batch_sizes, checked_seed, overrides_of, require_cuda, size_range,
                     spec_path)

EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal, as shells report it

BASE_STEPS = 3  # progress lines of every build: check, lower, write report.json, model.py, model.safetensors; the
# targets (compiler/backends/targets/) add theirs


@dataclass
class BuildOptions:
    spec: str
    overrides: dict | None = None
    out: str | None = None
    target: str = field(default_factory=lambda: targets.default("build"))
    seed: int = 0
    weights: str | None = None
    mapping: str | None = None  # --map: one more weight mapping file
    precision: str = "fp32"
    batch: str | None = None
    size: str | None = None  # --size MIN:MAX: dynamic image sides in model.pt2
    as_json: bool = False
    plain_onnx: bool = False  # --plain-onnx: model.onnx is the opset 18 export, not the optimised one
    calibration: str | None = None  # --calibration random|DIR: int8 static quantization calibrated on it
    device: str = "cpu"  # --device cuda: the artifact compiled for the GPU (a target with cuda in build_devices)


class Interrupted(BaseException):
    """SIGINT or SIGTERM, raised where the build is (a BaseException, like KeyboardInterrupt, so
    that no `except Exception` on the way swallows it)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def signals_handled(handler):
    """SIGINT and SIGTERM go to `handler` inside (in the main thread; elsewhere the default
    actions stay), and back to what they were after."""
    try:
        previous = {signum: signal.signal(signum, handler) for signum in EXIT_SIGNAL}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)


def signals_raise(received: list):
    """SIGINT and SIGTERM raise Interrupted in the main thread while the build runs, and are
    noted in `received`: a library that swallows the exception (some catch BaseException) does
    not make the build carry on as if nothing had happened."""
    def on_signal(signum, frame):
        received.append(signum)
        raise Interrupted(signum)

    return signals_handled(on_signal)


def signals_ignored():
    """SIGINT and SIGTERM are ignored inside (the clean-up after the first one)."""
    return signals_handled(signal.SIG_IGN)


class LineStream:
    """stderr for the progress lines, knowing whether a line is left open (a step under way)."""

    def __init__(self, stream):
        self.stream, self.at_line_start = stream, True

    def write(self, text: str) -> int:
        if text:
            self.at_line_start = text.endswith("\n")
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


@dataclass
class Build:
    """One run of `archspec build`: the steps in order, each a method."""

    options: BuildOptions
    written: list[str] = field(default_factory=list)
    output: OutputDir | None = None

    def run(self) -> int:
        self.stream = LineStream(sys.stderr)
        self.received: list[int] = []
        with signals_raise(self.received):
            try:
                return self.steps()
            except Interrupted as exc:
                signum = exc.signum
            except KeyboardInterrupt:
                signum = signal.SIGINT
            finally:
                with signals_ignored():  # a second Ctrl-C does not cut the clean-up short
                    if self.output is not None:
                        self.output.discard()
            with signals_ignored():
                return self.interrupted(signum)

    def stop_if_signalled(self) -> None:
        """Between steps: a signal whose exception something on the way swallowed (some libraries
        catch BaseException) stops the build here rather than let the next step run."""
        if self.received:
            raise Interrupted(self.received[0])

    def interrupted(self, signum) -> int:
        """The one line an interrupted build ends with; OUTDIR holds the previous build (or none)."""
        if not self.stream.at_line_start:
            print(" interrupted", file=self.stream, flush=True)
        name = signal.Signals(signum).name
        if self.output is not None and self.output.committed:
            where = f"the build was complete: {self.output.target} holds it"
        elif self.output is not None and os.path.isdir(self.output.target):
            where = f"{self.output.target} holds the previous build, unchanged"
        elif self.output is not None:
            where = f"{self.output.target} was not created"
        else:
            where = "nothing was written"
        print(f"archspec build: interrupted by {name}; {where}", file=sys.stderr, flush=True)
        return EXIT_SIGNAL[signum]

    def steps(self) -> int:
        o = self.options
        self.check_options()
        if o.out:  # a folder that cannot be written is a usage error before any work
            self.output = OutputDir.prepare(o.out)
        for target in self.chain:  # what to install, before any work
            target.preflight()
        own = (1 if o.weights else 0) + (1 if o.precision == "bf16" else 0)
        steps = BASE_STEPS + own + sum(target.steps(o.precision) for target in self.chain)
        self.progress = Progress(steps, stream=self.stream, after_step=self.stop_if_signalled)
        self.spec_sha256 = spec_sha256(o.spec)
        self.check()
        if self.output is None:
            self.output = OutputDir.prepare(os.path.join("build", self.report.name))
        self.lower()
        if o.weights:
            self.load_weights()
        self.model.eval()
        if o.precision == "bf16":
            self.to_bf16()
        self.write_artifacts()
        self.stop_if_signalled()
        self.files = self.output.commit(self.provenance())
        for note in self.output.notes:
            print(f"note: {note}", file=sys.stderr)
        self.summary()
        return 0

    def check_options(self) -> None:
        """Usage errors in the options, before any work."""
        o = self.options
        checked_seed(o.seed)
        self.batch = batch_sizes(o.batch)
        self.target = build_target(o.target)
        self.chain = targets.chain(self.target)
        self.check_device()
        reason = self.target.build_problem(o.precision, o.device)
        if reason:
            raise UsageError(f"--precision {o.precision} with --target {o.target}: {reason}")
        if o.size is not None and not self.target.dynamic_sizes:
            sized = " or ".join(t.name for t in targets.targets("build") if t.dynamic_sizes)
            raise UsageError(f"--size gives model.pt2 dynamic image sides: it goes with --target {sized} "
                             "(the other targets are built at the spec's own size)")
        self.size_bounds = size_range(self.options.size, "--size") if self.options.size is not None else None
        if o.calibration is not None:
            self.check_calibration()
        if o.plain_onnx and "onnx" not in (target.name for target in self.chain):
            raise UsageError(f"--plain-onnx picks which model.onnx --target onnx writes; --target {o.target} "
                             "writes no model.onnx (use --target onnx)")

    def check_device(self) -> None:
        """--device cuda: a target that compiles for the GPU, and a GPU torch can see."""
        device = self.options.device
        if device == "cpu":
            return
        if device not in self.target.build_devices:
            able = " or ".join(t.name for t in targets.targets("build") if device in t.build_devices)
            raise UsageError(f"--device {device}: --target {self.target.name} takes no --device; --target {able} "
                             f"compiles for the GPU (--target tensorrt builds on the GPU it finds by itself)")
        require_cuda(f"--device {device}")

    def write_artifacts(self) -> None:
        """Every artifact of the target, into the staging folder: every build's own, then the
        target's and those of the targets it needs, each after what it needs."""
        o = self.options
        self.outdir = self.progress.writes_to = self.output.staging
        self.progress.writes_shown = self.output.shown
        self.progress.run(f"write report.json, model.py, model.safetensors to {self.output.shown}", self.write_sources)
        context = BuildContext(self.model, self.graph, self.outdir, o.precision, self.batch, o.size,
                               self.image_sizes, self.model_at_size, self.progress, self.written,
                               plain_onnx=o.plain_onnx, calibration=o.calibration, device=o.device)
        for target in self.chain:
            context.made[target.name] = target.build(context)
            for line in context.notes:
                print(f"note: {line}", file=sys.stderr)
            context.notes.clear()
        self.add_target_sections(context.made)
        self.write_card()

    def add_target_sections(self, made: dict) -> None:
        """report.json gets a section per target whose build result describes what it wrote
        (a `report_entry()`: the onnx target's "onnx"), once those files are written."""
        sections = {name: result.report_entry() for name, result in made.items()
                    if callable(getattr(result, "report_entry", None))}
        if not sections:
            return
        path = os.path.join(self.outdir, "report.json")
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
        report.update(sections)
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(report, indent=2))

    def provenance(self) -> dict:
        """What made this build: the spec and its hash, the overrides, the options, the versions.
        Paths as the user named them when relative, else relative to the build folder ("spec_file":
        always relative to it): never an absolute path of the user's machine."""
        import torch

        o, out = self.options, self.output
        weights = out.recorded(o.weights) if isinstance(o.weights, str) else o.weights
        return {"spec": out.recorded(o.spec), "spec_file": out.relative(o.spec), "spec_sha256": self.spec_sha256,
                "overrides": dict(o.overrides or {}), "target": o.target, "seed": o.seed, "weights": weights,
                "precision": o.precision, "size": o.size, "device": o.device, "archspec": __version__,
                "torch": torch.__version__}

    def check_calibration(self) -> None:
        """--calibration makes int8 static: it goes with --precision int8 and names `random` or a folder."""
        from ...compiler.backends.calibration import check_source

        if self.options.precision != "int8":
            raise UsageError("--calibration calibrates int8 static quantization: it goes with --precision int8 "
                             "(and --target onnx)")
        check_source(self.options.calibration)

    # -- steps -------------------------------------------------------------------------------
    def check(self) -> None:
        o = self.options
        self.report = self.progress.run(f"check {o.spec}", lambda: check_file(o.spec, o.overrides),
                                        lambda r: f"{r.params:,} params, {human(r.flops)}FLOPs {r.flops_basis}")
        self.graph = self.progress.graph = self.report.graph
        print_warnings(self.report.warnings)  # what `check` warns of, a build says too
        self.image_sizes()  # --size that the spec cannot take: said before anything is built (ViTPose, YOLOS trials)
        if o.calibration is not None:
            from ...compiler.backends.calibration import check_fits

            check_fits(self.graph, o.calibration)

    def lower(self) -> None:
        from ...compiler.lower import lower

        check_build_memory(self.report, runs_model=any(target.runs_model for target in self.chain),
                           scores=any(target.materializes_scores for target in self.chain))
        seed = self.options.seed
        self.model = self.progress.run("make the torch module", lambda: lower(self.graph, seed=seed),
                                       lambda m: f"{len(self.report.nodes):,} spec nodes in {torch_modules(m):,} "
                                                 f"torch modules, initial weights from seed {seed}")

    def load_weights(self) -> None:
        from ...compiler.weights.load import load_weights

        weights, mappings = self.options.weights, [self.options.mapping] if self.options.mapping else []
        self.fit = self.progress.run(f"load weights {weights}",
                                     lambda: load_weights(self.model, weights, self.graph, mappings),
                                     lambda fit: fit.summary())

    def to_bf16(self) -> None:
        """The module in bf16 (model.py, model.safetensors), its deviation from fp32 measured and kept."""
        from ...compiler.backends.precision import apply_precision

        def run():
            return apply_precision(self.model, self.graph, "bf16", target=self.options.target,
                                   device=self.options.device)

        result = self.progress.run(self.target.precision_title("bf16"), run, lambda r: r.summary())
        self.model, self.precision_result = result.model, result

    def write_sources(self) -> None:
        import torch

        from ...compiler.backends.source import standalone_source
        from ...render.html import report_html

        info = self.provenance()
        fit = getattr(self, "fit", None)
        loaded = {"weights_loaded": {"summary": fit.summary(), "warnings": fit.warnings}} if fit is not None else {}
        report = {**self.report.to_json(), "build": {**info, **loaded}}  # the load's warnings: the DINOv2 trial
        source = standalone_source(self.model, self.report.name, one_line(info["spec"]))
        texts = [("report.json", json.dumps(report, indent=2)), ("report.html", report_html(self.report)),
                 ("model.py", with_provenance(source, info))]
        if getattr(self, "precision_result", None) is not None:
            texts.append(("precision.json", json.dumps(self.precision_result.to_json(), indent=2)))
        for name, text in texts:
            self._write_text(name, text)
        self.write_folder()

    def write_folder(self) -> None:
        """model.safetensors, config.json and the spec files: with the card (write_card, after the
        targets) the build folder is a model folder (compiler/pretrained.py)."""
        from ...compiler.pretrained import CONFIG, config, copy_spec, spec_record, write_weights

        self.written.append(write_weights(self.model, self.outdir))
        self.record = spec_record(self.graph)
        if self.record.file is None:
            return
        try:
            copy_spec(self.record.file, self.outdir)
        except UsageError as exc:  # a base outside the spec's folder: a build, but no model folder
            self.output.notes.append(f"{exc}; the build folder is no model folder (from_pretrained)")
            return
        self._write_text(CONFIG, json.dumps(config(self.record, self.dtype_name()), indent=2))

    def dtype_name(self) -> str:
        return next((str(p.dtype).replace("torch.", "") for p in self.model.parameters()), "float32")

    def write_card(self) -> None:
        """README.md, the model card: what was built, for which targets, with what deviation."""
        from ...compiler.pretrained import CARD, card

        if self.record.file is None:
            return
        result = getattr(self, "precision_result", None)
        deviation = result.summary() if result is not None else None
        targets = [target.name for target in self.chain]
        self._write_text(CARD, card(self.record, self.dtype_name(), {"targets": targets, "deviation": deviation}))

    def _write_text(self, name: str, text: str) -> None:
        path = os.path.join(self.outdir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        self.written.append(path)

    def image_sizes(self):
        """--size MIN:MAX as the export's SizeRange: the passing sizes in it (a step apart), or a
        usage error when fewer than two pass."""
        if self.size_bounds is None:
            return None
        if getattr(self, "_image_sizes", None) is None:
            self._image_sizes = self._passing_sizes()
        return self._image_sizes

    def model_at_size(self, side: int):
        """The spec built at image side `side` (its size param set so), the build's weights loaded, in
        eval mode; None where they do not fit it (a weight's shape follows the size)."""
        from ...pipeline import check_document, lower_report
        from ...sizes import with_size

        document, knob = self._size_knob()
        model = lower_report(check_document(with_size(document, knob, side)), seed=0)
        try:
            model.load_state_dict(self.model.state_dict())
        except RuntimeError:
            return None
        return model.eval()

    def _size_knob(self):
        """(the spec's composed document, its square image size knob), read once; a usage error
        where the spec has no such knob."""
        if getattr(self, "_knob", None) is None:
            from ...pipeline import attempt_file
            from ...sizes import find_knob, no_knob

            attempt = attempt_file(self.options.spec, self.options.overrides)
            knob = find_knob(attempt.document, attempt.graph)
            if knob is None:
                raise UsageError(no_knob(attempt.document, self.options.spec, "--size"))
            self._knob = (attempt.document, knob)
        return self._knob

    def _passing_sizes(self):
        from ...compiler.backends.export import SizeRange
        from ...sizes import SizeSolver

        lo, hi = self.size_bounds
        document, knob = self._size_knob()
        found = SizeSolver(document, knob).export_range(lo, hi)
        if found is None:
            raise UsageError(f"--size {lo}:{hi}: fewer than two square sizes there pass the whole spec "
                             f"(`archspec check {self.options.spec} --sizes {lo}:{hi}` lists them)")
        return SizeRange(*found)

    def summary(self) -> None:
        """What was written, in the order written (the manifest last)."""
        written = [os.path.basename(p) for p in self.written]
        names = [n for n in written if n in self.files] + [n for n in self.files if n not in written]
        # the sizes the commit recorded: another build racing into the folder may have replaced it since
        sizes = {n: self.files[n]["bytes"] for n in names} | {"manifest.json": self.output.manifest_bytes}
        names.append("manifest.json")
        shown = self.output.shown
        if self.options.as_json:
            print(json.dumps({"outdir": shown, "files": sizes}, indent=2))
        else:
            print(f"wrote {shown.rstrip(os.sep)}/: {', '.join(f'{n} ({file_size(sizes[n])})' for n in names)}")


def spec_sha256(path: str) -> str | None:
    """The sha256 of the spec file's bytes (None when it is no regular file or cannot be read: the
    check says why). A FIFO is never opened for reading here: that would wait for a writer."""
    try:
        return hashlib.sha256(read_regular_file(path, MAX_TEXT_BYTES)).hexdigest()
    except (OSError, ValueError):
        return None


def torch_modules(model) -> int:
    """The torch modules the lowered model is made of (itself not counted)."""
    return sum(1 for _ in model.modules()) - 1


def one_line(text: str) -> str:
    """Text safe inside a comment or docstring of model.py: control characters, backslashes and
    quotes escaped (a spec path or a --set value may hold a line break or \"\"\", which would
    otherwise end the comment or the docstring and put code in the file)."""
    return json.dumps(str(text), ensure_ascii=False)[1:-1].replace('\\"', "'")


def with_provenance(source: str, info: dict) -> str:
    """model.py headed by comments saying what made it, and ending with the same as a dict."""
    overrides = " ".join(f"--set {one_line(k)}={one_line(v)}" for k, v in info["overrides"].items()) or "none"
    head = (f"# Built by archspec {info['archspec']} with torch {info['torch']}\n"
            f"# spec: {one_line(info['spec'])} (sha256 {info['spec_sha256']})\n"
            f"# overrides: {overrides}\n")
    return f"{head}{source.rstrip()}\n\n\nARCHSPEC_BUILD = {info!r}  # what made this file\n"


def file_size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def build_target(name: str):
    """The target `build --target` names (a usage error when none builds by that name)."""
    try:
        target = targets.get(name)
    except KeyError:
        target = None
    if target is None or not target.serves("build"):
        raise UsageError(f"--target {name}: no such target builds ({', '.join(targets.TargetChoices('build'))})")
    return target


def mapping_argument(args) -> str | None:
    """--map FILE: a usage error when the file is missing or there are no --weights to map."""
    if args.mapping is None:
        return None
    if not args.weights:
        raise UsageError("--map needs --weights: it says how the checkpoint's tensors are named")
    if not os.path.isfile(args.mapping):
        raise UsageError(f"--map: no such file: {args.mapping}")
    return args.mapping


NAME = "build"
HELP = "build the spec into a torch module and write artifacts"


def add_arguments(parser) -> None:
    add_spec_arguments(parser)
    parser.add_argument("-o", "--out", metavar="OUTDIR", help="output folder (default build/<name>/)")
    builtin = targets.builtins("build")
    parser.add_argument("--target", default=targets.default("build"), choices=targets.TargetChoices("build"),
                        metavar=choices_metavar(builtin), help=target_help(builtin))
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights (default 0)")
    parser.add_argument("--weights", metavar="FILE", help="load weights (.pth/.pt/.safetensors, archspec or "
                                                          "reference naming)")
    parser.add_argument("--map", dest="mapping", metavar="FILE",
                        help="with --weights: a weight mapping file (YAML) for a checkpoint named another way, "
                             "tried after the spec's own (see specs/mappings/README.md)")
    parser.add_argument("--precision", default="fp32", choices=targets.PrecisionChoices("build"),
                        metavar=choices_metavar(targets.PRECISIONS), help=precision_help(builtin))
    parser.add_argument("--batch", default=None, help="batch size N or range MIN:OPT:MAX (default 1:8:64; sizes "
                                                       f"1 to {BATCH.hi:,})")
    parser.add_argument("--size", default=None, metavar="MIN:MAX",
                        help="with --target export: model.pt2 takes any square image size in MIN:MAX that passes "
                             "the spec (a step apart)")
    parser.add_argument("--plain-onnx", action="store_true",
                        help="with --target onnx: write model.onnx at the standard opset 18 (attention spelled "
                             "out) for runtimes without opset 23, instead of the fused one that archspec bench times")
    parser.add_argument("--calibration", metavar="random|DIR", default=None,
                        help="with --precision int8: static quantization, its activation ranges calibrated on 32 "
                             "random inputs or the images of DIR (DIR/CLASS/*.png), instead of dynamic")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="with --target aoti: cuda compiles model.aoti.pt2 for this machine's GPU (default cpu)")
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")


def choices_metavar(choices) -> str:
    return "{" + ",".join(getattr(c, "name", c) for c in choices) + "}"


def target_help(builtin: list) -> str:
    """What each built-in target writes (plugins: `archspec targets`)."""
    return "; ".join(f"{t.name}: {t.artifacts}" + (" (default)" if "build" in t.default_for else "") for t in builtin)


def precision_help(builtin: list) -> str:
    """What each lower precision gives and at which built-in target."""
    given = [f"{p}: {doc} (--target {t.name})" for t in builtin for p, doc in t.precision_docs.items()]
    return "; ".join(given) + "; each reports its deviation from fp32"


def run(args) -> int:
    spec, overrides = spec_path(args), overrides_of(args)
    if args.out is not None and not args.out.strip():
        raise UsageError("-o needs a folder name")
    return Build(BuildOptions(spec, overrides, out=args.out, target=args.target, seed=args.seed, weights=args.weights,
                              mapping=mapping_argument(args), precision=args.precision, batch=args.batch,
                              size=args.size, as_json=args.json, plain_onnx=args.plain_onnx,
                              calibration=args.calibration, device=args.device)).run()

