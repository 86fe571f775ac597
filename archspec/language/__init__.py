"""Floor 3, the spec language: safe YAML loading with positions (loader), `${...}`
expressions (expressions), the document's schema (schema, schema_json), `extends` with its
graph edits and `--set` (compose, over extends, edits and overrides), and expansion into the
IR (expand), which validates every node's parameters against the primitives. Imports no torch."""
