"""Reading the project's YAML files (hardware profiles, workloads, prices): one reader, one error line.

    data = read_yaml(path)  # the parsed document; a UserError naming file and line if it is malformed

libyaml's parser where PyYAML has it (`yaml.CSafeLoader`: the same documents, ~10x faster than the pure-Python
`SafeLoader`, which stands in otherwise), and a key given twice in one mapping is an error rather than PyYAML's
silent last-one-wins.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from roofline.errors import UserError

_SafeLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UniqueKeyLoader(_SafeLoader):  # type: ignore[misc, valid-type]
    """A safe loader that rejects a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key}'", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.2 (and JSON) read `1e30` as a number; PyYAML follows YAML 1.1, whose floats need a dot (`1.0e+30`), and
# returns the text "1e30". Read both as numbers, so that a field written either way is checked as the number it is.
UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
                                      list("-+0123456789"))


def read_yaml(path: str | Path) -> Any:
    """The document of a YAML file; malformed YAML (or a duplicate key) is a `UserError` naming file and line."""
    path = Path(path)
    try:
        return yaml.load(path.read_text(), Loader=UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise UserError(f"{path}: malformed YAML{line}: {problem}") from None
