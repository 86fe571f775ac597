"""norm (torch): one file per kind."""
