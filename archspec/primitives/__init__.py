"""Floor 2, primitives: what a primitive is (base.py), the registry that discovers them
(registry.py), one file per primitive or kind (ops/), and the torch-free passes over the IR
that use their rules: shape inference (infer.py) and costing (cost.py). Imports no torch."""
