"""Named mutators of spec text, and a generator of hostile command lines.

Each spec mutator takes a `random.Random` and a spec's text and returns new text; a case
applies one to three of them. They aim at the classes issue 11 found: numbers that overflow,
names Python or torch reserve, long chains that resolve into one another, deep nesting,
hostile expressions, broken YAML, hostile `extends`, semantic slips. Below them: mapping files
(hostile rules, patterns and templates), extends chains (a child of a base, with edits of its
graph) and hostile command lines (bench's numbers among them).
"""

from __future__ import annotations

import keyword
import random
import re
import string

NUMBER = re.compile(r"(?<![\w.])-?\d+(\.\d+)?([eE]-?\d+)?(?![\w.])")
KEY = re.compile(r"^(\s*-?\s*)([A-Za-z_]\w*):", re.M)
ID_VALUE = re.compile(r"^(\s*-?\s*id:\s*)(\w+)", re.M)
SCALAR_VALUE = re.compile(r"^(\s*-?\s*[A-Za-z_]\w*:\s+)([^\s{\[#][^#\n]*?)\s*$", re.M)
KIND_VALUE = re.compile(r"(kind:\s*)(\w+)")

HOSTILE_NUMBERS = ["0", "1", "-1", "2", "3", "7", "0.5", "1.0e-6", "-0.0", "1e400", "-1e400", "1e-400", "1e308",
                   "9223372036854775807", "9223372036854775808", "99999999999999999999999999", "9" * 60,
                   "16777216", "16777217", "65536", "10000", "10001", ".inf", ".nan", "'7'", "0x10", "1_000",
                   "007", "+5", "2.5", "1e6", "4096", "1000000007"]
HOSTILE_NAMES = (sorted(keyword.kwlist) + ["self", "forward", "training", "state_dict", "to", "eval", "train", "half",
                 "meta", "graph", "code", "loss", "losses", "modules", "parameters", "_modules", "_x", "__init__",
                 "__class__", "objectives", "T_destination", "type", "float", "cuda", "apply", "zero_grad", "match",
                 "case", "print", "torch", "nn", "F", "math", "x_0", "inf", "nan", "a" * 300, "é", "_", "B", "i"])
KEYS = ["archspec", "name", "doc", "extends", "params", "dims", "inputs", "blocks", "graph", "outputs", "targets",
        "objectives", "requires", "mappings", "remove", "replace", "insert", "id", "from", "repeat", "as", "if",
        "attention", "mlp", "patchify", "merge", "head", "norm", "embed", "kind", "heads", "window", "dim", "patch",
        "ratio", "classes", "pool", "shape", "dtype", "grid", "kernel", "stride", "padding", "sr_ratio", "tie",
        "over_grid", "hidden", "max_len", "vocab", "cls_token", "pos", "shift", "add", "concat", "slice", "loss"]
KINDS = ["global", "window", "shifted", "sra", "linear_sra", "causal", "cross", "sliding", "alibi", "concat", "conv",
         "classify", "lm", "features", "contrastive", "pooler", "distilled", "reconstruct", "layer", "rms", "bogus"]
GARBAGE = ["${", "}", "${x}", "${1/0}", "!!python/object:os.system", "!!python/name:os.system", "<<: *a", "\t", ": ",
           "- ", "&a", "*a", "&a [1, 2]", "*b", "\n  - mlp: {}", "\n    bogus: 1", "{", "]", "#", "'", '"', "---\n",
           "%YAML 1.1\n", "? ", "|", ">", "@", "`", "\x00", "\ufeff", "\u2028", "\x85", "\r", "\\", "\udc80",
           "!custom 1", "!!binary aGk=", "!!set {a}", "!!omap [a: 1]", "${__import__('os')}", "${().__class__}",
           "${'%s' % 1}", "${[0]*10**9}", "${9**9**9}", "${range(10**12)}"]
EXPRESSIONS = ["${1/0}", "${x}", "${undefined}", "${[0]*10000}", "${'a' * 10000}", "${9**9**9}", "${2**63}",
               "${2**64}", "${-2**63}", "${1e308 * 10}", "${float('nan')}", "${int('9' * 999)}",
               "${linspace(0, 1, 10000)}", "${range(10000)}", "${sum(range(10000))}", "${[[0]*100]*100}",
               "${round(1, 31)}", "${len('x' * 10000)}", "${max([])}", "${min(1)}", "${abs(-3)}", "${True}",
               "${None}", "${'global'}", "${[1, 2][5]}", "${(1, 2)}", "${{1: 2}}", "${x.y}", "${lambda: 1}",
               "${[i for i in range(3)]}", "${f'{1}'}", "${1 if True else 2}", "${int(3.7)}", "${float(2)}",
               "${" + "(" * 150 + "1" + ")" * 150 + "}", "${" + "-" * 150 + "1}", "${" + "+".join(["1"] * 150) + "}",
               "${" + "x" * 1001 + "}", "${1 < 2 < 3}", "${'a' in 'abc'}", "${[1] + [2]}", "${[1, 2][::0]}",
               "${[1, 2][1:2:3]}", "${-(-(-1))}", "${not 1}", "${~1}", "${1 @ 2}", "${1 << 2}", "${a := 1}"]
EXTENDS = ["swin_t.yaml", "vit_b16.yaml", "missing.yaml", "/dev/zero", "/dev/null", "/dev/stdin", "/etc/passwd",
           "/proc/self/status", ".", "..", "../..", "/", "mappings", "examples/tiny_lm.yaml", "a" * 5000,
           "x\x00y", "~/x.yaml", "http://example.com/x.yaml", "${x}", "'swin_t.yaml'", "[a, b]", "{a: 1}"]


def number(rng: random.Random, text: str) -> str:
    spots = list(NUMBER.finditer(text))
    if not spots:
        return text
    m = rng.choice(spots)
    return text[:m.start()] + rng.choice(HOSTILE_NUMBERS + [str(rng.randint(-3, 5000))]) + text[m.end():]


def delete_line(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    del lines[rng.randrange(len(lines))]
    return "\n".join(lines)


def duplicate_line(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    return "\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])


def swap_lines(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def rename_key(rng: random.Random, text: str) -> str:
    spots = list(KEY.finditer(text))
    if not spots:
        return text
    m = rng.choice(spots)
    new = rng.choice([rng.choice(KEYS), rng.choice(HOSTILE_NAMES),
                      "".join(rng.choice(string.ascii_lowercase + "_") for _ in range(rng.randint(1, 8)))])
    return text[:m.start(2)] + new + text[m.end(2):]


def insert_garbage(rng: random.Random, text: str) -> str:
    at = rng.randint(0, len(text))
    piece = rng.choice([rng.choice(GARBAGE), "".join(rng.choice(string.printable) for _ in range(rng.randint(1, 12)))])
    return text[:at] + piece + text[at:]


def expression(rng: random.Random, text: str) -> str:
    spots = list(SCALAR_VALUE.finditer(text))
    if not spots:
        return text
    m = rng.choice(spots)
    value = rng.choice(EXPRESSIONS)
    value = f'"{value}"' if rng.random() < 0.5 else value
    return text[:m.start(2)] + value + text[m.end(2):]


def hostile_name(rng: random.Random, text: str) -> str:
    """An id, or the first input's name, replaced by a name Python or torch reserves."""
    spots = list(ID_VALUE.finditer(text))
    name = rng.choice(HOSTILE_NAMES)
    if spots and rng.random() < 0.7:
        m = rng.choice(spots)
        old = m.group(2)
        text = text[:m.start(2)] + name + text[m.end(2):]
        if rng.random() < 0.5:  # and its readers, so that the name is used, not dangling
            text = re.sub(rf"(?<=from: ){re.escape(old)}\b", name, text)
        return text
    m = re.search(r"^inputs:\s*\n(\s+)(\w+):", text, re.M)
    if m is None:
        return text
    return text[:m.start(2)] + name + text[m.end(2):]


def indent(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    lines[i] = " " * rng.choice([0, 1, 2, 3, 4, 6, 8, 12]) + lines[i].lstrip(" ")
    return "\n".join(lines)


def truncate(rng: random.Random, text: str) -> str:
    return text[:rng.randint(0, len(text))]


def characters(rng: random.Random, text: str) -> str:
    at = rng.randint(0, len(text))
    pool = ["\x00", "\x01", "\x7f", "\r", "\r\n", "\x85", "\u2028", "\u2029", "\ufeff", "\ud800", "\U0001f600", "é",
            "\u200b", "\t", "\x0b", "\x0c", "ï»¿"]
    return text[:at] + "".join(rng.choice(pool) for _ in range(rng.randint(1, 3))) + text[at:]


def splice(rng: random.Random, text: str, other: str = "") -> str:
    lines, theirs = text.split("\n"), other.split("\n") or [""]
    i, j = rng.randrange(len(lines)), rng.randrange(len(theirs))
    return "\n".join(lines[:i] + theirs[j:j + rng.randint(1, 8)] + lines[i:])


def semantic(rng: random.Random, text: str) -> str:
    """Valid-looking values in the wrong place: another kind, a window, a stride, causal over patches."""
    choice = rng.random()
    if choice < 0.4:
        spots = list(KIND_VALUE.finditer(text))
        if spots:
            m = rng.choice(spots)
            return text[:m.start(2)] + rng.choice(KINDS) + text[m.end(2):]
    for key in ("window", "pool", "stride", "padding", "kernel", "patch", "sr_ratio", "heads", "shift", "max_len"):
        if f"{key}:" in text and rng.random() < 0.3:
            return re.sub(rf"({key}:\s*)[^,}}\n]+", lambda m: m.group(1) + str(rng.choice([0, 1, 2, 3, 5, 8, 64, 999])),
                          text, count=1)
    return text.replace("kind: global", "kind: causal", 1) if rng.random() < 0.5 else text


def structure(rng: random.Random, text: str) -> str:
    """A long chain or deep structure appended to the spec: skipped nodes, repeat: 0, from aliases,
    params from one another, nested blocks, nested groups, repeats, aliases, YAML depth."""
    n = rng.choice([10, 100, 1000, 3000, rng.randint(1, 5000)])
    kind = rng.choice(["if", "repeat0", "from", "params", "blocks", "groups", "repeats", "aliases", "depth", "wide",
                       "typos", "unknown_names"])
    head = "name: chain\ninputs:\n  x: [B, 8, 16]\n"
    if kind == "if":
        return head + "graph:\n  - id: a\n    norm: {}\n" + "".join(
            f"  - id: s{i}\n    if: false\n    norm: {{}}\n" for i in range(n)) + "  - norm: {}\n"
    if kind == "repeat0":
        return head + "graph:\n  - id: a\n    norm: {}\n" + "".join(
            f"  - id: s{i}\n    repeat: 0\n    norm: {{}}\n" for i in range(n)) + "  - norm: {}\n"
    if kind == "from":
        return head + "graph:\n  - id: s0\n    norm: {}\n" + "".join(
            f"  - id: s{i}\n    from: s{i - 1}\n    if: {rng.choice(['false', 'true'])}\n    norm: {{}}\n"
            for i in range(1, n)) + f"  - from: s{n - 1}\n    norm: {{}}\n"
    if kind == "params":
        cycle = rng.random() < 0.2
        return "name: chain\nparams:\n" + "".join(f"  p{i}: ${{p{i + 1} + 1}}\n" for i in range(n)) + (
            f"  p{n}: ${{p0}}\n" if cycle else f"  p{n}: 1\n") + "inputs:\n  x: [B, 8, 16]\ngraph:\n  - norm: {}\n"
    if kind == "blocks":
        depth = rng.choice([5, 31, 32, 33, 40, 200])
        return head + "blocks:\n" + "".join(f"  b{i}:\n    graph:\n      - b{i + 1}: {{}}\n" for i in range(depth)) + (
            f"  b{depth}:\n    graph:\n      - norm: {{}}\ngraph:\n  - b0: {{}}\n")
    if kind == "groups":
        depth = rng.choice([5, 20, 31, 33, 40])
        body, pad = "", "  "
        for _ in range(depth):
            body += f"{pad}- graph:\n"
            pad += "    "
        return head + "graph:\n" + body + f"{pad}- norm: {{}}\n"
    if kind == "repeats":
        return head + f"graph:\n  - repeat: {rng.choice([100, 5000, 10000])}\n    graph:\n" \
                      f"      - repeat: {rng.choice([1, 2, 3])}\n        norm: {{}}\n"
    if kind == "typos":  # many nodes, each reading a misspelt one: every error asks for a "did you mean"
        return head + "graph:\n" + "".join(f"  - id: node_{i}\n    norm: {{}}\n" for i in range(n)) + "".join(
            f"  - id: r{i}\n    from: nodx_{i}\n    norm: {{}}\n" for i in range(n))
    if kind == "unknown_names":
        return "name: chain\nparams:\n" + "".join(f"  p_{i}: {i}\n" for i in range(n)) + \
            "inputs:\n  x: [B, 8, 16]\ngraph:\n" + "".join(f"  - norm: {{eps: '${{q_{i}}}'}}\n" for i in range(n))
    if kind == "aliases":
        return "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
            f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
            for p, c in zip("abcdefg", "bcdefgh")) + head + "graph:\n  - norm: {}\n"
    if kind == "depth":
        d = rng.choice([60, 64, 65, 100, 1000])
        return head + "graph:\n  - norm: {eps: " + "[" * d + "]" * d + "}\n"
    return head + "params:\n  xs: ${range(10000)}\ngraph:\n  - repeat: 2000\n    norm: {eps: " \
                  "\"${1e-6 if max(xs) > 0 else 1e-5}\"}\n"


def extends(rng: random.Random, text: str) -> str:
    target = rng.choice(EXTENDS)
    line = f"extends: {target}\n"
    if rng.random() < 0.5:
        text = re.sub(r"^graph:", "remove: [head]\ngraph:", text, count=1, flags=re.M) if rng.random() < 0.3 else text
        return line + re.sub(r"^(graph|inputs):.*?(?=^\w|\Z)", "", text, flags=re.M | re.S)
    return line + text


SPEC_MUTATORS = {f.__name__: f for f in (number, delete_line, duplicate_line, swap_lines, rename_key, insert_garbage,
                                         expression, hostile_name, indent, truncate, characters, splice, semantic,
                                         structure, extends)}


# -- command lines -----------------------------------------------------------------------------------

HOSTILE_SETS = ["img=256", "img=30", "img=0", "img=-1", "img=1e400", "img=" + "9" * 5000, "img=.nan", "img=${1/0}",
                "depth=0", "depth=10001", "depth=[1,2]", "dim=16777217", "heads=0", "=", "x", "img", "1=2",
                "img=[", "img={a: 1}", "img=!!python/object:os.system", "img=*a", "img=&a 1", "img=\x00",
                "window=${img // 32}", "bogus=1", "img=---\na: 1", "dpr=${linspace(0, 1, 10**9)}", "img= ", "img=",
                "classes=10", "patch=16", "depths=[2,2,18,2]", "window=1", "window=5"]
HOSTILE_SEEDS = ["0", "1", "-1", "18446744073709551615", "18446744073709551616", "9" * 40, "abc", "1.5", "", "0x10",
                 "-9223372036854775809"]
HOSTILE_COUNTS = ["0", "-1", "1", "2", "1001", "100001", "100000", "1000000000", "9" * 30, "x", "", "1.5"]
HOSTILE_BATCHES = ["1", "0", "-1", "64", "65", "1:8:64", "8:1:64", "1:1:1", "a:b:c", "1:2", "::", "", "9" * 30,
                   "1:8:99999999", "3:3:3"]


def command_line(rng: random.Random, files: dict[str, str]) -> list[str]:
    """A command line: a command, a spec path, and flags drawn from hostile pools (`files` maps a
    role — spec, bad_spec, fifo, dir, file, checkpoint names... — to paths the worker made)."""
    command = rng.choices(["check", "build", "graph", "bench", "schema", "primitives", "bogus", "--version", "--help",
                           ""], [45, 30, 10, 3, 3, 3, 2, 1, 1, 1])[0]
    argv = [command] if command else []
    spec_roles = [r for r in files if r.startswith(("spec", "tiny", "special"))]
    if rng.random() < 0.95:
        argv.append(files[rng.choice(spec_roles)] if rng.random() < 0.9 else
                    rng.choice(["missing.yaml", "", "-", "--", "/", ".", "a" * 5000, "x\x00y"]))
    for _ in range(rng.choice([0, 1, 1, 2, 3, 5])):
        argv += flag(rng, command, files)
    if rng.random() < 0.1:
        rng.shuffle(argv)
    return argv


def flag(rng: random.Random, command: str, files: dict[str, str]) -> list[str]:
    checkpoints = [p for r, p in files.items() if r.startswith("ckpt")]
    outs = [p for r, p in files.items() if r.startswith("out")]
    pool = [
        lambda: ["--set", rng.choice(HOSTILE_SETS)],
        lambda: ["--json"],
        lambda: ["--target", rng.choice(["eager", "eager", "eager", "bogus", "", "EXPORT"])],
        lambda: ["--seed", rng.choice(HOSTILE_SEEDS)],
        lambda: ["-o", rng.choice(outs)],
        lambda: ["--weights", rng.choice(checkpoints)],
        lambda: ["--map", rng.choice([files["file"], files["fifo"], files["dir"], "missing.yaml",
                                      files["garbage_map"]])],
        lambda: ["--batch", rng.choice(HOSTILE_BATCHES)],
        lambda: ["--batch", *rng.sample(["1", "2", "0", "2000", "100000000", "3"] + [str(n) for n in range(4, 24)],
                                        rng.randint(1, 20))],
        lambda: [rng.choice(["--threads", "--rounds", "--samples"]), rng.choice(HOSTILE_COUNTS)],
        lambda: ["--precision", rng.choice(["fp32", "fp16", "int8"])],
        lambda: ["--expand"],
        lambda: ["-o", rng.choice(["g.svg", "g.dot", "g.mmd", "g.html", "g.png", "g", "/", "missing/g.svg"])],
        lambda: [rng.choice(["--bogus", "-x", "--set", "--seed", "-o", "--weights", "--"])],
    ]
    return rng.choice(pool)()


# -- mapping files -----------------------------------------------------------------------------------

HOSTILE_PATTERNS = ["(a+)+$", "(.*)*x", "((a|a)*)*$", "^(?P<x>", "[", "\\", "(?=a)", "(?<=a)b", "a{1000000}",
                    "a{2,1}", "\\1", "(a)\\1", ".*" * 200, "x" * 400, "(?i)^head", "\\p{L}+", "^$", "", "$^",
                    "(" * 40 + ")" * 40, "^(.*)$", "^blocks\\.(\\d+)\\.", "\\Z", "(?>a)", "a*+", "${dim}", "${1/0}",
                    "^(head)\\.(weight|bias)$", "\\x00", "[^\\x00-\\x{10FFFF}]"]
HOSTILE_TEMPLATES = ["\\1", "\\9", "\\g<x>", "\\g<0>", "", ".", "..", "a..b", "x" * 300, "\\", "${dim}", "${1/0}",
                     "head.fc.weight", "blocks.\\1.attn.qkv.weight", "patch_embed.pos_embed", "${'a' * 10000}",
                     "norm.weight", "\\2\\1"]
HOSTILE_VALUES = ["0", "1", "-1", "2", "3", "1e400", "9" * 30, "'${dim}'", "'${dim * 2}'", "'${1/0}'", "'*'", "-2",
                  "1.5", "[]", "{}", "~", "'x'", ".nan"]


def quoted(text: str) -> str:
    """A YAML single-quoted scalar (quotes doubled; other characters as they are)."""
    return "'" + text.replace("'", "''") + "'"


STACK_PATTERNS = (quoted(r"^(.*)\.{index}\.w$"), quoted("{index}{index}"), quoted("[{index}]"))


def mapping_rule(rng: random.Random) -> str:
    """One rule of a mapping file, with hostile patterns, templates and values."""
    p, t, v = (lambda: quoted(rng.choice(HOSTILE_PATTERNS))), (lambda: quoted(rng.choice(HOSTILE_TEMPLATES))), \
        (lambda: rng.choice(HOSTILE_VALUES))
    rules = [
        lambda: f"rename: {{{p()}: {t()}}}",
        lambda: f"fuse: {{match: {p()}, parts: [{t()}, {t()}], into: {t()}, dim: {v()}}}",
        lambda: f"stack: {{match: {rng.choice([p(), *STACK_PATTERNS])}, into: {t()}, dim: {v()}}}",
        lambda: f"split: {{match: {p()}, into: [{t()}, {t()}], {rng.choice(['shares', 'sizes'])}: [{v()}, {v()}], "
                f"dim: {v()}}}",
        lambda: f"transpose: [{p()}]",
        lambda: f"reshape: {{match: {p()}, shape: [{v()}, {v()}, {v()}]}}",
        lambda: f"drop: [{p()}]",
        lambda: f"affine: {{match: {p()}, scale: {v()}, add: {v()}}}",
        lambda: f"copy: {{match: {p()}, into: [{t()}, {t()}]}}",
        lambda: f"create: {{match: {p()}, fill: {rng.choice(['zeros', 'ones', 'eye', 'nan', '1e400', '3', 'x'])}}}",
        lambda: f"{rng.choice(['renam', 'bogus', 'keep', 'rename'])}: {v()}",
    ]
    return "  - " + rng.choice(rules)()


def mapping(rng: random.Random, text: str) -> str:
    """A mapping file mutated: a hostile rule among its rules, a hostile `identify` or `keep`, or the
    generic spec mutators (numbers, lines, keys, garbage, characters, truncation)."""
    choice = rng.random()
    if choice < 0.55 and "\nrules:" in text:
        return text.replace("\nrules:\n", "\nrules:\n" + mapping_rule(rng) + "\n", 1) if rng.random() < 0.5 else \
            text.rstrip("\n") + "\n" + mapping_rule(rng) + "\n"
    if choice < 0.65:
        key = rng.choice(["identify", "keep"])
        return re.sub(rf"^{key}:.*$\n?", "", text, flags=re.M) + f"{key}: [{quoted(rng.choice(HOSTILE_PATTERNS))}]\n"
    generic = rng.choice(["number", "delete_line", "duplicate_line", "swap_lines", "rename_key", "insert_garbage",
                          "expression", "indent", "truncate", "characters"])
    return SPEC_MUTATORS[generic](rng, text)


# -- extends chains ------------------------------------------------------------------------------------

EXTENDS_TARGETS = ["vit_b16.yaml", "swin_t.yaml", "examples/tiny_lm.yaml", "base_0.yaml", "base_1.yaml",
                   "./base_0.yaml", "sub/../base_0.yaml", "missing.yaml", "child.yaml", "../specs/vit_b16.yaml",
                   "/proc/self/environ", "/dev/zero", "/etc/passwd", ".hidden.yaml", "base_0.txt", "mappings",
                   "a" * 300 + ".yaml", "x\x00y.yaml", "~/x.yaml", "${x}.yaml", "é.yaml", "link.yaml"]


def node_ids(text: str) -> list[str]:
    """The paths of a spec's graph nodes (into inline groups), as edits name them; the ids written in
    its text when it does not parse."""
    import yaml

    from archspec.language.names import node_names, taken_names

    try:
        data = yaml.safe_load(text)
    except Exception:  # noqa: BLE001 - a mutated base: any parse failure
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("graph"), list):
        return [m.group(2) for m in ID_VALUE.finditer(text)] or ["head"]
    paths, todo = [], [("", data["graph"], taken_names(data, ("graph",)))]
    while todo:
        prefix, items, taken = todo.pop()
        for item, name in zip(items, node_names(items, taken)):
            if not isinstance(name, str):  # no name, or a mutated id YAML reads as a bool or number
                continue
            paths.append(prefix + name)
            if isinstance(item, dict) and isinstance(item.get("graph"), list):
                todo.append((f"{prefix}{name}.", item["graph"], ()))
    return paths or ["head"]


def edit_path(rng: random.Random, ids: list[str]) -> str:
    """Mostly a node id of the base (a top-level node, or one inside a group: a path either way
    most of the time), sometimes a path that cannot be found or cannot be read."""
    if rng.random() < 0.85:
        return rng.choice(ids)
    path = ".".join(rng.choice(ids) for _ in range(rng.choice([2, 3])))
    return rng.choice([path, path + "x", rng.choice(HOSTILE_NAMES), "", ".", "a.", ".a", path + ".0", "*"])


def edits(rng: random.Random, ids: list[str]) -> str:
    """remove, replace and insert of a base graph's nodes: mostly well formed and naming nodes the
    base has, some paths unknown, some forms wrong."""
    def node() -> str:
        good = ["{norm: {}}", "{mlp: {ratio: 2.0}}", "{id: extra, norm: {}}", "{graph: [{norm: {}}]}",
                "{attention: {kind: global, heads: 2}}", "{id: extra_2, mlp: {hidden: 48}}"]
        return rng.choice(good) if rng.random() < 0.85 else rng.choice(["{bogus: 1}", "3", "[]", "{}", "~"])

    out = []
    for key in rng.sample(["remove", "replace", "insert"], rng.choice([1, 1, 2, 3])):
        count = rng.choice([1, 1, 2]) if rng.random() < 0.98 else 0
        paths = list(dict.fromkeys(edit_path(rng, ids) for _ in range(count)))
        if key == "remove":
            out.append("remove: [" + ", ".join(quoted(path) for path in paths) + "]")
        elif key == "replace":
            out.append("replace:" + "".join(f"\n  {quoted(path)}: {node()}" for path in paths))
        elif rng.random() < 0.95:
            side = rng.choice(["after", "before"]) if rng.random() < 0.95 else "bogus"
            out.append(f"insert:\n  - {{{side}: {quoted(edit_path(rng, ids))}, nodes: [{node()}]}}")
        else:
            out.append("insert: 3")
    return "\n".join(out) + "\n"


def child_spec(rng: random.Random, target: str, base_text: str) -> str:
    """A spec extending `target`: a new name, some params and blocks laid over the base's, and
    edits of its graph or a graph of its own."""
    lines = [f"extends: {quoted(target) if rng.random() < 0.7 else target}", f"name: child_{rng.randint(0, 9)}"]
    if rng.random() < 0.4:
        keys = rng.sample(["img", "dim", "depth", "heads", "window", "x"], rng.randint(1, 3))
        numbers = [rng.choice(HOSTILE_NUMBERS) if rng.random() < 0.15 else rng.choice(["1", "2", "4", "8", "32"])
                   for _ in keys]
        lines.append("params: {" + ", ".join(f"{key}: {number}" for key, number in zip(keys, numbers)) + "}")
    if rng.random() < 0.2:
        lines.append("blocks: {b: {graph: [{norm: {}}]}}")
    if rng.random() < 0.2:
        lines.append("inputs: {image: [B, 3, 64, 64]}")
    text = "\n".join(lines) + "\n"
    if rng.random() < 0.7:
        text += edits(rng, node_ids(base_text))
    elif rng.random() < 0.5:
        text += "graph:\n  - norm: {}\n"
    return text
