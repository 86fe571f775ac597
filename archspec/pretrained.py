"""`archspec.from_pretrained(DIR)`: a model folder (compiler/pretrained.py says what it holds)
built again: its spec checked with the params config.json records, and its weights loaded
strictly. Anything that does not fit is a SpecError located at the file and the spec node."""

from __future__ import annotations

import os

import torch

from .compiler.pretrained import CONFIG, check_params, inside, read_config
from .compiler.weights.checkpoint import read_state_dict
from .core.errors import Diagnostic, SpecError, error
from .core.ir import Graph


def from_pretrained(folder: str, seed: int = 0):
    """The model the folder `folder` holds (module docstring)."""
    from .budget import check_build_memory
    from .pipeline import check_file, lower_report

    data = read_config(folder)
    config_path = os.path.join(folder, CONFIG)
    spec = inside(folder, data["spec"], config_path, "spec")
    weights = inside(folder, data["weights"], config_path, "weights")
    for path, what in ((spec, "spec"), (weights, "weights")):
        if not os.path.isfile(path):
            raise error(f"{CONFIG}: the {what} file {data[what]!r} is not in {folder}")
    report = check_file(spec, data["params"])
    check_params(report.graph, data, config_path)
    check_build_memory(report, runs_model=False)
    model = lower_report(report, seed=seed)
    dtype = data.get("dtype", "float32")
    if dtype in ("bfloat16", "float16"):
        model.to(getattr(torch, dtype))
    load_folder_weights(model, report.graph, weights)
    return model.eval()  # as Hugging Face's from_pretrained: dropout and drop_path off until .train()


def load_folder_weights(model: torch.nn.Module, graph: Graph, path: str) -> None:
    """The folder's weights into `model`, strictly: a SpecError located at the spec node of the
    first tensor that is missing, extra, or of another shape."""
    state = read_state_dict(path)
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    extra = [k for k in state if k not in own]
    shapes = [k for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    problems = []
    for k in shapes:
        problems.append(at_node(graph, k, f"{path}: {k} is {list(state[k].shape)} there; the spec makes it "
                                          f"{list(own[k].shape)}", "the weights were saved from another model"))
    for k in missing:
        problems.append(at_node(graph, k, f"{path}: holds no tensor {k}", "the weights were saved from another model"))
    for k in extra:
        problems.append(Diagnostic(f"{path}: holds {k}, which the spec has no place for", None, None,
                                   "the weights were saved from another model"))
    if problems:
        raise SpecError(problems[:8])
    with torch.no_grad():
        model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()}, strict=True)


def at_node(graph: Graph, key: str, message: str, hint: str) -> Diagnostic:
    """A diagnostic at the spec node whose module holds the tensor `key` (its longest prefix)."""
    parts = key.split(".")[:-1]
    while parts:
        name = ".".join(parts)
        if name in graph:
            node = graph.node(name)
            return Diagnostic(message, node.loc, node.name, hint)
        parts.pop()
    return Diagnostic(message, None, None, hint)
