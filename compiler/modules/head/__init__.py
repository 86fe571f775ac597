"""head (torch): one file per kind."""
