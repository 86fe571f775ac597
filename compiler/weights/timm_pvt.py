"""timm_pvt weight mapping: not written yet."""
