"""One fuzz case from (seed, index), and how to run and judge it.

Kinds of case, by share:
  check_text  a mutated spec through archspec.check_text (sometimes with hostile overrides)
  check_file  the same written to a file beside the shipped specs, through archspec.check
  build_text  a mutated small spec that `check` accepts, through archspec.build_text: lowering
              must never fail on what the checker accepted
  api_types   a public function given arguments of the wrong Python types
  cli         a hostile command line through the CLI's main(), in process (check, build, graph, ...)
  extends     a chain of spec files (a mutated base, perhaps a middle spec, a child) through
              archspec.check: edits of the base's graph, hostile `extends` paths, links and loops
  mapping     a mutated weight mapping file (from specs/mappings/) used by archspec.build_text to
              load a timm-named checkpoint of tiny_vit
  lsp         a mutated spec through the language server's analysis (archspec/lsp/analysis.py):
              analyse, diagnostics, and hover and definition at random positions (no server)
  tensor_ops  a generated graph of the tensor ops (generators.py), sometimes mutated: checked, and
              what check accepts is built and run forward once (a model that fails there is a crash)
  attention   a generated sequence model with attention kinds, score parts and options, MoE MLPs
              and `share: true` repeats: checked, built and run forward as tensor_ops
  generate    model.generate on a built tiny_lm with hostile keyword arguments: a result, or a
              ValueError/TypeError in words
  generate_cli  `archspec generate` with hostile flags

A case's outcome is `ok`, `spec_error`, `usage_error`, `type_error` (only where the case gave
wrong types) or `crash: ...`: a traceback, exit code 3, or any other exception (for `lsp`, any
exception at all, and a diagnostic placed outside the text).
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import traceback
from dataclasses import dataclass, field

from . import generators, mutators, seeds

KINDS = {"check_text": 50, "check_file": 6, "build_text": 4, "api_types": 3, "cli": 12, "extends": 5, "mapping": 3,
         "lsp": 5, "tensor_ops": 12, "attention": 10, "generate": 3, "generate_cli": 2}
LSP_POSITIONS = 4  # hover and definition requests per lsp case
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
    files: dict[str, str] = field(default_factory=dict)  # file name (in the workspace) -> text, written first

    @property
    def key(self) -> str:
        return f"{self.seed}:{self.index}"


def case_random(seed: int, index: int) -> tuple[random.Random, str]:
    """The case's random source, and its kind (the first draw)."""
    rng = random.Random(f"archspec-fuzz:{seed}:{index}")
    return rng, rng.choices(list(KINDS), list(KINDS.values()))[0]


def kind_of(seed: int, index: int) -> str:
    return case_random(seed, index)[1]


def make_case(seed: int, index: int, files: dict[str, str]) -> Case:
    rng, kind = case_random(seed, index)
    case = Case(seed, index, kind)
    if kind == "cli":
        case.argv = mutators.command_line(rng, files)
        if case.argv[:1] == ["build"]:
            case.argv[1:1] = ["--target", "eager"]  # export takes seconds; a later --target still wins
        if case.argv[:1] == ["bench"]:
            case.argv[1:1] = ["--rounds", "1", "--samples", "2", "--target", "eager"]  # cheap unless a later flag says
        return case
    if kind == "api_types":
        case.call = wrong_types(rng)
        return case
    if kind == "extends":
        return extends_case(case, rng)
    if kind == "mapping":
        return mapping_case(case, rng, files)
    if kind in ("tensor_ops", "attention"):
        case.seed_spec = kind
        text = generators.tensor_spec(rng) if kind == "tensor_ops" else generators.attention_spec(rng)
        case.text = mutated_spec(rng, text, case, most=1) if rng.random() < 0.2 else text
        return case
    if kind == "generate":
        case.call = (generators.generate_kwargs(rng),)
        return case
    if kind == "generate_cli":
        case.argv = generators.generate_argv(rng, files[rng.choice(["spec_tiny_lm.yaml", "tiny_tiny_lm", "tiny_tiny_lm",
                                                                     "tiny_tiny_seq2seq", "tiny_tiny_vit"])])
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
    if kind == "lsp":
        lines = case.text.count("\n") + 1
        case.call = tuple((rng.randint(0, lines + 2), rng.randint(0, 100)) for _ in range(LSP_POSITIONS))
        case.argv = ["saved" if rng.random() < 0.7 else "unsaved"]
    return case


def mutated_spec(rng: random.Random, text: str, case: Case, most: int = 3) -> str:
    for _ in range(rng.randint(0, most)):
        mutator = rng.choice(sorted(mutators.SPEC_MUTATORS))
        case.mutations.append(mutator)
        fn = mutators.SPEC_MUTATORS[mutator]
        text = fn(rng, text, rng.choice(list(seeds.all_seeds().values()))) if mutator == "splice" else fn(rng, text)
    return text


def extends_case(case: Case, rng: random.Random) -> Case:
    """base_0.yaml (a mutated seed spec), perhaps base_1.yaml extending it, and child.yaml extending
    the last (or a hostile path); a hidden file and a link out of the folder lie beside them."""
    name = rng.choice(sorted(seeds.TINY) * 3 + sorted(seeds.shipped()))
    case.seed_spec = name
    base = seeds.TINY.get(name) or seeds.shipped()[name]
    base = mutated_spec(rng, base, case, most=1) if rng.random() < 0.3 else base
    case.files = {"base_0.yaml": base, ".hidden.yaml": base, "link.yaml": "@link"}
    last, last_text = "base_0.yaml", base
    if rng.random() < 0.4:
        middle = mutators.child_spec(rng, "base_0.yaml", base)
        case.files["base_1.yaml"] = mutated_spec(rng, middle, case, most=1) if rng.random() < 0.25 else middle
        last, last_text = "base_1.yaml", middle
    target = last if rng.random() < 0.8 else rng.choice(mutators.EXTENDS_TARGETS)
    child = mutators.child_spec(rng, target, last_text)
    case.files["child.yaml"] = mutated_spec(rng, child, case, most=1) if rng.random() < 0.25 else child
    return case


def mapping_case(case: Case, rng: random.Random, files: dict[str, str]) -> Case:
    """A mutated mapping file, given to build_text with a timm-named checkpoint of tiny_vit."""
    pool = seeds.mappings()
    name = "timm_vit.yaml" if rng.random() < 0.6 else rng.choice(sorted(pool))
    case.seed_spec, text = name, pool[name]
    for _ in range(rng.choice([1, 1, 1, 2])):
        case.mutations.append("mapping")
        text = mutators.mapping(rng, text)
    case.files = {"fuzz_map.yaml": text}
    case.call = (files["ckpt_timm_vit.pt"],)
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

    write_files(case)
    try:
        if case.kind == "cli":
            return run_cli(case.argv)
        if case.kind == "lsp":
            return run_lsp(case)
        if case.kind == "extends":
            archspec.check("child.yaml")
            return "ok"
        if case.kind == "mapping":
            archspec.build_text(seeds.TINY["tiny_vit"], weights=case.call[0], mapping="fuzz_map.yaml")
            return "ok"
        if case.kind == "generate":
            return run_generate(case.call[0])
        if case.kind == "generate_cli":
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
        if case.kind in ("tensor_ops", "attention") and report.params <= BUILD_PARAMS:
            return build_what_checked(case.text, forward=True)
        return "ok"
    except SpecError as exc:
        return judge_spec_error(exc)
    except UsageError:
        return "usage_error"
    except InternalError as exc:
        return f"crash: InternalError: {str(exc).splitlines()[0][:200]}"
    except Exception as exc:  # noqa: BLE001 - what the fuzz is looking for
        return f"crash: {type(exc).__name__}: {str(exc)[:200]} @ {where(exc)}"


def write_files(case: Case) -> None:
    """The case's files into the current folder (the worker's copy of specs/); `@link` makes a
    symbolic link out of the folder, to a file that is no spec."""
    for name, text in case.files.items():
        if text == "@link":
            os.symlink("/etc/hostname", name)
            continue
        with open(name, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)


def run_lsp(case: Case) -> str:
    """The language server's analysis of the text: every call returns, and the diagnostics lie
    inside the text. Any exception is a crash: the server has no error to show for it."""
    from archspec.lsp import analysis

    path = os.path.join(os.getcwd(), f"fuzz_lsp_{case.index % 7}.yaml")
    if case.argv == ["saved"]:
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(case.text)
    try:
        analysis.looks_like_spec(case.text)
        result = analysis.analyse(case.text, path)
        found = analysis.diagnostics(result)
        lines = max(len(case.text.splitlines()), 1)
        for d in found:
            if not (0 <= d.line < lines and 0 <= d.start <= d.end and d.message):
                return f"crash: lsp diagnostic outside the text: line {d.line}, {d.start}-{d.end} of {lines} lines"
        for line, character in case.call:
            hover = analysis.hover(result, line, character)
            place = analysis.definition(result, line, character)
            if hover is not None and not isinstance(hover, str) or \
                    place is not None and not isinstance(place, analysis.Place):
                return f"crash: lsp answered {type(hover).__name__}, {type(place).__name__}"
    except Exception as exc:  # noqa: BLE001 - what the fuzz is looking for
        return f"crash: lsp {type(exc).__name__}: {str(exc)[:200]} @ {where(exc)}"
    return "ok"


def build_what_checked(text: str, forward: bool = False) -> str:
    """Build a spec the checker accepted: lowering must never fail on it. The one error allowed is the
    worker's build budget (ARCHSPEC_MAX_BUILD_BYTES), which check does not know about. With
    `forward`, the model also runs once on example inputs: a forward that fails is a wrong model
    that built silently."""
    import archspec
    from archspec.core.errors import SpecError

    try:
        model = archspec.build_text(text)
    except SpecError as exc:
        if all("ARCHSPEC_MAX_BUILD_BYTES" in (d.hint or "") for d in exc.diagnostics):
            return "over_budget"
        return f"crash: build refused what check accepted: {str(exc).splitlines()[0][:200]}"
    if forward:
        return run_forward(model, text)
    return "ok"


FORWARD_BUDGET = 1 << 30  # run.py's MEMORY_BYTES: a forward check counts above this is not run


def run_forward(model, text: str) -> str:
    """The model once on example inputs at batch 2, unless check's own estimate of that run (its
    outputs and the largest attention's score matrices, budget.needed_bytes) is over FORWARD_BUDGET:
    a 65,536-token attention that writes its scores out needs 34 GB, which check says (fuzz case
    19:41590); the worker's memory watch then measures archspec's allocations against that estimate."""
    import torch

    import archspec
    from archspec.budget import needed_bytes
    from archspec.compiler.backends.export import example_inputs

    report = archspec.check_text(text)
    if needed_bytes(report, runs_model=True, scores=True) > FORWARD_BUDGET:
        return "over_budget"
    graph = report.graph
    try:
        with torch.no_grad():
            model.eval()(*example_inputs(graph, batch=2))
    except Exception as exc:  # noqa: BLE001 - check accepted it: any failure is archspec's
        return f"crash: forward of what check accepted: {type(exc).__name__}: {str(exc)[:160]} @ {where(exc)}"
    return "ok"


_MODELS: dict[str, object] = {}


def generate_model():
    """tiny_lm, built once per worker."""
    import archspec

    if "tiny_lm" not in _MODELS:
        _MODELS["tiny_lm"] = archspec.build_text(seeds.TINY["tiny_lm"]).eval()
    return _MODELS["tiny_lm"]


class CountingStreamer:
    def __init__(self):
        self.count = 0

    def put(self, tokens):
        self.count += 1

    def end(self):
        pass


def generate_inputs(kwargs: dict) -> tuple:
    """(prompt, keyword arguments) with the drawn descriptions made into torch values."""
    import torch

    kwargs = dict(kwargs)
    prompts = {"one": torch.tensor([[1, 2, 3]]), "batch": torch.tensor([[1, 2, 3], [4, 5, 6]]),
               "empty": torch.zeros(1, 0, dtype=torch.long), "long": torch.ones(1, 40, dtype=torch.long),
               "float": torch.tensor([[1.0, 2.0]]), "big_id": torch.tensor([[1, 999]]),
               "negative_id": torch.tensor([[1, -2]]), "1d": torch.tensor([1, 2]), "3d": torch.ones(1, 2, 2).long(),
               "list": [[1, 2, 3]], "batch0": torch.zeros(0, 3, dtype=torch.long)}
    prompt = prompts[kwargs.pop("prompt")]
    width = prompt.shape[-1] if hasattr(prompt, "shape") and prompt.dim() >= 1 else 3
    batch = prompt.shape[0] if hasattr(prompt, "shape") and prompt.dim() == 2 else 1
    masks = {"ones": torch.ones(batch, width, dtype=torch.long),
             "left_pad": torch.cat([torch.zeros(batch, 1), torch.ones(batch, max(width - 1, 0))], 1).long(),
             "zeros": torch.zeros(batch, width, dtype=torch.long),
             "minus": torch.full((batch, width), -1), "nan": torch.full((batch, width), float("nan")),
             "list": [[1] * width] * batch, "short": torch.ones(batch, 1, dtype=torch.long),
             "float": torch.ones(batch, width)}
    if "attention_mask" in kwargs:
        kwargs["attention_mask"] = masks[kwargs["attention_mask"]]
    if kwargs.get("generator") == "seeded":
        kwargs["generator"] = torch.Generator().manual_seed(0)
    if kwargs.get("streamer") == "counting":
        kwargs["streamer"] = CountingStreamer()
    return prompt, kwargs


def run_generate(drawn: dict) -> str:
    """model.generate: new tokens of the right shape, or a ValueError/TypeError in words (for a
    keyword argument generate does not take, Python's own TypeError)."""
    import torch

    prompt, kwargs = generate_inputs(drawn)
    try:
        out = generate_model().generate(prompt, **kwargs)
    except (ValueError, TypeError) as exc:
        if not str(exc):
            return f"crash: generate raised {type(exc).__name__} without words"
        if type(exc) is TypeError and "unexpected keyword" in str(exc):
            return "type_error"
        raised_in = traceback.extract_tb(exc.__traceback__)[-1].filename
        if f"{os.sep}compiler{os.sep}" not in raised_in and f"{os.sep}archspec{os.sep}" not in raised_in:
            return f"crash: generate let out {type(exc).__name__} from {where(exc)} ({raised_in}): {str(exc)[:160]}"
        return "usage_error"
    except Exception as exc:  # noqa: BLE001 - what the fuzz is looking for
        return f"crash: generate {type(exc).__name__}: {str(exc)[:200]} @ {where(exc)}"
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.dtype != torch.long or \
            out.shape[0] != prompt.shape[0]:
        return f"crash: generate returned {type(out).__name__} {getattr(out, 'shape', '')}"
    if out.numel() and (int(out.min()) < 0 or int(out.max()) >= 64):
        return "crash: generate returned ids outside the vocabulary"
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
