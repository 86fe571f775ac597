"""Which names a spec may give, for what the built torch model makes of them.

Node ids become attribute names of torch modules (`model.stages[2].blocks[1].attn`), and the
names of inputs (and of a block's inputs) become Python parameters of the generated
`forward` (in model.py too). So beyond the spec's own rule (letters, digits and `_`, not
starting with a digit), checked where the name is written:

- no name is a Python keyword (`class`, `lambda`, `None`, ...) or `self`;
- no node id is an attribute torch's modules already have (`forward`, `training`,
  `state_dict`, `to`, `eval`, ...), starts with `_` (torch's private attributes, present and
  future), or is a dunder; `objectives` is not a top-level node id, input or target (the
  losses live there).

This floor imports no torch, so the attribute names are listed here; tests/core/test_names.py
checks the list against the modules a build really makes (the root model, groups, repeats)
and builds every name `check` accepts.

And the one rule for the name a node gets (`node_names`), which expansion, the graph edits of
`extends` and the language server all read: its `id`, else its op counted past the names taken
before it.
"""

from __future__ import annotations

import keyword
from typing import Any, Iterable

from ..core.errors import Loc, SpecError, error
from .schema import META_KEYS

MODULE_ATTRIBUTES = frozenset("""
    T_destination add_module add_submodule apply bfloat16 buffers call_super_init check_inputs checkpointing children
    code compile cpu cuda default_cfg delete_all_unused_submodules delete_submodule double dump_patches eval
    extra_repr facts float forward forward_features forward_head forward_intermediates generate get_buffer
    get_extra_state get_parameter get_submodule graph group_matcher half ipu load_state_dict loss losses
    losses_from meta modules mtia named_buffers named_children named_modules named_parameters
    no_weight_decay num_classes parameters pretrained_cfg print_readable recompile register_backward_hook
    register_buffer register_forward_hook register_forward_pre_hook register_full_backward_hook
    register_full_backward_pre_hook register_load_state_dict_post_hook register_load_state_dict_pre_hook
    register_module register_parameter register_state_dict_post_hook register_state_dict_pre_hook
    requires_grad_ reset_classifier save_pretrained set_extra_state set_grad_checkpointing set_submodule shape_env
    share_memory state_dict to to_empty to_folder train training type xpu zero_grad
""".split())

OBJECTIVES = "objectives"  # the top-level path of the spec's losses


def node_names(items: list, taken: Iterable[str] = ()) -> list[str | None]:
    """Each node's name in a list of nodes (a graph, a block's graph, an inline group): its `id`,
    else its op counted past every name taken before it (`norm`, `norm_1`, ...; after an input
    named `norm`, the first `- norm: {}` is `norm_1`). `taken`: the names the list's scope holds
    before its first node (`taken_names`). None for an item with no op (expansion reports it)."""
    seen, counts, names = set(taken), {}, []
    for item in items:
        name = _node_name(item, seen, counts)
        names.append(name)
        if name is not None:
            seen.add(name)
    return names


def _node_name(item: Any, seen: set, counts: dict) -> str | None:
    if not isinstance(item, dict):
        return None
    if item.get("id") is not None:
        return item["id"] if isinstance(item["id"], str) else None
    op = next((key for key in item if key not in META_KEYS), None)
    if op is None:
        return None
    count = counts.get(op, 0)
    name = op if count == 0 else f"{op}_{count}"
    while name in seen:
        count += 1
        name = f"{op}_{count}"
    counts[op] = count + 1
    return name


def taken_names(data: Any, list_path: tuple) -> list[str]:
    """The names in scope before the first node of the list at `list_path` of a spec document:
    the top-level graph's inputs and targets, a block's inputs (`x` unless it names them); none
    for an inline group or the objectives."""
    if not isinstance(data, dict):
        return []
    if list_path == ("graph",):
        return [name for section in ("inputs", "targets") if isinstance(data.get(section), dict)
                for name in data[section]]
    blocks = data.get("blocks")
    if len(list_path) == 3 and list_path[::2] == ("blocks", "graph") and isinstance(blocks, dict):
        block = blocks.get(list_path[1])
        inputs = block.get("inputs", ["x"]) if isinstance(block, dict) else []
        return [name for name in inputs if isinstance(name, str)] if isinstance(inputs, list) else []
    return []


def python_name_problem(name: str) -> str | None:
    """Why `name` cannot be a Python name in the built model (None: it can)."""
    if keyword.iskeyword(name):
        return "is a Python keyword"
    if name == "self":
        return "is the name Python gives the module itself"
    return None


def node_id_problem(name: str, top_level: bool = False) -> str | None:
    """Why `name` cannot be a node's id in the built model (None: it can)."""
    if name.startswith("__") and name.endswith("__"):
        return "is a Python special name"
    if name.startswith("_"):
        return "starts with '_', which torch keeps for its modules' own attributes"
    if name in MODULE_ATTRIBUTES:
        return f"is taken: every module of the built model has an attribute `{name}`"
    if top_level and name == OBJECTIVES:
        return "is where the spec's losses live (`objectives`)"
    return python_name_problem(name)


def proposal(name: str, taken=()) -> str:
    """A valid name close to `name`: `class` -> `class_`, `_modules` -> `modules_`."""
    base = name.strip("_") or "node"
    if base[0].isdigit():
        base = f"n{base}"
    candidate, n = f"{base}_", 1
    while candidate in taken or node_id_problem(candidate) is not None:
        n += 1
        candidate = f"{base}_{n}"
    return candidate


def check_node_id(name: str, loc: Loc | None, top_level: bool = False, taken=(), given: bool = True) -> None:
    """A located error when `name` cannot be a node's id. `given`: the spec wrote it (`id:`);
    otherwise it is the default name a node gets from its op."""
    problem = node_id_problem(name, top_level)
    if problem is None:
        return
    if given:
        raise error(f"id '{name}' {problem}; ids name the modules of the built model", loc,
                    hint=f"rename it, e.g. `id: {proposal(name, taken)}`")
    raise error(f"this node would be named '{name}', which {problem}; names name the modules of the built model",
                loc, hint=f"give it an id, e.g. `id: {proposal(name, taken)}`")


def check_parameter_name(name: str, what: str, loc: Loc | None, taken=(), top_level: bool = False) -> SpecError | None:
    """The error for an input's (or a block input's) name that cannot be a Python parameter; a
    model's inputs and targets (`top_level`) are nodes of the graph too, so not `objectives`."""
    problem = python_name_problem(name)
    if problem is None and top_level and name == OBJECTIVES:
        problem = "is where the spec's losses live (`objectives`)"
    if problem is None:
        return None
    return error(f"{what} '{name}' {problem}; inputs become parameters of the model's forward", loc,
                 hint=f"rename it, e.g. '{proposal(name, taken)}'")
