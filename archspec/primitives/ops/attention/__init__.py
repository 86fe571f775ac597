"""attention: the multi-head attention sub-layer, one file per kind (common.py holds what the
kinds share)."""
