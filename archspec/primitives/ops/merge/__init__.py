"""merge: downsample a token grid, one file per kind."""
