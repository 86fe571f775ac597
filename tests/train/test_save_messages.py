"""`archspec train --save` / `--resume` say what they did (issue 39: both printed nothing)."""

from __future__ import annotations

from tests.train.test_train import VIT, VIT_SMALL


def test_save_and_resume_say_what_they_did(tmp_path, capsys):
    from archspec.train import Options, train as run

    saved = tmp_path / "state.pt"
    run(Options(VIT, overrides={**VIT_SMALL, "depth": 1}, steps=1, batch=2, save=str(saved)))
    assert f"saved the model and optimizer at step 1 to {saved}" in capsys.readouterr().err
    run(Options(VIT, overrides={**VIT_SMALL, "depth": 1}, steps=2, batch=2, resume=str(saved)))
    assert f"resumed from {saved}: model and optimizer at step 1" in capsys.readouterr().err
