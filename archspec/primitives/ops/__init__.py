"""The built-in primitives: one file per primitive, or per kind of a primitive (a folder per
primitive with kinds). Every module here is imported by discovery (registry.load_builtins)."""
