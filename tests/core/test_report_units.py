"""The check summary's counts switch unit at each thousand, up to T (the OLMoE trial's full size
printed "110812.30 GFLOPs per sample")."""

import archspec
from archspec.render.picture import short
from archspec.report import human


def test_counts_read_in_the_largest_unit():
    assert human(110_812_300_000_000) == "110.81 T"
    assert human(515_810_000) == "515.81 M"
    assert human(999) == "999 "
    assert short(13_361_612_800_000) == "13.4T" and short(4_250_000_000) == "4.25G"


def test_the_options_that_differ_among_a_repeats_copies_are_shown():
    """The SmolLM3 trial could not tell from check which layers had no rotary: the copies of a
    repeated node whose options differ say how, in the table and in --json."""
    report = archspec.check_text("""
name: nope
dims: {L: [1, 16]}
inputs: {x: [B, L, 32]}
graph:
  - id: layers
    repeat: 4
    graph:
      - {id: attn, attention: {kind: causal, heads: 2, rope_theta: "${None if i == 3 else 10000.0}",
                               drop_path: "${0.1 * i}"}}
      - {id: mlp, mlp: {ratio: 2}}
""")
    rows = {row.path: row for row in report.nodes}
    assert rows["layers.0.attn"].op == "attention/causal rope_theta=10000"
    assert rows["layers.3.attn"].op == "attention/causal rope_theta=none"
    assert rows["layers.0.mlp"].op == "mlp"  # the same in every copy; drop_path by layer is not shown
    assert rows["layers.3.attn"].record["varies"] == {"rope_theta": None}
