"""engine/core's modules import each other without a circle, counting imports under TYPE_CHECKING too (a circle
closed only for the type checker is still one a reader must untangle), and import neither torch nor roofline."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "engine" / "core"


def imports(path: Path) -> set[str]:
    """Every module a file imports, wherever the import statement sits."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_engine_core_has_no_import_circle_and_no_torch_or_roofline() -> None:
    graph = {}
    for path in sorted(CORE.glob("*.py")):
        found = imports(path)
        outside = sorted(n for n in found if n.split(".")[0] in ("torch", "roofline"))
        assert not outside, f"engine/core/{path.name} imports {outside}"
        name = f"engine.core.{path.stem}" if path.stem != "__init__" else "engine.core"
        graph[name] = {n for n in found if n.startswith("engine.core.") and n != name}
    assert len(graph) > 10
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as err:
        raise AssertionError(f"engine/core import circle: {' -> '.join(err.args[1])}") from err
    assert order.index("engine.core.request") < order.index("engine.core.fast_path") < order.index(
        "engine.core.scheduler")
