"""The dependency direction of docs/architecture.md: the DAG's nodes and the adapters never
import the layers built on them (``eval``, ``agent``, ``cli``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UPPER_LAYERS = ("lookup_knowledge.eval", "lookup_knowledge.agent", "lookup_knowledge.cli")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted([*ROOT.glob("dataflows/*.py"), *ROOT.glob("adapters/*.py")]), ids=str)
def test_dataflows_and_adapters_never_import_eval_agent_or_cli(path: Path) -> None:
    upward = {name for name in imported_modules(path) if name.startswith(UPPER_LAYERS)}
    assert upward == set(), f"{path.relative_to(ROOT)} imports {sorted(upward)}"


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "node.py"
    module.write_text("def f():\n    from lookup_knowledge.eval.batch import lookup_many\n", encoding="utf-8")
    assert "lookup_knowledge.eval.batch" in imported_modules(module)
