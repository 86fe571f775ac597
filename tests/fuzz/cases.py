"""One fuzz case from (seed, index), and how to run and judge it.

Kinds of case, by share:
  check_text  a mutated spec through archspec.check_text (sometimes with hostile overrides)
  check_file  the same written to a file beside the shipped specs, through archspec.check
  build_text  a mutated small spec that `check` accepts, through archspec.build_text: lowering
              must never fail on what the checker accepted
  api_types   a public function given arguments of the wrong Python types
  cli         a hostile command line through the CLI's main(), in process

A case's outcome is `ok`, `spec_error`, `usage_error`, `type_error` (only where the case gave
wrong types) or `crash: ...`: a traceback, exit code 3, or any other exception.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import traceback
from dataclasses import dataclass, field

from . import mutators, seeds

KINDS = {"check_text": 70, "check_file": 8, "build_text": 4, "api_types": 3, "cli": 15}
BUILD_PARAMS = 2_000_000  # build_text only builds specs this small (the fuzz measures, not trains)


@dataclass
class Case:
    seed: int
    index: int
    kind: str
    text: str = ""
    mutations: list[str] = field(default_factory=list)
    seed_spec: str = ""
    overrides: dict | None = None
    argv: list[str] = field(default_factory=list)
    call: tuple = ()

    @property
    def key(self) -> str:
        return f"{self.seed}:{self.index}"


def make_case(seed: int, index: int, files: dict[str, str]) -> Case:
    rng = random.Random(f"archspec-fuzz:{seed}:{index}")
    kind = rng.choices(list(KINDS), list(KINDS.values()))[0]
    case = Case(seed, index, kind)
    if kind == "cli":
        case.argv = mutators.command_line(rng, files)
        if case.argv[:1] == ["build"]:
            case.argv[1:1] = ["--target", "eager"]  # export takes seconds; a later --target still wins
        return case
    if kind == "api_types":
        case.call = wrong_types(rng)
        return case
    pool = seeds.TINY if kind == "build_text" else seeds.all_seeds()
    name = rng.choice(sorted(pool))
    case.seed_spec, text = name, pool[name]
    for _ in range(rng.choice([1, 1, 2, 3])):
        mutator = rng.choice(sorted(mutators.SPEC_MUTATORS))
        case.mutations.append(mutator)
        fn = mutators.SPEC_MUTATORS[mutator]
        text = fn(rng, text, rng.choice(list(seeds.all_seeds().values()))) if mutator == "splice" else fn(rng, text)
    case.text = text.replace("\nmappings:", "\n# mappings:") if kind != "check_file" else text
    if kind == "check_text" and rng.random() < 0.15:
        case.overrides = hostile_overrides(rng)
    return case


def hostile_overrides(rng: random.Random) -> dict:
    deep: list = []
    for _ in range(rng.choice([3, 70])):
        deep = [deep]
    values = [256, "256", -1, 0, 2**70, 1e400 if False else float("inf"), float("nan"), True, None, [2, 2], {"a": 1},
              deep, "9" * 5000, "${1/0}", "[", "", 3.5, [1.5, float("inf")], "x" * 300_000]
    keys = ["img", "depth", "dim", "heads", "window", "classes", "bogus", "dpr", "depths"]
    return {rng.choice(keys): rng.choice(values) for _ in range(rng.randint(1, 3))}


WRONG = [None, b"name: x", {"name": "x"}, 3, 3.5, ["a"], object(), True, bytearray(b"x"), ("a",), {1, 2}]


def wrong_types(rng: random.Random) -> tuple:
    """(function name, args, kwargs) with at least one argument of a wrong type."""
    function = rng.choice(["check", "check_text", "build", "build_text"])
    good_spec = "vit_b16.yaml" if function in ("check", "build") else seeds.TINY["tiny_vit"]
    args, kwargs = [good_spec], {}
    slot = rng.choice(["spec", "overrides", "seed", "weights", "name", "mapping"])
    bad = rng.choice(WRONG)
    if slot == "spec":
        args = [bad]
    elif slot == "overrides":
        kwargs["overrides"] = rng.choice([["img"], 3, "img=3", {1: 2}, {"img": object()}, {"img": (1, 2)}, b"x"])
    elif slot == "seed" and function.startswith("build"):
        kwargs["seed"] = rng.choice(["1", 1.5, None, True, [1], b"1"])
    elif slot == "weights" and function.startswith("build"):
        kwargs["weights"] = rng.choice([3, [1], b"w.pt", 1.5, True])
    elif slot == "name" and function.endswith("_text"):
        kwargs["name"] = rng.choice([None, 3, b"x", ["x"]])
    elif slot == "mapping" and function.startswith("build"):
        kwargs["mapping"], kwargs["weights"] = rng.choice([3, [1], b"m.yaml"]), "w.pt"
    else:
        args = [bad]
    return function, args, kwargs


# -- running and judging --------------------------------------------------------------------------------


def run_case(case: Case) -> str:
    """The outcome of one case (see the module docstring)."""
    import archspec
    from archspec.core.errors import InternalError, SpecError, UsageError

    try:
        if case.kind == "cli":
            return run_cli(case.argv)
        if case.kind == "api_types":
            function, args, kwargs = case.call
            try:
                getattr(archspec, function)(*args, **kwargs)
            except TypeError as exc:
                if str(exc).startswith("archspec."):  # raised at the boundary, in plain words
                    return "type_error"
                return f"crash: TypeError from inside: {str(exc)[:200]} @ {where(exc)}"
            except Exception as exc:  # noqa: BLE001 - a wrong type must be refused at the boundary
                return f"crash: wrong types got past the boundary: {type(exc).__name__}: {str(exc)[:200]}"
            return "crash: wrong types accepted"
        if case.kind == "check_file":
            path = os.path.join(os.getcwd(), f"fuzz_{case.index % 7}.yaml")
            with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(case.text)
            report = archspec.check(path)
        else:
            report = archspec.check_text(case.text, case.overrides)
        if case.kind == "build_text" and report.params <= BUILD_PARAMS:
            return build_what_checked(case.text)
        return "ok"
    except SpecError as exc:
        return judge_spec_error(exc)
    except UsageError:
        return "usage_error"
    except InternalError as exc:
        return f"crash: InternalError: {str(exc).splitlines()[0][:200]}"
    except Exception as exc:  # noqa: BLE001 - what the fuzz is looking for
        return f"crash: {type(exc).__name__}: {str(exc)[:200]} @ {where(exc)}"


def build_what_checked(text: str) -> str:
    """Build a spec the checker accepted: lowering must never fail on it. The one error allowed is the
    worker's build budget (ARCHSPEC_MAX_BUILD_BYTES), which check does not know about."""
    import archspec
    from archspec.core.errors import SpecError

    try:
        archspec.build_text(text)
    except SpecError as exc:
        if all("ARCHSPEC_MAX_BUILD_BYTES" in (d.hint or "") for d in exc.diagnostics):
            return "over_budget"
        return f"crash: build refused what check accepted: {str(exc).splitlines()[0][:200]}"
    return "ok"


def judge_spec_error(exc) -> str:
    from archspec.core.render import render

    for diag in exc.diagnostics:
        if not diag.message:
            return "crash: a diagnostic without a message"
        render(diag, dict(exc.sources))
    return "spec_error"


def where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "archspec" in f.filename or "compiler" in f.filename] or frames
    return f"{os.path.basename(ours[-1].filename)}:{ours[-1].lineno}" if ours else "?"


def run_cli(argv: list[str]) -> str:
    from archspec.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's --help/--version end here only if main lets them through
            code = exc.code if isinstance(exc.code, int) else 0
    text = err.getvalue()
    if code == 3 or "Traceback (most recent call last)" in text:
        last = [line for line in text.splitlines() if line.strip()][-3:]
        return f"crash: exit {code}: {' | '.join(last)[:300]}"
    if code not in (0, 1, 2):
        return f"crash: exit code {code}"
    return {0: "ok", 1: "spec_error", 2: "usage_error"}[code]
