"""The contract of every public entry point, as properties over generated inputs (hypothesis):

    archspec.check / check_text / build / build_text
        return a result, or raise SpecError; raise TypeError only when an argument has the wrong
        Python type, and UsageError only for a value of the right type that no build can take
        (a seed out of range, a mapping without weights); nothing else, ever.
    archspec <command> ...
        exits 0, 1 (a located spec error) or 2 (a usage error), never 3, never a traceback.

The long fuzz job (tests/fuzz/) throws 200,000 mutated specs and command lines at the same
contract; these properties are its always-on, shrinking counterpart.
"""

from __future__ import annotations

import contextlib
import io
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import archspec
from archspec.cli.main import main
from archspec.core.errors import SpecError, UsageError

from tests.conftest import ROOT
from tests.fuzz import mutators, seeds

EXAMPLES = int(os.environ.get("ARCHSPEC_CONTRACT_EXAMPLES", 100))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.function_scoped_fixture])

plain = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
                     lambda inner: st.one_of(st.lists(inner, max_size=4),
                                             st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=12)
anything = st.one_of(plain, st.binary(max_size=20), st.just(object()), st.tuples(st.integers()), st.sets(st.integers()),
                     st.builds(lambda: os.devnull).map(lambda p: __import__("pathlib").Path(p)))
overrides = st.one_of(st.none(), st.dictionaries(st.sampled_from(["img", "dim", "depth", "heads", "bogus"]), plain,
                                                 max_size=3), anything)
seed_values = st.one_of(st.integers(min_value=-2**70, max_value=2**70), anything)
weights_values = st.one_of(st.none(), st.sampled_from(["missing.pt", os.devnull, str(ROOT)]), anything)


def mutated(seed_names: list[str]):
    """A seed spec put through one to three of the fuzz job's mutators."""
    @st.composite
    def build(draw):
        rng = random.Random(draw(st.integers(0, 2**32)))
        text = seeds.all_seeds()[draw(st.sampled_from(seed_names))]
        for _ in range(draw(st.integers(1, 3))):
            name = draw(st.sampled_from(sorted(mutators.SPEC_MUTATORS)))
            mutate = mutators.SPEC_MUTATORS[name]
            text = mutate(rng, text, text) if name == "splice" else mutate(rng, text)
        return text.replace("\nmappings:", "\n# mappings:")
    return build()


specs = st.one_of(mutated(sorted(seeds.all_seeds())), st.text(max_size=200))
tiny_specs = mutated([f"tiny/{name}" for name in seeds.TINY])


def plain_data(value, depth: int = 0) -> bool:
    if depth > 80:
        return False
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(plain_data(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain_data(v, depth + 1) for k, v in value.items())
    return False


def types_right(overrides_value=None, seed=0, weights=None, spec_type=str) -> bool:
    """Whether every argument has a type the API takes (then TypeError is a broken contract)."""
    ok_overrides = overrides_value is None or (isinstance(overrides_value, dict) and plain_data(overrides_value))
    ok_seed = isinstance(seed, int) and not isinstance(seed, bool)
    ok_weights = weights is None or isinstance(weights, (str, os.PathLike, dict))
    return ok_overrides and ok_seed and ok_weights and spec_type in (str, os.PathLike)


def honours_contract(call, right_types: bool, usage_possible: bool = False):
    """Run `call`; fail on anything the contract does not allow."""
    try:
        return call()
    except SpecError as exc:
        assert exc.diagnostics and all(d.message for d in exc.diagnostics)
    except TypeError as exc:
        assert not right_types, f"TypeError for arguments of the right types: {exc}"
        assert str(exc).startswith("archspec."), f"a TypeError not raised at the boundary: {exc}"
    except UsageError:
        assert usage_possible, "UsageError where no argument value was out of range"
    return None


@PROPERTY
@given(specs, overrides)
def test_check_text_gives_a_report_or_a_spec_error(text, given_overrides):
    honours_contract(lambda: archspec.check_text(text, given_overrides), types_right(given_overrides))


@PROPERTY
@given(st.one_of(specs.map(lambda t: ("text", t)), anything.map(lambda v: ("value", v))), overrides)
def test_check_of_a_path_gives_a_report_or_a_spec_error(tmp_path_factory, spec, given_overrides):
    kind, value = spec
    if kind == "text":
        path = tmp_path_factory.mktemp("spec") / "spec.yaml"
        path.write_text(value, encoding="utf-8", errors="surrogatepass")
        value = str(path)
    right = types_right(given_overrides, spec_type=str if isinstance(value, str) else
                        os.PathLike if isinstance(value, os.PathLike) else type(value))
    honours_contract(lambda: archspec.check(value, given_overrides), right)


@PROPERTY
@given(tiny_specs, seed_values, weights_values)
def test_build_text_gives_a_model_or_a_spec_error(text, seed, weights):
    right = types_right(seed=seed, weights=weights)
    usage = isinstance(seed, int) and not 0 <= seed < 2**64
    model = honours_contract(lambda: archspec.build_text(text, seed=seed, weights=weights), right, usage)
    if model is not None:
        assert hasattr(model, "graph")


@PROPERTY
@given(tiny_specs, seed_values)
def test_build_of_a_path_gives_a_model_or_a_spec_error(tmp_path_factory, text, seed):
    path = tmp_path_factory.mktemp("spec") / "spec.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    usage = isinstance(seed, int) and not 0 <= seed < 2**64
    honours_contract(lambda: archspec.build(path, seed=seed), types_right(seed=seed), usage)


flags = st.lists(st.one_of(
    st.sampled_from(["--set", "--json", "--target", "--seed", "-o", "--weights", "--map", "--batch", "--precision",
                     "--bogus", "--", "-", "eager", "tensorrt", "img=64", "depth=1", "=", "x", "99999999999999999999",
                     "-1", "1:8:64", "fp16", "--expand", "g.svg", "g.dot", "g.html", "mlp"]),
    st.sampled_from(mutators.HOSTILE_SETS + mutators.HOSTILE_SEEDS + mutators.HOSTILE_BATCHES),
    st.text(max_size=12)), max_size=6)


@PROPERTY
@given(st.sampled_from(["check", "build", "graph", "schema", "primitives", "bogus", ""]),
       st.sampled_from([f"tiny/{n}" for n in seeds.TINY] + ["missing.yaml", "", "dir", "/dev/null"]), flags)
def test_the_command_line_exits_0_1_or_2(tmp_path_factory, command, spec, extra):
    folder = tmp_path_factory.mktemp("cli")
    if spec.startswith("tiny/"):
        path = folder / "spec.yaml"
        path.write_text(seeds.TINY[spec[5:]])
        spec = str(path)
    elif spec == "dir":
        spec = str(folder)
    argv = [a for a in (command, spec) if a] + list(extra)
    if command == "build":
        argv[1:1] = ["--target", "eager", "-o", str(folder / "out")]  # exports take seconds; a later flag wins
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(folder)  # a build without -o writes build/<name> here
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(cwd)
    assert code in (0, 1, 2), (argv, code, err.getvalue()[-2000:])
    assert "Traceback" not in err.getvalue(), (argv, err.getvalue()[-2000:])


@pytest.mark.parametrize("function", ["check", "check_text", "build", "build_text"])
@pytest.mark.parametrize("value", [None, b"name: x", {"name": "x"}, 3, 3.5, ["a"], object()],
                         ids=["None", "bytes", "dict", "int", "float", "list", "object"])
def test_a_spec_of_the_wrong_type_is_a_plain_type_error(function, value):
    with pytest.raises(TypeError, match=rf"^archspec\.{function}: `(path|text)` must be"):
        getattr(archspec, function)(value)


@pytest.mark.parametrize("kwargs, error", [
    ({"overrides": ["img"]}, TypeError), ({"overrides": {"img": object()}}, TypeError),
    ({"overrides": {1: 2}}, TypeError), ({"seed": "1"}, TypeError), ({"seed": 1.5}, TypeError),
    ({"seed": True}, TypeError), ({"weights": 3}, TypeError), ({"weights": [1]}, TypeError),
    ({"name": None}, TypeError), ({"seed": -1}, UsageError), ({"seed": 2**64}, UsageError),
])
def test_build_arguments_of_the_wrong_type_or_range(kwargs, error):
    with pytest.raises(error, match=r"^archspec\.build_text: "):
        archspec.build_text(seeds.TINY["tiny_vit"], **kwargs)
