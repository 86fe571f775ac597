"""Names a spec gives (node ids, input names, block inputs) against what the built model makes of
them: `check` refuses, with a located error and a valid proposal, every name lowering could not
use, and lowering never fails on a name `check` accepted (archspec/language/names.py); and the
name a node without `id` gets is the same in expansion, the graph edits and the language server."""

from __future__ import annotations

import json
import keyword
import re
import subprocess
import sys

import pytest
import torch

import archspec
from archspec.language.compose import compose
from archspec.language.expand import expand
from archspec.language.loader import load_file
from archspec.language.names import MODULE_ATTRIBUTES, node_id_problem, proposal, python_name_problem

# Names Python, torch and archspec's model classes hold dear, and plain ones that must keep working.
CANDIDATES = sorted(set(keyword.kwlist) | {"self", "forward", "training", "state_dict", "to", "eval", "train",
                                            "half", "float", "type", "cuda", "apply", "meta", "graph", "code", "loss",
                                            "losses", "modules", "parameters", "children", "_modules", "_x", "__init__",
                                            "__x", "objectives", "T_destination", "dump_patches", "call_super_init",
                                            "match", "case", "print", "torch", "nn", "F", "math", "getattr", "x_0",
                                            "inf", "nan", "input", "output", "module", "block", "layer", "tensor",
                                            "Tensor", "B", "i", "fx_pytree", "operator", "builtins", "ones", "mlp"})


def spec_with(name: str, where: str) -> str:
    """A small spec naming something `name` (quoted where YAML would read True, None ... as no string)."""
    name = f"'{name}'" if where != "input" and where != "output" else name
    if where == "input":
        return (f"name: t\ninputs:\n  {name}: [B, 8, 16]\ngraph:\n  - attention: {{kind: global, heads: 2}}\n"
                "  - mlp: {ratio: 2}\n")
    if where == "id":
        return (f"name: t\ninputs:\n  x: [B, 8, 16]\ngraph:\n  - id: {name}\n"
                f"    attention: {{kind: global, heads: 2}}\n  - mlp: {{ratio: 2}}\n  - from: {name}\n    norm: {{}}\n"
                "outputs: [mlp, norm]\n")
    if where == "nested_id":
        return (f"name: t\ninputs:\n  x: [B, 8, 16]\ngraph:\n  - id: blocks\n    repeat: 2\n    graph:\n"
                f"      - id: {name}\n        attention: {{kind: global, heads: 2}}\n      - mlp: {{ratio: 2}}\n")
    if where == "block_input":
        return (f"name: t\ninputs:\n  x: [B, 8, 16]\nblocks:\n  b:\n    inputs: [{name}]\n    graph:\n"
                f"      - from: {name}\n        attention: {{kind: global, heads: 2}}\ngraph:\n  - b: {{}}\n")
    return (f"name: t\ninputs:\n  x: [B, 8, 16]\ngraph:\n  - id: a\n    attention: {{kind: global, heads: 2}}\n"
            f"  - mlp: {{ratio: 2}}\noutputs: {{{name}: a, y: mlp}}\n")


def built_model_runs(text: str, export: bool) -> None:
    """Lower, run, regenerate model.py and run it, and export (forward's parameter names go into
    the exported program): every place a name lands."""
    from archspec.compiler.backends.source import standalone_source

    model = archspec.build_text(text)
    x = torch.randn(2, 8, 16)
    expected = model(x)
    namespace: dict = {}
    exec(compile(standalone_source(model, "t", None), "model.py", "exec"), namespace)  # noqa: S102 - our own output
    standalone = namespace[type(model).__name__]()
    standalone.load_state_dict(model.state_dict())
    got = standalone(x)
    as_tuple = (lambda out: out if isinstance(out, tuple) else (out,))
    for a, b in zip(as_tuple(expected), as_tuple(got)):
        torch.testing.assert_close(a, b)
    if export:
        torch.export.export(model, (x,))


@pytest.mark.parametrize("where", ["input", "id", "nested_id", "block_input", "output"])
def test_every_name_check_accepts_builds_and_every_other_is_refused_with_a_valid_proposal(where):
    accepted = []
    for name in CANDIDATES:
        text = spec_with(name, where)
        try:
            archspec.check_text(text)
        except archspec.SpecError as exc:
            diag = exc.diagnostics[0]
            assert diag.loc is not None and diag.hint and "rename it" in diag.hint, diag.text()
            fixed = diag.hint.split("`id: ")[-1].rstrip("`") if "`id: " in diag.hint else diag.hint.split("'")[-2]
            assert node_id_problem(fixed) is None
            archspec.check_text(spec_with(fixed, where))  # the proposal passes
            continue
        accepted.append(name)
    assert accepted, "some names must pass"
    for name in accepted:
        built_model_runs(spec_with(name, where), export=where in ("input", "block_input"))


def test_keywords_self_and_module_attributes_are_refused_where_they_land():
    for name in keyword.kwlist + ["self"]:
        assert python_name_problem(name) is not None
        assert node_id_problem(name) is not None
    for name in ("forward", "training", "state_dict", "_anything", "__init__"):
        assert node_id_problem(name) is not None
        assert python_name_problem(name) is None  # an input may be called `forward`
    assert node_id_problem("objectives", top_level=True) and not node_id_problem("objectives")
    assert proposal("class") == "class_" and proposal("_modules") == "modules_"


ATTRIBUTES_OF_A_BUILD = """
import json, archspec
from archspec.compiler import hierarchy
model = archspec.build_text("name: t\\ninputs:\\n  x: [B, 8, 16]\\ngraph:\\n  - id: s\\n    repeat: 2\\n    graph:\\n"
                            "      - mlp: {ratio: 2}\\n      - norm: {}\\n  - id: g\\n    graph:\\n"
                            "      - mlp: {ratio: 2}\\n")
made = [model] + [m for m in model.modules() if isinstance(m, (hierarchy.Group, hierarchy.Stack))]
assert {type(m).__mro__[1] for m in made[1:]} == {hierarchy.Group, hierarchy.Stack}
attributes = set()
for module in made:
    attributes |= set(dir(module)) - {name for name, _ in module.named_children()}
print(json.dumps(sorted(a for a in attributes if not a.startswith("_"))))
"""


def test_the_attribute_list_covers_every_module_a_build_makes():
    """names.py lists the attributes without torch; this keeps it honest against the real classes
    (root model, groups, repeats) of the torch and archspec installed. It runs in a fresh
    interpreter: libraries imported by other tests patch torch.nn.Module (transformers adds
    `smart_apply` when it builds a model), and those are not attributes a build makes."""
    done = subprocess.run([sys.executable, "-c", ATTRIBUTES_OF_A_BUILD], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    missing = sorted(set(json.loads(done.stdout)) - MODULE_ATTRIBUTES)
    assert not missing, f"add these to MODULE_ATTRIBUTES in archspec/language/names.py: {missing}"


# Default names that collide: with an input (`norm`), an id (`norm_2`), a block's input (`mlp`).
COLLISIONS = """\
name: collisions
inputs:
  norm: [B, 8, 16]
blocks:
  b:
    inputs: [mlp]
    graph:
      - mlp: {ratio: 2}
      - mlp: {ratio: 2}
graph:
  - norm: {}
  - id: norm_2
    norm: {}
  - norm: {}
  - b: {}
  - id: g
    graph:
      - norm: {}
      - norm: {}
"""
COLLISION_NODES = ["norm_1", "norm_2", "norm_3", "b.mlp_1", "b.mlp_2", "g.norm", "g.norm_1"]


def test_expansion_the_graph_edits_and_the_language_server_name_nodes_alike(tmp_path):
    from archspec.lsp.analysis import analyse, hover

    base = tmp_path / "base.yaml"
    base.write_text(COLLISIONS)
    graph = expand(compose(load_file(str(base))))
    assert [n.name for n in graph.nodes() if not n.is_input] == COLLISION_NODES
    for path in ("norm_1", "norm_2", "norm_3", "g.norm", "g.norm_1"):  # edits name nodes outside blocks
        child = tmp_path / "child.yaml"
        child.write_text(f"extends: base.yaml\nname: child\ninsert:\n  - after: {path}\n"
                         "    nodes: [{id: marker, norm: {}}]\n")
        edited = expand(compose(load_file(str(child))))
        group = path.rpartition(".")[0]
        assert edited.inputs_of(f"{group}.marker" if group else "marker") == (path,)
    analysis = analyse(COLLISIONS, str(base))
    hovered = [hover(analysis, line, text.index("-") + 2) for line, text in enumerate(COLLISIONS.splitlines())
               if text.lstrip().startswith("- ")]
    one_node = [re.search(r"^`([\w.]+)`$", h, re.MULTILINE) for h in hovered]
    assert sorted(m.group(1) for m in one_node if m) == sorted(COLLISION_NODES)
