"""The standalone model.py checks its inputs as the built module does (compiler/input_check.py,
copied in verbatim): an image of another size with the same token count (the SegFormer trial:
64x16 against 32x32) is refused with the built module's own message, where it used to run
scrambled; a right-sized input gives the built module's output; forward_features checks too; and
under torch.export the check stays out of the program."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import archspec
from archspec.compiler.backends.source import standalone_source

from tests.conftest import NO_ARCHSPEC, ROOT

SCRIPT = textwrap.dedent("""
    import torch, model
    standalone = model.{cls}().eval()
    standalone.load_state_dict(torch.load("weights.pt", weights_only=True))
    answers = {{}}
    with torch.no_grad():
        answers["right"] = standalone(torch.load("right.pt"))
        for name in ("wrong", "rank"):
            for call in ("forward", "forward_features"):
                try:
                    out = (standalone.forward_features if call == "forward_features" else standalone)(torch.load(name + ".pt"))
                    answers[name, call] = "ran: " + str(tuple(out.shape))
                except ValueError as exc:
                    answers[name, call] = str(exc)
        program = torch.export.export(standalone, (torch.load("right.pt"),))
        answers["exported"] = program.module()(torch.load("right.pt"))
    torch.save(answers, "answers.pt")
""")


@pytest.fixture(scope="module")
def built():
    return archspec.create_model("vit_ti16", img_size=32, depth=1, num_classes=10).eval()


def test_model_py_refuses_a_same_token_count_image_of_another_size(built, tmp_path):
    (tmp_path / "model.py").write_text(standalone_source(built, "vit_ti16", "vit_ti16"))
    torch.save(built.state_dict(), tmp_path / "weights.pt")
    generator = torch.Generator().manual_seed(0)
    right = torch.randn(2, 3, 32, 32, generator=generator)
    wrong = torch.randn(2, 3, 16, 64, generator=generator)  # 1 x 4 patches: the 4 tokens of 2 x 2
    rank = torch.randn(3, 32, 32, generator=generator)
    for name, x in (("right", right), ("wrong", wrong), ("rank", rank)):
        torch.save(x, tmp_path / f"{name}.pt")
    script = NO_ARCHSPEC + SCRIPT.format(cls=type(built).__name__)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    answers = torch.load(tmp_path / "answers.pt", weights_only=False)
    with torch.no_grad():
        expected = built(right)
        assert torch.allclose(answers["right"], expected, atol=1e-6)
        assert torch.allclose(answers["exported"], expected, atol=1e-5)
        for name, x in (("wrong", wrong), ("rank", rank)):
            with pytest.raises(ValueError) as refused:
                built(x)
            message = str(refused.value)
            assert message.startswith("input 'image' is") and "the spec declares" in message
            local = message.replace(str(ROOT / "specs") + "/", "")  # model.py names the spec's file, not its path
            assert answers[name, "forward"] == local  # the built module's words, not a run
            assert answers[name, "forward_features"] == local
    assert str(ROOT) not in (tmp_path / "model.py").read_text()
    assert "32" in answers["wrong", "forward"] and "16" in answers["wrong", "forward"]
