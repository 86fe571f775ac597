"""Inductor, frozen: the compile that the decode step (generate) and the AOTInductor target share."""
