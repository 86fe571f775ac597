"""norm: a standalone normalisation over the channels, one file per kind (layer is the default)."""
