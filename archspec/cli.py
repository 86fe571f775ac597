"""The `archspec` command.

    archspec check SPEC [--set K=V]... [--json] [--target tensorrt]
    archspec build SPEC [--set K=V]... [-o OUTDIR] [--target eager|export|onnx|tensorrt] ...
    archspec schema

Exit codes: 0 fine, 1 the spec has errors, 2 usage (bad flag, missing file), 3 a bug in
archspec (the only case that prints a Python traceback, and it says so).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

from .compose import parse_override
from .diagnostics import SpecError, as_records, render

EXIT_OK, EXIT_SPEC, EXIT_USAGE, EXIT_BUG = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 128 + 13  # as if killed by SIGPIPE, like other command-line tools


class UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="archspec", description="Transformer architectures as YAML graph specs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def spec_command(name: str, help_text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        cmd.add_argument("spec", metavar="SPEC", help="path of a YAML spec")
        cmd.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override a param (repeatable), e.g. --set img=256 --set depths=[2,2,18,2]")
        return cmd

    check = spec_command("check", "check every shape; print params and FLOPs per node")
    check.add_argument("--json", action="store_true", help="print the report (or the errors) as JSON")
    check.add_argument("--target", choices=["tensorrt"], help="also check that every op converts to this target")
    check.add_argument("--batch", default=None, help="with --target: a batch size N or a range MIN:OPT:MAX")

    build = spec_command("build", "build the spec into a torch module and write artifacts")
    build.add_argument("-o", "--out", metavar="OUTDIR", help="output folder (default build/<name>/)")
    build.add_argument("--target", default="export", choices=["eager", "export", "onnx", "tensorrt"],
                       help="eager: model.py and report only; export: + model.pt2 (default); "
                            "onnx: + model.onnx; tensorrt: + a TensorRT engine")
    build.add_argument("--seed", type=int, default=0, help="seed of the initial weights (default 0)")
    build.add_argument("--weights", metavar="FILE", help="load weights (.pth/.pt/.safetensors, archspec or "
                                                         "reference naming)")
    build.add_argument("--precision", default="fp32", choices=["fp32", "fp16"], help="TensorRT precision")
    build.add_argument("--batch", default=None, help="batch size N or range MIN:OPT:MAX (default 1:8:64)")
    build.add_argument("--json", action="store_true", help="print what was written as JSON")

    sub.add_parser("schema", help="print the JSON Schema of the spec format (for editors)")
    return parser


def _overrides(pairs: list[str]) -> dict[str, str]:
    result = {}
    for text in pairs:
        try:
            key, value = parse_override(text)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        result[key] = value
    return result


def _spec_path(path: str) -> str:
    if not os.path.exists(path):
        raise UsageError(f"no such file: {path}")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory; give a spec file")
    return path


def _print_errors(exc: SpecError, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"errors": as_records(exc)}, indent=2))
        return
    for diag in exc.diagnostics:
        print(render(diag), file=sys.stderr)
    count = len(exc.diagnostics)
    print(f"{count} error{'s' if count != 1 else ''}", file=sys.stderr)


def cmd_check(args) -> int:
    from compiler.pipeline import check_spec

    report = check_spec(_spec_path(args.spec), _overrides(args.overrides) or None)
    coverage = None
    if args.target == "tensorrt":
        from compiler.backends.tensorrt import coverage_report

        coverage = coverage_report(report, batch=args.batch)
    if coverage is not None and not coverage.complete:
        if not args.json:
            print(report.table())
            print(coverage.summary())
        raise SpecError(coverage.diagnostics())  # --json: the errors alone, as for any failed check
    if args.json:
        out = report.to_json()
        if coverage is not None:
            out["tensorrt"] = coverage.to_json()
        print(json.dumps(out, indent=2))
    else:
        print(report.table())
        if coverage is not None:
            print(coverage.summary())
    return EXIT_OK


def cmd_build(args) -> int:
    from compiler.backends.build import build_command

    return build_command(
        _spec_path(args.spec), _overrides(args.overrides) or None, out=args.out, target=args.target,
        seed=args.seed, weights=args.weights, precision=args.precision, batch=args.batch, as_json=args.json)


def cmd_schema(args) -> int:
    from .schema_json import spec_json_schema

    print(json.dumps(spec_json_schema(), indent=2))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed its usage message
        return EXIT_USAGE if exc.code else EXIT_OK
    command = {"check": cmd_check, "build": cmd_build, "schema": cmd_schema}[args.command]
    as_json = getattr(args, "json", False)
    try:
        return command(args)
    except UsageError as exc:
        print(f"archspec {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SpecError as exc:
        _print_errors(exc, as_json)
        if getattr(exc, "is_bug", False):
            if os.environ.get("ARCHSPEC_DEBUG") and exc.__cause__ is not None:
                traceback.print_exception(exc.__cause__)
            print("This is a bug in archspec, not a problem with your spec. Please report it.", file=sys.stderr)
            return EXIT_BUG
        return EXIT_SPEC
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `archspec check spec.yaml | head`: the reader left; not a bug
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the final flush at exit stays quiet
        return EXIT_BROKEN_PIPE
    except Exception:  # noqa: BLE001 - the one place a traceback is shown
        traceback.print_exc()
        print("\nThis is a bug in archspec, not a problem with your spec. Please report it with the "
              "traceback above and the spec.", file=sys.stderr)
        return EXIT_BUG


def run() -> None:
    """The console entry point: main(), then exit without tearing the interpreter down.

    Everything is written and flushed by then; skipping the teardown (freeing networkx's and
    pydantic's objects one by one) saves about a third of `archspec check`'s time.
    """
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = EXIT_BROKEN_PIPE
    os._exit(code)


if __name__ == "__main__":
    run()
