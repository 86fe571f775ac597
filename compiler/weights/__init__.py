"""Weight import: a state dict or checkpoint file in archspec's own naming, or in a naming
written in a mapping file (timm, Hugging Face transformers, torch.nn.Transformer, ...),
loaded into a built model. Anything that does not map (missing, unexpected or wrongly shaped
tensors) is an error that names the tensors and the closest naming.

    checkpoint.py    reading a checkpoint safely (weights_only=True, safetensors)
    mapping_file.py  the mapping-file format (documented there) read into a Naming
    patterns.py      its regular expressions, compiled with bounds and located errors
    rules.py         the rule kinds: rename, fuse, split, transpose, reshape, drop
    naming.py        what a naming is; archspec's own
    fit.py           how a checkpoint fits under each naming; the closest; the error
    load.py          load_weights: the namings to try (own, the spec's `mappings:`, --map)

The shipped mapping files are in specs/mappings/ (README.md there describes the format).
"""
