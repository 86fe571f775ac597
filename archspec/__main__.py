"""`python -m archspec`: the CLI with an ordinary exit (SystemExit), so callers such as runpy-based
tests keep their interpreter. The console script `archspec` uses cli.run, which skips teardown."""
from .cli import main

raise SystemExit(main())
