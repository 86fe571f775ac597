"""Score parts of attention: what may change the scores q·k^T between the projections and the
weighted sum of the values, one object per part in one file (base.py says what a part is)."""
