"""check's first reading of a spec's mapping files (archspec/language/mapping_sources.py): an
unknown rule (`fuze:`, the StarCoder2 trial's) or top-level key is a warning at check, located in
the mapping file with the closest name, where it used to pass check and stop the load at
`build --weights`; check still imports neither pydantic nor torch for it (the first attempt did,
through the load's parser), and its tables of keys and rules are the load's."""

from __future__ import annotations

import subprocess
import sys

import archspec
from archspec.language.mapping_sources import MAPPING_KEYS, RULE_NAMES

SPEC = """\
archspec: 1
name: mapped
inputs:
  x: [B, 4, 8]
graph:
  - {id: fc, linear: {dim: 8}}
mappings: [m.yaml]
"""

MAPPING = """\
archspec: 1
name: my map
rules:
  - rename: {'^a$': b}
  - fuse: {match: '^x\\\\.{part}$', parts: [q, k], into: qk}
"""


def warnings_of(tmp_path, mapping: str) -> list[str]:
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "m.yaml").write_text(mapping)
    return [w.text() for w in archspec.check(str(tmp_path / "spec.yaml")).warnings]


def test_a_misspelled_rule_is_a_located_warning_with_the_closest_rule(tmp_path):
    found = warnings_of(tmp_path, MAPPING.replace("- fuse:", "- fuze:"))
    assert len(found) == 1 and "m.yaml:5:5: warning: unknown rule 'fuze' in the mapping file" in found[0]
    assert "did you mean 'fuse'" in found[0]


def test_an_unknown_top_level_key_is_a_located_warning(tmp_path):
    found = warnings_of(tmp_path, MAPPING.replace("name: my map", "nmae: my map"))
    assert len(found) == 1 and "m.yaml:2:1: warning: unknown key 'nmae'" in found[0]
    assert "did you mean 'name'" in found[0]


def test_a_good_mapping_file_gives_no_warning(tmp_path):
    assert warnings_of(tmp_path, MAPPING) == []


def test_the_tables_are_the_loads():
    from archspec.compiler.weights.mapping_file import RULE_KINDS, MappingDoc

    assert set(RULE_NAMES) == set(RULE_KINDS) and set(MAPPING_KEYS) == set(MappingDoc.model_fields)


def test_check_with_a_mapping_file_imports_neither_pydantic_nor_torch(tmp_path):
    warnings_of(tmp_path, MAPPING)
    code = ("import sys, archspec; archspec.check(sys.argv[1]); "
            "print(sorted(m for m in ('torch', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "spec.yaml")], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
