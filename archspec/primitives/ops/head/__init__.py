"""head: what a model ends with, one file per kind (pooling.py holds the pooling rule the
kinds share)."""
