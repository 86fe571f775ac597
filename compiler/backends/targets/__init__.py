"""Targets: one discovered object per backend (filled in by the targets work)."""
