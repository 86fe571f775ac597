"""Floor 1, core: the error model and diagnostics, tensor types, the IR and the interpreter
that every pass subclasses. Imports no torch and nothing else of archspec's."""
