"""merge (torch): one file per kind."""
