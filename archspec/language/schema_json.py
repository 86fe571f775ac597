"""The JSON Schema of the spec format, for editors (yaml-language-server, check-jsonschema) to
complete and validate specs. Every primitive parameter also accepts a `${...}` expression.

It is as strict as a static schema can be:
- a primitive's parameters are those of its kind (`kind: window` allows `window`, not `windw`);
  a node whose kind is an expression allows the keys of one kind of that primitive, with the
  types that kind gives them (and yaml-language-server says what is wrong with the keys, not
  that `${...}` is no kind);
- a node's op is a primitive, `graph`, or a block. A static schema cannot know the spec's
  block names, so it refuses the op names one typo away from a primitive or a node key (a
  swapped pair, a dropped or a wrong letter: `mpl`, `attnetion`, `nrom`) and allows the rest.
  `archspec schema SPEC` (`spec_json_schema(doc)`) knows the spec's blocks and their
  parameters, and refuses every other op.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..core.declared import pydantic_model
from ..primitives import registry
from .loader import Document
from .schema import META_KEYS, BlockDef, NodeMeta, SpecDoc

EXPRESSION = {"type": "string", "pattern": r"\$\{", "description": "an expression: ${...}"}
REF = "#/$defs/{model}"
GROUP = "graph"


def _allow_expressions(schema: dict) -> None:
    for prop, sub in list(schema.get("properties", {}).items()):
        if prop != "kind":
            _allow_in_items(sub)
            schema["properties"][prop] = {"anyOf": [sub, {"$ref": "#/$defs/Expression"}]}


def _allow_in_items(schema: dict) -> None:
    """Each entry of a list may be an expression too (`shape: ["${dims[0]}", "${grid}"]`), in
    the list's every form (`anyOf` of an int or a pair), and each value of a mapping
    (`sizes: {h: "${heads}"}`)."""
    for form in schema.get("anyOf", []) + schema.get("oneOf", []):
        if isinstance(form, dict):
            _allow_in_items(form)
    items = schema.get("items")
    if isinstance(items, dict):
        _allow_in_items(items)
        schema["items"] = {"anyOf": [items, {"$ref": "#/$defs/Expression"}]}
    for i, item in enumerate(schema.get("prefixItems", [])):
        schema["prefixItems"][i] = {"anyOf": [item, {"$ref": "#/$defs/Expression"}]}
    values = schema.get("additionalProperties")
    if isinstance(values, dict):
        _allow_in_items(values)
        schema["additionalProperties"] = {"anyOf": [values, {"$ref": "#/$defs/Expression"}]}
    for key, value in schema.get("patternProperties", {}).items():
        schema["patternProperties"][key] = {"anyOf": [value, {"$ref": "#/$defs/Expression"}]}


def _kind_schemas(primitive: str, defs: dict) -> list[dict]:
    """The parameters of each kind of a primitive (one schema when it has no kinds). A kind's
    `kind:` is its name or an expression: a node whose kind is an expression is valid when its
    keys are those of one kind (whichever kind the expression gives, the checker asks that
    much), and an editor that reports the closest kind's errors never calls the expression a
    wrong kind."""
    schemas = []
    for op in registry.ops():
        if op.primitive != primitive:
            continue
        schema = pydantic_model(op.Params).model_json_schema(ref_template=REF)
        for def_name, sub in schema.pop("$defs", {}).items():
            _allow_expressions(sub)
            defs[def_name] = sub
        _allow_expressions(schema)
        kind = schema.get("properties", {}).get("kind")
        if kind is not None:
            schema["properties"]["kind"] = {"anyOf": [kind, {"$ref": "#/$defs/Expression"}]}
        schemas.append(schema)
    return schemas


def _primitive_schema(primitive: str, defs: dict) -> dict:
    if registry.has_kinds(primitive):
        description = f"{primitive}: kinds " + ", ".join(registry.kinds(primitive))
    else:
        description = registry.op(primitive).doc.split("\n")[0]
    return {"anyOf": _kind_schemas(primitive, defs) + [{"type": "null"}], "description": description}


def typo_pattern(words) -> str:
    """A regex of the names one typo away from one of `words`, none of `words` themselves: two
    adjacent letters swapped (`mpl`); in words of four letters or more, one letter dropped
    (`atention`) or replaced by another (`nurm`). Short words get only swaps, so that short
    block names (`ffn`, `fc`) stay free."""
    variants: set[str] = set()
    for word in words:
        for i in range(len(word) - 1):
            variants.add(re.escape(word[:i] + word[i + 1] + word[i] + word[i + 2:]))
        if len(word) < 4:
            continue
        for i in range(len(word)):
            variants.add(re.escape(word[:i] + word[i + 1:]))
            variants.add(re.escape(word[:i]) + f"[^{re.escape(word[i])}]" + re.escape(word[i + 1:]))
    exact = "|".join(re.escape(w) for w in sorted(words))
    return rf"^(?!(?:{exact})$)(?:{'|'.join(sorted(variants))})$"


def _node_keys() -> list[str]:
    return list(registry.primitives()) + list(META_KEYS) + [GROUP]


def spec_json_schema(doc: Document | None = None) -> dict[str, Any]:
    """The schema of every spec; given a (composed) spec, the schema of that spec, whose nodes
    may use only its own blocks, with their parameters."""
    defs: dict[str, Any] = {"Expression": EXPRESSION}
    node_props: dict[str, Any] = {name: _primitive_schema(name, defs) for name in registry.primitives()}
    meta = pydantic_model(NodeMeta).model_json_schema(ref_template=REF, by_alias=True)
    node_props.update(meta["properties"])
    node_props[GROUP] = {"type": "array", "items": {"$ref": "#/$defs/Node"}, "description": "an inline group"}
    defs["Node"] = {
        "type": "object",
        "description": "a graph node: one op (a primitive, a block, or graph) plus id/from/repeat/as/if",
        "properties": node_props,
        "propertyNames": {"not": {"pattern": typo_pattern(_node_keys())},
                          "description": "an op one typo away from a primitive or a node key is a typo"},
        "additionalProperties": {"type": ["object", "null"], "description": "a block defined under `blocks`"},
    }
    if doc is not None:
        _only_these_blocks(defs["Node"], doc)
    top = pydantic_model(SpecDoc).model_json_schema(ref_template=REF)
    for def_name, sub in top.pop("$defs", {}).items():
        defs[def_name] = sub
    top["properties"]["graph"]["items"] = {"$ref": "#/$defs/Node"}
    block = pydantic_model(BlockDef).model_json_schema(ref_template=REF)
    block["properties"]["graph"]["items"] = {"$ref": "#/$defs/Node"}
    defs["BlockDef"] = block
    # A spec that `extends` another inherits name, inputs and graph: only a standalone spec needs them.
    required = top.pop("required", [])
    top["if"] = {"required": ["extends"]}
    top["else"] = {"required": required}
    top["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    top["title"] = "archspec spec" if doc is None else f"archspec spec: {_name_of(doc)}"
    top["$defs"] = defs
    return top


def _name_of(doc: Document) -> str:
    return str(doc.data.get("name", doc.file)) if isinstance(doc.data, dict) else doc.file


def _only_these_blocks(node: dict, doc: Document) -> None:
    """Nodes may use the spec's blocks (with their parameters, each a value or an expression)
    and nothing else besides primitives and node keys."""
    blocks = doc.data.get("blocks") if isinstance(doc.data, dict) else None
    for name, block in (blocks or {}).items() if isinstance(blocks, dict) else ():
        params = block.get("params") if isinstance(block, dict) else None
        names = list(params) if isinstance(params, dict) else []
        node["properties"][name] = {
            "anyOf": [{"type": "object", "properties": {p: {} for p in names}, "additionalProperties": False},
                      {"type": "null"}],
            "description": f"block {name}" + (f": {block.get('doc')}" if isinstance(block, dict) and block.get("doc")
                                              else "")}
    node["additionalProperties"] = False
    node.pop("propertyNames")
    json.dumps(node)  # the schema is plain JSON
