"""The JSON Schema of the spec format, for editors (yaml-language-server) to complete and
validate specs. Every primitive parameter also accepts a `${...}` expression."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from compiler import primitives  # noqa: F401  (registers the primitives)
from compiler.registry import PRIMITIVES

from .schema import BlockDef, NodeMeta, SpecDoc

EXPRESSION = {"type": "string", "pattern": r"\$\{", "description": "an expression: ${...}"}
REF = "#/$defs/{model}"


def _allow_expressions(schema: dict) -> None:
    for prop, sub in list(schema.get("properties", {}).items()):
        if prop != "kind":
            schema["properties"][prop] = {"anyOf": [sub, {"$ref": "#/$defs/Expression"}]}


def spec_json_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {"Expression": EXPRESSION}
    node_props: dict[str, Any] = {}
    for name, prim in PRIMITIVES.items():
        schema = TypeAdapter(prim.params).json_schema(ref_template=REF)
        for def_name, sub in schema.pop("$defs", {}).items():
            _allow_expressions(sub)
            defs[def_name] = sub
        _allow_expressions(schema)
        schema["description"] = (prim.doc or "").strip().split("\n")[0]
        some_kind = {"type": "object", "required": ["kind"], "properties": {"kind": {"$ref": "#/$defs/Expression"}},
                     "description": "parameters whose kind is an expression (checked by archspec, not the editor)"}
        node_props[name] = {"anyOf": [schema, some_kind, {"type": "null"}]}
    meta = NodeMeta.model_json_schema(ref_template=REF, by_alias=True)
    node_props.update(meta["properties"])
    node_props["graph"] = {"type": "array", "items": {"$ref": "#/$defs/Node"}, "description": "an inline group"}
    defs["Node"] = {
        "type": "object",
        "description": "a graph node: one op (a primitive, a block, or graph) plus id/from/repeat/as/if",
        "properties": node_props,
        "additionalProperties": {"type": ["object", "null"], "description": "a block defined under `blocks`"},
    }
    top = SpecDoc.model_json_schema(ref_template=REF)
    for def_name, sub in top.pop("$defs", {}).items():
        defs[def_name] = sub
    top["properties"]["graph"]["items"] = {"$ref": "#/$defs/Node"}
    block = BlockDef.model_json_schema(ref_template=REF)
    block["properties"]["graph"]["items"] = {"$ref": "#/$defs/Node"}
    defs["BlockDef"] = block
    # A spec that `extends` another inherits name, inputs and graph: only a standalone spec needs them.
    required = top.pop("required", [])
    top["if"] = {"required": ["extends"]}
    top["else"] = {"required": required}
    top["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    top["title"] = "archspec spec"
    top["$defs"] = defs
    return top
