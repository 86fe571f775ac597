"""The `archspec` command.

    archspec check SPEC [--set K=V]... [--json] [--target TARGET]
    archspec models [PATTERN] [--json]   the shipped specs (SPEC may be one's name)
    archspec build SPEC [--set K=V]... [-o OUTDIR] [--target TARGET]
                        [--weights FILE [--map FILE]] ...
    archspec targets [--json]     the targets, usable here or why not
    archspec schema

Exit codes: 0 fine, 1 the spec has errors, 2 usage (bad flag, missing file), 3 a bug in
archspec (the only case that prints a Python traceback, and it says so).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import traceback

from ..core.errors import InternalError, SpecError, UsageError
from ..core.output import print_errors, visible_streams
from ..core.version import __version__

EXIT_OK, EXIT_SPEC, EXIT_USAGE, EXIT_BUG = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 128 + 13  # as if killed by SIGPIPE, like other command-line tools
BUG_NOTICE = "This is a bug in archspec, not a problem with your spec. Please report it."
COMMANDS = "archspec.cli.commands"  # found by name, as the ops are: the command modules import cli's helpers


def command_names() -> list[str]:
    """The command modules' names (archspec/cli/commands/, one module per command, named as it),
    in their listed order, read from the folder without importing them."""
    package = importlib.import_module(COMMANDS)
    names = [info.name for info in pkgutil.iter_modules(package.__path__) if info.name != "common"]
    order = {name: i for i, name in enumerate(package.ORDER)}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n))


def commands(only: str | None = None) -> dict:
    """The command modules, in their listed order (`only`: that one alone, so that running a
    command imports no other's module: `archspec check` stays quick)."""
    found = {}
    for name in [only] if only is not None else command_names():
        module = importlib.import_module(f"{COMMANDS}.{name}")
        found[module.NAME] = module
    return found


def _parser(found: dict) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="archspec", description="Transformer architectures as YAML graph specs.")
    parser.add_argument("--version", action="version", version=f"archspec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in found.items():
        module.add_arguments(sub.add_parser(name, help=module.HELP, description=module.HELP))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv` names; its exit code. What it prints goes through VisibleStreams:
    control characters in a spec's names reach the terminal as escapes, never as commands."""
    with visible_streams():
        return _main(argv)


def one_value_per_set(argv: list[str]) -> list[str]:
    """`--set a=1 b=2` as `--set a=1 --set b=2`: the KEY=VALUE words after a --set are its values
    (the shipped specs' headers write them so), and the first word without `=` is what comes next
    (SPEC may follow: `--set img=64 swin_t`)."""
    out, values = [], False
    for word in argv:
        if word == "--set":
            values = None  # the next word is --set's own value, whatever it is
            out.append(word)
        elif values is None:
            values = True
            out.append(word)
        elif values and "=" in word and not word.startswith("-"):
            out += ["--set", word]
        else:
            values = False
            out.append(word)
    return out


def _main(argv: list[str] | None) -> int:
    words = one_value_per_set(sys.argv[1:] if argv is None else list(argv))
    named = words[0] if words and words[0] in command_names() else None  # else the whole parser says what is wrong
    found = commands(named)
    parser = _parser(found)
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:  # argparse has printed its usage (or the version)
        return EXIT_USAGE if exc.code else EXIT_OK
    command = found[args.command].run
    as_json = getattr(args, "json", False)
    try:
        return command(args)
    except UsageError as exc:
        print(f"archspec {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SpecError as exc:
        print_errors(exc, as_json)
        return EXIT_SPEC
    except InternalError as exc:
        print_errors(exc, as_json)
        if os.environ.get("ARCHSPEC_DEBUG") and exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__)
        print(BUG_NOTICE, file=sys.stderr)
        return EXIT_BUG
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

    Everything is written and flushed by then; the teardown (freeing networkx's objects one by
    one) is time an exiting command need not spend.
    """
    code = main()
    try:
        for stream in (sys.stdout, sys.stderr):
            if not stream.closed:  # the language server closes stdout when the editor says exit
                stream.flush()
    except BrokenPipeError:
        code = EXIT_BROKEN_PIPE
    os._exit(code)


if __name__ == "__main__":
    run()
