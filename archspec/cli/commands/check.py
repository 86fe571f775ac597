"""`archspec check SPEC`: every shape, parameter and FLOP count; optionally TensorRT coverage,
or (`--sizes MIN:MAX`) the square input sizes at which the whole spec passes."""

from __future__ import annotations

import json
import sys

from ...compiler.backends import targets
from ...core.errors import SpecError, UsageError
from ...core.types import BATCH
from ...pipeline import check_file
from ...core.output import print_warnings
from .common import add_spec_arguments, batch_fits_memory, batch_sizes, overrides_of, size_range, spec_path

NAME = "check"
HELP = "check every shape; print params and FLOPs per node"
DEFAULT_SIZES = "1:1024"


def add_arguments(parser) -> None:
    add_spec_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the report (or the errors) as JSON")
    builtin = [t.name for t in targets.builtins("check")]
    parser.add_argument("--target", choices=targets.TargetChoices("check"), metavar="{" + ",".join(builtin) + "}",
                        help="also check that every op converts to this target")
    parser.add_argument("--batch", default=None, help="with --target: a batch size N or a range MIN:OPT:MAX "
                                                       f"(sizes 1 to {BATCH.hi:,})")
    parser.add_argument("--sizes", nargs="?", const=DEFAULT_SIZES, default=None, metavar="MIN:MAX",
                        help=f"list the square input sizes in MIN:MAX (default {DEFAULT_SIZES}) at which the whole "
                             "spec passes")


def run(args) -> int:
    if args.batch is not None and not args.target:
        raise UsageError("--batch goes with --target: the batch range the target's coverage check builds for "
                         "(check alone works for every batch)")
    if args.sizes is not None:
        if args.target:
            raise UsageError("--sizes lists input sizes; check --target separately")
        return list_sizes(args)
    batch = batch_sizes(args.batch) if args.target else None
    report = check_file(spec_path(args), overrides_of(args))
    if args.target:  # the coverage check builds the model and traces it at the example batch
        from ...budget import check_build_memory

        check_build_memory(report, runs_model=False)
        batch_fits_memory(report, batch.example)
    coverage = targets.get(args.target).check(report.graph, batch=args.batch) if args.target else None
    if coverage is not None and not coverage.complete:
        if not args.json:
            print(report.table())
            print(coverage.summary())
        raise SpecError(coverage.diagnostics())  # --json: the errors alone, as for any failed check
    if args.json:
        out = report.to_json()
        if coverage is not None:
            out[args.target] = coverage.to_json()
        print(json.dumps(out, indent=2))
        return 0
    print(report.table())
    if coverage is not None:
        print(coverage.summary())
    print_warnings(report.warnings)
    return 0


def list_sizes(args) -> int:
    """`--sizes`: the square input sizes in the range at which the whole spec passes."""
    from ...pipeline import attempt_file
    from ...sizes import SizeSolver, describe_sizes, find_knob, no_knob

    lo, hi = size_range(args.sizes, "--sizes")
    path = spec_path(args)
    attempt = attempt_file(path, overrides_of(args))
    if attempt.graph is None:
        raise attempt.error
    knob = find_knob(attempt.document, attempt.graph)
    if knob is None:
        raise UsageError(no_knob(attempt.document, path, "--sizes"))
    solver = SizeSolver(attempt.document, knob)
    why_slow = "" if solver.size_blind else (" (the size reaches params the graph is made from, so each size runs "
                                             "the whole pipeline)")

    def progress(done: int, total: int) -> None:
        print(f"--sizes: {done:,} of {total:,} sizes checked so far{why_slow}", file=sys.stderr, flush=True)

    sizes = solver.sizes(lo, hi, progress)
    failed = not sizes and attempt.error is not None  # nothing passes: say why the spec's own size fails
    if args.json:
        out = {"name": attempt.graph.name, "input": knob.input, "param": knob.param, "range": [lo, hi], "sizes": sizes}
        if failed:
            out["errors"] = [d.record() for d in attempt.error.diagnostics]
        print(json.dumps(out, indent=2))
        return 1 if failed else 0
    how = f" (--set {knob.param}=N)" if knob.param else ""
    print(f"{attempt.graph.name}: square sizes of input '{knob.input}' from {lo} to {hi} that pass{how}: "
          f"{describe_sizes(sizes, lo, hi)}")
    if failed:
        raise attempt.error
    return 0
