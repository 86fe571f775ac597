"""`--json` does not silence training (issue 39): progress and validation lines go to stderr as
without it, and stdout holds the JSON summary alone."""

from __future__ import annotations

import json

import numpy as np

from archspec.cli import main

from tests.conftest import ROOT

TINY_LM = str(ROOT / "specs" / "examples" / "tiny_lm.yaml")
SMALL = ["--set", "vocab=97", "--set", "dim=32", "--set", "depth=1", "--set", "heads=2"]


def test_json_keeps_progress_on_stderr_and_the_summary_alone_on_stdout(tmp_path, capsys):
    tokens = tmp_path / "tokens.npy"
    np.save(tokens, np.random.default_rng(0).integers(0, 97, 4096).astype(np.int64))
    capsys.readouterr()
    code = main(["train", TINY_LM, *SMALL, "--data", str(tokens), "--steps", "2", "--eval-every", "1",
                 "--batch", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)  # the summary alone on stdout
    assert summary["steps"] == 2 and len(summary["evals"]) >= 2
    assert "step 1/2" in err and "step 2/2" in err  # progress, as without --json
    assert err.count("val loss") == len(summary["evals"])  # and each validation
