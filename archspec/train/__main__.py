"""`python -m archspec.train SPEC [options]`: see archspec/train/__init__.py."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..core.errors import LocatedError, UsageError
from . import __doc__ as DOC, add_arguments, options_of, train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m archspec.train", description=DOC.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        summary = train(options_of(args))
    except UsageError as exc:
        print(f"archspec train: error: {exc}", file=sys.stderr)
        return 2
    except LocatedError as exc:
        from ..core.output import print_errors

        print_errors(exc, False)
        return 1
    if args.json and int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
