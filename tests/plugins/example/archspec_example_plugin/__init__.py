"""An example archspec plugin: `scale` (a new primitive) and head kind `mean_max` (a new kind)."""
