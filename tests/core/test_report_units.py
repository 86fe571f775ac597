"""The check summary's counts switch unit at each thousand, up to T (the OLMoE trial's full size
printed "110812.30 GFLOPs per sample")."""

from archspec.render.picture import short
from archspec.report import human


def test_counts_read_in_the_largest_unit():
    assert human(110_812_300_000_000) == "110.81 T"
    assert human(515_810_000) == "515.81 M"
    assert human(999) == "999 "
    assert short(13_361_612_800_000) == "13.4T" and short(4_250_000_000) == "4.25G"
