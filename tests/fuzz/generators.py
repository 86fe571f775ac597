"""Generated specs and calls for the newer surfaces (issue 37): tensor-op graphs (topk, expand,
unfold, fold, gather, scatter, einsum, argsort, constant with symbolic shapes, expressions with
math functions), attention with score parts and options (sinks, mod score graphs, local_window,
softcap, kdim/vdim, YaRN rotary), MLPs with MoE options, `share: true`, and generate's arguments
(model.generate keyword arguments, `archspec generate` flags).

Each generator draws well-formed pieces most of the time and a hostile value some of the time
(sizes that do not fit, wrong dtypes, huge numbers), so that most cases reach the shape rules,
and the ones check accepts are small enough to build.
"""

from __future__ import annotations

import random

SIZES = [1, 2, 3, 4, 5, 6, 8, 16, 40]
ODD_NUMBERS = [0, -1, -3, 7, 33, 2**31, 2**63, 10**30, "1e400", ".nan", "'x'", "[]", "{}", "~"]


def size(rng: random.Random, good: list, hostile: float = 0.08):
    return rng.choice(ODD_NUMBERS) if rng.random() < hostile else rng.choice(good)


# -- tensor-op graphs -----------------------------------------------------------------------------------

EXPRESSIONS = ["${sqrt(16)}", "${int(sqrt(64))}", "${ceil(log(17, 2))}", "${floor(exp(2))}", "${int(exp(1) * 3)}",
               "${2 ** int(log(8, 2))}", "${max(1, floor(sqrt(n)))}", "${sign(-3)}", "${where(n > 4, 4, n)}",
               "${abs(sign(n)) * 4}", "${log(0)}", "${sqrt(-1)}", "${exp(1000)}", "${log(-1)}", "${ceil(1e400)}",
               "${floor(float('nan'))}", "${exp(710)}", "${int(log(2, 1))}", "${where(1, 2)}", "${sqrt('x')}",
               "${log(n, 0)}", "${round(sqrt(n), 2)}", "${min(ceil(sqrt(n)), 8)}"]


def tensor_step(rng: random.Random, last: str, names: list[str], n: int, c: int) -> str:
    """One node reading `last` (and perhaps another earlier node)."""
    other = rng.choice(names)
    k = size(rng, [1, 2, 3, n, n + 1])
    steps = [
        lambda: f"topk: {{k: {k}, axis: {rng.choice([-1, 1, 2, -2, 0, 3])}, largest: {rng.choice(['true', 'false'])}"
                f", output: {rng.choice(['values', 'indices', 'indices'])}}}",
        lambda: f"argsort: {{descending: {rng.choice(['true', 'false'])}}}",
        lambda: f"from: [{last}, {other}], gather: {{count: {size(rng, [1, 2, 4, n, n * 2])}, "
                f"skip_prefix: {rng.choice(['false', 'false', 'true'])}}}",
        lambda: f"from: [{other}, {last}, {rng.choice(names)}], scatter: {{count: {size(rng, [1, 2, 4, n])}}}",
        lambda: f"from: [{last}, {other}], expand: {{}}",
        lambda: f"expand: {{shape: [{rng.choice(['B', 1, -1])}, {size(rng, [-1, n, 1, 2 * n])}, "
                f"{size(rng, [-1, c, 1])}]}}",
        lambda: f"from: [{last}, {other}], einsum: {{eq: \"{rng.choice(EINSUMS)}\"}}",
        lambda: f"einsum: {{eq: \"{rng.choice(EINSUMS1)}\"}}",
        lambda: f"constant: {{shape: [{', '.join(rng.sample(['L', 'L', str(n), str(c), '2'], rng.randint(1, 3)))}]"
                f", {rng.choice(['fill: eye', 'fill: index', 'fill: ones', 'value: 0.5', 'fill: index, along: 1', 'value: 1.0e300', 'fill: index, along: 9'])}}}",
        lambda: f"rearrange: {{pattern: \"{rng.choice(REARRANGES)}\"{rng.choice(['', ', as: image', ', as: tokens'])}}}",
        lambda: f"unfold: {{kernel: {size(rng, [1, 2, 3])}, stride: {size(rng, [1, 2])}, padding: {rng.choice([0, 1])}}}",
        lambda: f"fold: {{size: {size(rng, [2, 4, 6, 8])}, kernel: {size(rng, [1, 2, 3])}, stride: {size(rng, [1, 2])}}}",
        lambda: f"softmax: {{axis: {rng.choice([-1, 1, 2, 5])}}}",
        lambda: f"reduce: {{fn: {rng.choice(['sum', 'mean', 'max', 'min'])}, keepdim: {rng.choice(['true', 'false'])}}}",
        lambda: f"linear: {{dim: {size(rng, [4, 8, c])}}}",
        lambda: f"compare: {{op: {rng.choice(['gt', 'ge', 'lt', 'eq'])}, value: {rng.choice([0, 1, 0.5, 3])}, "
                f"dtype: {rng.choice(['float32', 'int64'])}}}",
        lambda: f"scale: {{factor: \"{rng.choice(EXPRESSIONS)}\"}}",
        lambda: f"from: [{last}, {other}], {rng.choice(['add', 'multiply', 'subtract', 'divide'])}: {{}}",
        lambda: "to_image: {}", lambda: "to_tokens: {}",
        lambda: f"norm: {{kind: {rng.choice(['layer', 'rms', 'batch'])}}}",
        lambda: f"conv: {{out: {size(rng, [2, 4, 8])}, kernel: {rng.choice([1, 3])}}}",
        lambda: f"attention: {{kind: global, heads: {rng.choice([1, 2])}}}",
        lambda: f"mlp: {{ratio: 2.0}}",
        lambda: f"head: {{kind: classify, classes: 3}}",
        lambda: f"select: {{index: {rng.choice([0, -1, n, 99])}}}",
        lambda: f"slice: {{start: {rng.choice([0, 1, 2])}, stop: {size(rng, [1, n, n + 5])}}}",
    ]
    return rng.choice(steps)()


EINSUMS = ["b n c, b n c -> b n", "b q d, b k d -> b q k", "b n c, b m c -> b n m", "b q k, b k d -> b q d",
           "b n c, b n d -> b c d", "b n, b n -> b", "b n c, b c -> b n", "b k -> b", "b i j, b j -> b i",
           "b n c, b n c -> b n c", "b x, b y -> b x y"]
EINSUMS1 = ["b n c -> b c n", "b n c -> b n", "b n c -> b c", "b i i -> b i", "b n -> b", "b k -> b"]
REARRANGES = ["b n c -> b c n", "b (h w) c -> b c h w", "b c h w -> b (h w) c", "b n c -> b (n c)",
              "b n -> b n 1", "b n -> b 1 n", "b (h w) -> b 1 h w", "b n c -> b n c 1"]


def tensor_spec(rng: random.Random) -> str:
    """A graph of tensor ops over an input or two (float tokens, int64 ids, a symbolic length)."""
    n, c = rng.choice([4, 6, 8, 16]), rng.choice([4, 8, 16])
    inputs = {"x": f"[B, {n}, {c}]", "noise": f"[B, {n}]",
              "ids": f"{{shape: [B, {rng.choice([n, 40, 16])}], dtype: int64}}"}
    symbolic = rng.random() < 0.3
    if symbolic:
        inputs["y"] = f"[B, L, {c}]"
    lines = [f"name: tensor_ops_{rng.randint(0, 99)}", f"params: {{n: {n}, c: {c}}}"]
    if symbolic:
        lines.append(f"dims: {{L: [{rng.choice([1, 2, 4])}, {rng.choice([8, 16, 64])}], M: [1, 8]}}")
    else:
        lines.append("dims: {L: [2, 16], M: [1, 8]}")
    lines.append("inputs:")
    lines += [f"  {name}: {shape}" for name, shape in inputs.items()]
    lines.append("graph:")
    names = list(inputs)
    last = rng.choice(names)
    for i in range(rng.randint(1, 6)):
        step = tensor_step(rng, last, names, n, c)
        if step.startswith("constant:"):
            source = "from: y, " if symbolic and "L" in step else ""
        else:
            source = "" if step.startswith("from:") else f"from: {last}, "
        lines.append(f"  - {{id: t{i}, {source}{step}}}")
        last = f"t{i}"
        names.append(last)
    lines.append(f"outputs: [{last}]")
    return "\n".join(lines) + "\n"


# -- attention with score parts and options ----------------------------------------------------------------

MODS = ["{mod: {steps: [{out: {tanh: score}}]}}",
        "{mod: {steps: [{t: {divide: [score, 30.0]}}, {u: {tanh: t}}, {out: {multiply: [u, 30.0]}}]}}",
        "{mod: {steps: [{far: {greater: [q, k]}}, {out: {where: [far, score, -1.0e9]}}]}}",
        "{mod: {steps: [{out: {add: [score, h]}}]}}",
        "{mod: {steps: [{out: {bogus: [score]}}]}}",
        "{mod: {steps: [{out: {add: [score, missing]}}]}}",
        "{mod: {steps: [{a: {exp: score}}, {out: {log: a}}]}}",
        "{mod: {steps: [{out: {clamp: [score, -5.0, 5.0]}}]}}",
        "{mod: {steps: []}}",
        "{mod: {steps: [{out: {divide: [score, 0.0]}}]}}",
        "{mod: {tensors: [nobody], steps: [{out: {at: [nobody, h]}}]}}"]
PARTS = ["sinks", "softcap", "{softcap: {cap: 30.0}}", "{softcap: {cap: 1.0e300}}", "{local_window: {window: 2}}",
         "{local_window: {window: 0}}", "{local_window: {window: 99}}", "talking_heads", "relative_table",
         "decomposed", "rotary_grid", "{rotary_grid: {theta: 1.0e-300}}", "bogus"] + MODS
KINDS = ["global", "causal", "causal", "sliding", "sliding", "cross", "alibi", "window", "class"]


def attention_options(rng: random.Random, kind: str) -> list[str]:
    options = [f"kind: {kind if rng.random() < 0.98 else 'bogus'}", f"heads: {size(rng, [1, 2, 4])}"]
    if kind in ("window", "sliding") and rng.random() < 0.95:
        options.append(f"window: {size(rng, [2, 4])}")
    pool = {
        "kv_heads": lambda: str(size(rng, [1, 2, 3])),
        "head_dim": lambda: str(size(rng, [4, 8, 16])),
        "rope_theta": lambda: rng.choice(["10000.0", "150000.0", "10000.0", "1.0e-300"]),
        "rope_yarn": lambda: rng.choice(["32.0", "4.0", "1.0", "1.0e300"]),
        "rope_original_length": lambda: str(size(rng, [4, 16, 4096])),
        "rope_truncate": lambda: rng.choice(["true", "false"]),
        "kdim": lambda: str(size(rng, [8, 16, 24])),
        "vdim": lambda: str(size(rng, [8, 16, 24])),
        "scale": lambda: rng.choice(["0.5", "0.25", "1.0e300"]),
        "norm": lambda: rng.choice(["pre", "post", "none", "sandwich"]),
        "norm_kind": lambda: rng.choice(["rms", "layer"]),
        "qk_norm": lambda: rng.choice(["rms", "layer", "none"]),
        "qk_norm_over": lambda: rng.choice(["head", "each_head", "all_heads", "bogus"]),
        "qk_norm_bias": lambda: rng.choice(["true", "false"]),
        "bias": lambda: rng.choice(["true", "false"]),
    }
    keys = [key for key in sorted(pool) if kind == "cross" or key not in ("kdim", "vdim") or rng.random() < 0.05]
    for key in rng.sample(keys, rng.randint(0, 4)):
        options.append(f"{key}: {pool[key]()}")
    if rng.random() < 0.7:
        parts = rng.sample(PARTS, rng.choice([1, 1, 2]))
        options.append(f"scores: [{', '.join(parts)}]")
    return options


def mlp_options(rng: random.Random) -> list[str]:
    options = [rng.choice(["ratio: 2.0", f"hidden: {size(rng, [8, 16, 32])}"])]
    if rng.random() < 0.6:
        experts = size(rng, [2, 4, 8])
        options += [f"experts: {experts}", f"top_k: {size(rng, [1, 2, 4, 9])}"]
        pool = {"router_score": lambda: rng.choice(["softmax", "sigmoid", "softmax_chosen", "bogus"]),
                "router_bias": lambda: rng.choice(["true", "false"]),
                "router_correction": lambda: rng.choice(["true", "false"]),
                "router_groups": lambda: str(size(rng, [1, 2, 3])),
                "router_top_groups": lambda: str(size(rng, [1, 2, 3])),
                "router_normalize": lambda: rng.choice(["true", "false"]),
                "router_scale": lambda: rng.choice(["1.0", "2.5", "1.0e300", "0.0"]),
                "shared_experts": lambda: str(size(rng, [1, 2])),
                "experts_layout": lambda: rng.choice(["out_in", "in_out"]),
                "gated": lambda: rng.choice(["true", "false"]),
                "gate_layout": lambda: rng.choice(["halves", "value_first", "interleaved"]),
                "gate_limit": lambda: rng.choice(["7.0", "0.3", "1.0e300"]),
                "value_offset": lambda: rng.choice(["1.0", "0.0", "1.0e300"])}
        for key in rng.sample(sorted(pool), rng.randint(0, 5)):
            options.append(f"{key}: {pool[key]()}")
    return options


def attention_spec(rng: random.Random) -> str:
    """A small sequence (tokens or ids) model whose layers draw attention kinds, score parts and
    options, MoE MLPs, and `share: true` repeats."""
    dim, n = rng.choice([8, 16]), rng.choice([4, 16])
    ids = rng.random() < 0.5
    lines = [f"name: attention_{rng.randint(0, 99)}", "inputs:"]
    if ids:
        lines += [f"  ids: {{shape: [B, {'L' if rng.random() < 0.5 else n}], dtype: int64}}"]
        lines.insert(1, f"dims: {{L: [1, {n}]}}")
    else:
        lines += [f"  x: [B, {n}, {dim}]"]
    lines.append(f"  memory: [B, 5, {rng.choice([dim, 24])}]")
    lines.append("graph:")
    if ids:
        lines.append(f"  - {{id: embed, from: ids, embed: {{vocab: 32, dim: {dim}, pos: "
                     f"{rng.choice(['learned', 'none', 'sincos'])}, max_len: {n}}}}}")
    else:
        lines.append(f"  - {{id: embed, from: x, norm: {{}}}}")
    layers = rng.randint(1, 3)
    share = rng.random() < 0.3
    lines.append(f"  - id: layers\n    repeat: {layers if rng.random() < 0.95 else rng.choice([0, -1, 4])}" +
                 (f"\n    share: {rng.choice(['true', 'true', 'true', 'false', 'yes'])}" if share else "") +
                 "\n    graph:")
    kind = rng.choice(KINDS)
    reads = "\n        from: [embed, memory]" if kind == "cross" and rng.random() < 0.9 else ""
    lines.append(f"      - id: attn{reads}\n        attention: {{{', '.join(attention_options(rng, kind))}}}")
    lines.append(f"      - id: mlp\n        mlp: {{{', '.join(mlp_options(rng))}}}")
    if ids and rng.random() < 0.7:
        lines.append(f"  - {{id: head, head: {{kind: lm, {'tie: embed' if rng.random() < 0.5 else 'vocab: 32'}}}}}")
    elif rng.random() < 0.5:
        lines.append("  - {id: head, head: {kind: classify, classes: 3}}")
    return "\n".join(lines) + "\n"


# -- generate's arguments -----------------------------------------------------------------------------------

def generate_kwargs(rng: random.Random) -> dict:
    """Keyword arguments for model.generate, hostile some of the time (torch values are built in the
    worker: this returns plain descriptions, `prompt` among them)."""
    kwargs: dict = {"max_new_tokens": rng.choice([0, 1, 2, 4, 8, 12, -1, 2**70, "5", 1.5, None, 10**6])}
    pool = {
        "do_sample": lambda: rng.choice([True, False, "yes", 1]),
        "temperature": lambda: rng.choice([0.7, 1.0, 1e-45, 1e-40, 0.0, -1.0, float("inf"), float("nan"), 1e300, "1"]),
        "top_k": lambda: rng.choice([1, 5, 0, -1, 10**9, 2.5, None]),
        "top_p": lambda: rng.choice([0.9, 1.0, 0.0, 2.0, float("nan"), -0.1, None]),
        "eos_token_id": lambda: rng.choice([1, 63, 64, -1, 2**70, [1, 2], [1, -1], [], 1.5, "1", None]),
        "pad_token_id": lambda: rng.choice([0, 63, 64, -1, 2**70, 1.5, None]),
        "attention_mask": lambda: rng.choice(["ones", "left_pad", "zeros", "minus", "nan", "list", "short", "float"]),
        "generator": lambda: rng.choice(["seeded", 5, None]),
        "streamer": lambda: rng.choice(["counting", "broken", None, 3]),
        "decoder_start_token_id": lambda: rng.choice([0, 1, -1, 2**70, None]),
        "bogus": lambda: 1,
    }
    for key in rng.sample(sorted(pool), rng.randint(0, 4)):
        kwargs[key] = pool[key]()
    kwargs["prompt"] = rng.choice(["one", "batch", "empty", "long", "float", "big_id", "negative_id", "1d", "3d",
                                   "list", "batch0"])
    return kwargs


GENERATE_FLAGS = [
    lambda rng: ["--ids", rng.choice(["1,2,3", "1", "", ",", "1,,2", "-1", "64", "99999999999999999999999", "a,b",
                                      "1.5", " 1 , 2 ", ",".join(["1"] * 40), "1;2"])],
    lambda rng: ["--max-new-tokens", rng.choice(["0", "1", "4", "-1", "1000000", "9" * 30, "x", "1.5"])],
    lambda rng: ["--do-sample"],
    lambda rng: ["--temperature", rng.choice(["0.7", "0", "-1", "1e-45", "inf", "nan", "1e400", "x"])],
    lambda rng: ["--top-k", rng.choice(["1", "0", "-5", "100000", "9" * 30, "x"])],
    lambda rng: ["--top-p", rng.choice(["0.9", "0", "1", "2", "nan", "-0.5"])],
    lambda rng: ["--eos", rng.choice(["1", "-1", "64", "99999999999999999999999", "x", ""])],
    lambda rng: ["--decoder-start", rng.choice(["0", "-1", "64", "9" * 30])],
    lambda rng: ["--seed", rng.choice(["0", "-1", "18446744073709551616", "x"])],
    lambda rng: ["--set", rng.choice(["dim=16", "vocab=0", "vocab=2", "dim=" + "9" * 30, "bogus=1", "dim=x"])],
]


def generate_argv(rng: random.Random, spec: str) -> list[str]:
    """`archspec generate` with a spec path and hostile flags (always --ids, mostly good)."""
    argv = ["generate", spec, "--ids", "1,2,3" if rng.random() < 0.7 else GENERATE_FLAGS[0](rng)[1],
            "--max-new-tokens", rng.choice(["2", "4"])]
    for _ in range(rng.choice([0, 1, 2, 3])):
        argv += rng.choice(GENERATE_FLAGS)(rng)
    return argv
