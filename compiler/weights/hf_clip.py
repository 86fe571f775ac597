"""hf_clip weight mapping: not written yet."""
