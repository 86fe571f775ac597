"""One module per `archspec` command, found by discovery (main.py). A command module defines

    NAME = "check"              the command
    HELP = "..."                one line for `archspec --help`
    def add_arguments(parser)   its flags (argparse)
    def run(args) -> int        its work; raise UsageError / SpecError for problems (exit 2 / 1)

and keeps its heavy imports inside `run`, so that `archspec check` stays fast. `ORDER` gives
the order commands are listed in; a command not named there is listed after them."""

ORDER = ["check", "models", "build", "graph", "bench", "generate", "train", "primitives", "targets", "schema", "lsp"]
