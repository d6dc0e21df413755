"""The dependency direction of docs/architecture.md: the DAG's nodes and the adapters never
import the layers built on them (``eval``, ``agent``, ``cli``, ``integrations``); the port's
wrappers forward all of it; and each concept is declared once (a choice's ``Literal`` values, a
contract type)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path
from typing import get_type_hints

import pytest

from lookup_knowledge import contract, ranking
from lookup_knowledge.adapters.search import KnowledgeSearchPort
from lookup_knowledge.adapters.server_port import ReconnectingSearchPort
from lookup_knowledge.adapters.shared_store import SharedSearchPort
from lookup_knowledge.dataflows.retrieval import fallback_decision
from lookup_knowledge.pipeline import build_driver

ROOT = Path(__file__).resolve().parents[1]
UPPER_LAYERS = (
    "lookup_knowledge.eval",
    "lookup_knowledge.agent",
    "lookup_knowledge.cli",
    "lookup_knowledge.integrations",
)


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


# --- one definition per concept -----------------------------------------------------------------

PACKAGE_FILES = sorted(
    path
    for folder in ("lookup_knowledge", "dataflows", "adapters", "configs")
    for path in (ROOT / folder).rglob("*.py")
)


def literal_declarations(path: Path) -> list[tuple[frozenset, int]]:
    """Each ``Literal[...]`` of two or more values in a file (aliases and inline annotations
    alike): its set of values, and its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "Literal"
        ):
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            values = frozenset(item.value for item in items if isinstance(item, ast.Constant))
            if len(values) > 1:
                found.append((values, node.lineno))
    return found


def test_each_set_of_literal_values_is_declared_once() -> None:
    """A choice (``Quantize``, a backend, a text format) spelled in two places drifts apart."""
    places: dict[frozenset, list[str]] = {}
    for path in PACKAGE_FILES:
        for values, line in literal_declarations(path):
            places.setdefault(values, []).append(f"{path.relative_to(ROOT)}:{line}")
    repeated = {tuple(sorted(values)): where for values, where in places.items() if len(where) > 1}
    assert repeated == {}


def test_the_check_sees_an_inline_literal(tmp_path: Path) -> None:
    module = tmp_path / "config.py"
    module.write_text(
        'Quantize = Literal["none", "int8"]\nx: Literal["int8", "none"] = "none"\n', encoding="utf-8"
    )
    assert literal_declarations(module) == [
        (frozenset({"none", "int8"}), 1),
        (frozenset({"none", "int8"}), 2),
    ]


def literal_aliases(path: Path) -> list[str]:
    """The module-level names a file binds to a ``Literal[...]``."""
    return [
        ast.unparse(target)
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Subscript)
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "Literal"
        for target in node.targets
    ]


def test_each_literal_alias_is_defined_once() -> None:
    homes: dict[str, list[str]] = {}
    for path in PACKAGE_FILES:
        for name in literal_aliases(path):
            homes.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert {name: where for name, where in homes.items() if len(where) > 1} == {}


def _dag_types() -> dict[str, set[str]]:
    """The dataclasses the DAG's modules declare, with their fields."""
    declared = {}
    for path in sorted(ROOT.glob("dataflows/*.py")):
        module = importlib.import_module(f"lookup_knowledge.dataflows.{path.stem}")
        for name, member in vars(module).items():
            if dataclasses.is_dataclass(member) and member.__module__ == module.__name__:
                declared[name] = {field.name for field in dataclasses.fields(member)}
    return declared


DAG_TYPES = _dag_types()
CONTRACT_MODELS = {
    name: set(member.model_fields)
    for name, member in vars(contract).items()
    if isinstance(member, type)
    and issubclass(member, contract.ContractModel)
    and member is not contract.ContractModel
}


@pytest.mark.parametrize("dag_type", list(DAG_TYPES))
def test_no_contract_model_copies_a_dag_type(dag_type: str) -> None:
    """A contract model is the DAG's own type (``FallbackDecisionTrace``) or read from it by name
    (``AttemptTrace`` from ``SearchAttempt``), never a second declaration of the same fields."""
    fields = DAG_TYPES[dag_type]
    copies = [
        model
        for model, model_fields in CONTRACT_MODELS.items()
        if len(fields & model_fields) >= 3 and (fields <= model_fields or model_fields <= fields)
    ]
    assert copies == []


def test_the_fallback_decision_is_the_contracts_own_type() -> None:
    assert get_type_hints(fallback_decision)["return"] is contract.FallbackDecisionTrace


STORE_READS = {
    "l1_answers",
    "fused_answers",  # a few-matches search fused again
    "unfiltered_hits",
    "other_language_hits",  # a question's search over the chunks in other languages
    "probe_null",
    "query_term_idf",
    "word_idf",  # a CJK query's words' IDF
}  # the nodes that ask the store


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_only_the_store_reads_take_the_search_port(mode: str) -> None:
    """Every other node reads what those return: the verdict's steps, the fallback, the rerank."""
    graph = build_driver({"l0_enabled": True, "l1_enabled": True, "retrieval_mode": mode}).graph
    readers = {node.name for node in graph.nodes.values() if "search_port" in node.input_types}
    assert readers == STORE_READS


RANKING_RULES = {
    name
    for name, member in vars(ranking).items()
    if inspect.isfunction(member) and member.__module__ == ranking.__name__
} | {"DBSF_FULL_SCALE"}
RANKING_WORDS = ("untie", "tie_break", "few_matches", "refus")  # a name that says it decides a ranking


def ranking_decisions(path: Path) -> set[str]:
    """The functions, classes and module-level names a file defines that are, or are named like,
    the DAG's ranking rules (``lookup_knowledge/ranking.py``), and its imports of them."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        defined |= {target.id for target in targets if isinstance(target, ast.Name)}
    found = {
        name for name in defined if name.strip("_") in RANKING_RULES or any(w in name for w in RANKING_WORDS)
    }
    return found | {name for name in imported_modules(path) if name == ranking.__name__}


@pytest.mark.parametrize("path", sorted(ROOT.glob("adapters/*.py")), ids=str)
def test_no_adapter_makes_a_ranking_decision(path: Path) -> None:
    """A store answers with its engine's lists as the engine ranked them; fusing a few-matches
    search again and ordering equal scores are the DAG's (``fused_answers``, ``ranked_hits``),
    where the trace shows them."""
    assert ranking_decisions(path) == set()


def test_the_ranking_check_sees_a_tie_break_and_a_refusion(tmp_path: Path) -> None:
    module = tmp_path / "store.py"
    module.write_text(
        "TIE = 6\ndef _untied(points):\n    return sorted(points)\n"
        "class Request:\n    def few_matches_search(self, n):\n        return self\n"
        "def hits():\n    from lookup_knowledge.ranking import rank\n",
        encoding="utf-8",
    )
    assert ranking_decisions(module) == {"_untied", "few_matches_search", "lookup_knowledge.ranking"}


def test_the_ranking_decisions_are_nodes_the_trace_shows() -> None:
    graph = build_driver({"l0_enabled": True, "l1_enabled": True, "retrieval_mode": "hybrid"}).graph
    assert {"fused_answers", "ranked_hits"} <= set(graph.nodes)
    assert "ranked_hits" in {node.name for node in graph.nodes["l1_searches"].dependencies}


def test_each_verdict_node_reads_at_once() -> None:
    """The verdict is spread over named nodes, none longer than about 25 lines."""
    tree = ast.parse((ROOT / "dataflows" / "abstention.py").read_text(encoding="utf-8"))
    nodes = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name[0] != "_"]
    long = {
        node.name: node.end_lineno - node.lineno + 1 for node in nodes if node.end_lineno - node.lineno >= 25
    }
    assert len(nodes) >= 10 and long == {}


def test_no_layer_below_imports_a_framework_integration() -> None:
    """The framework plugs (lookup_knowledge/integrations/) sit on top, like ``cli``: nothing else
    of the package imports them, so no framework loads unless its plug is imported."""
    importing = [
        path.relative_to(ROOT)
        for path in PACKAGE_FILES
        if "integrations" not in path.parts
        and any(name.startswith("lookup_knowledge.integrations") for name in imported_modules(path))
    ]
    assert importing == []
