"""An example archspec plugin: `learned_scale` (a new primitive) and head kind `mean_max` (a new kind)."""
