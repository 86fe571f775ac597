"""The `archspec` command (floor 6, the face): argument parsing and exit codes (main.py),
one module per command (commands/, found by discovery), progress lines (progress.py); diagnostics
print through archspec/core/output.py."""

from .main import EXIT_BROKEN_PIPE, EXIT_BUG, EXIT_OK, EXIT_SPEC, EXIT_USAGE, main, run

__all__ = ["main", "run", "EXIT_OK", "EXIT_SPEC", "EXIT_USAGE", "EXIT_BUG", "EXIT_BROKEN_PIPE"]
