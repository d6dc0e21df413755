"""The dependency direction of docs/architecture.md: the DAG's nodes and the adapters never
import the layers built on them (``eval``, ``agent``, ``cli``); the port's wrappers forward all of it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lookup_knowledge.adapters.search import KnowledgeSearchPort
from lookup_knowledge.adapters.server_port import ReconnectingSearchPort
from lookup_knowledge.adapters.shared_store import SharedSearchPort
from lookup_knowledge.pipeline import build_driver

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


PORT_METHODS = sorted(
    name for name, member in vars(KnowledgeSearchPort).items() if callable(member) and name[0] != "_"
)


@pytest.mark.parametrize("wrapper", [SharedSearchPort, ReconnectingSearchPort], ids=lambda cls: cls.__name__)
def test_every_port_wrapper_forwards_every_port_method(wrapper: type) -> None:
    """A wrapper that inherits one of the port's defaults answers "cannot tell" for the store it
    wraps: a server-backed store's lookups then had no own-questions bar (``sample_chunks``)."""
    default = vars(KnowledgeSearchPort)
    inherited = [name for name in PORT_METHODS if getattr(wrapper, name) is default[name]]
    assert inherited == [], f"{wrapper.__name__} does not forward {inherited}"


STORE_READS = {
    "l1_answers",
    "unfiltered_hits",
    "probe_null",
    "query_term_idf",
}  # the nodes that ask the store


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_only_the_store_reads_take_the_search_port(mode: str) -> None:
    """Every other node reads what those return: the verdict's steps, the fallback, the rerank."""
    graph = build_driver({"l0_enabled": True, "l1_enabled": True, "retrieval_mode": mode}).graph
    readers = {node.name for node in graph.nodes.values() if "search_port" in node.input_types}
    assert readers == STORE_READS


def test_each_verdict_node_reads_at_once() -> None:
    """The verdict is spread over named nodes, none longer than about 25 lines."""
    tree = ast.parse((ROOT / "dataflows" / "abstention.py").read_text(encoding="utf-8"))
    nodes = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name[0] != "_"]
    long = {
        node.name: node.end_lineno - node.lineno + 1 for node in nodes if node.end_lineno - node.lineno >= 25
    }
    assert len(nodes) >= 10 and long == {}
