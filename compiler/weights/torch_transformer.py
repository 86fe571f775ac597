"""torch_transformer weight mapping: not written yet."""
