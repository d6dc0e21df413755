"""A light import, and a one-line message naming the pip extra for each optional feature."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from access_fixtures import comparable, differences

from lookup_knowledge import KnowledgeTool, load_config
from lookup_knowledge.extras import EXTRAS, MissingExtraError, require

CLI = Path(sys.executable).with_name("lookup-knowledge")
HEAVY = ("sqlalchemy", "matplotlib", "dask", "mcp", "scipy", "pytrec_eval", "torch", "hamilton")


def test_importing_the_package_loads_no_sql_plotting_dask_mcp_or_model_code() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import lookup_knowledge"],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()}
    assert not imported & set(HEAVY)


def hamilton_default_environment() -> dict[str, str]:
    """This environment without the suite's autoloader setting (conftest): Hamilton's default."""
    return {k: v for k, v in os.environ.items() if k != "HAMILTON_AUTOLOAD_EXTENSIONS"}


def test_the_command_line_loads_no_hamilton_extension_or_server_client_it_does_not_use() -> None:
    """Hamilton's extension autoloader (scikit-learn, Dask, matplotlib, ...) and qdrant-client
    (for a store that is not embedded) cost every command seconds of start; the CLI loads neither."""
    loads = "import lookup_knowledge.cli.app, lookup_knowledge.agent.lookup"  # the CLI, then a query's needs
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", loads],
        capture_output=True,
        text=True,
        check=True,
        env=hamilton_default_environment(),
    )
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()}
    assert "hamilton" in imported  # the check is not vacuous: the CLI does build drivers
    assert not imported & {"sklearn", "matplotlib", "dask", "scipy", "qdrant_client"}


def test_a_lookup_with_hamilton_extensions_autoloaded_gives_the_same_result(sample_store: Path) -> None:
    """The suite runs with the autoloader off (conftest); an agent process may have it on (the
    default outside the CLI): its extensions change nothing a lookup returns."""
    query = "Who must approve a refund above 500 EUR?"
    script = (
        "import json, sys\n"
        "from lookup_knowledge import KnowledgeTool, load_config\n"
        "from hamilton import registry\n"
        "assert 'pandas' in registry.DF_TYPE_AND_COLUMN_TYPES, 'the autoloader did not run'\n"
        "with KnowledgeTool.from_config(load_config(overrides={'store.path': sys.argv[1]})) as tool:\n"
        "    print(tool.lookup(sys.argv[2]).model_dump_json(by_alias=True))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(sample_store), query],
        capture_output=True,
        text=True,
        env=hamilton_default_environment(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    config = load_config(overrides={"store.path": str(sample_store)})
    with KnowledgeTool.from_config(config) as tool:  # the configured embedder, as the other process
        here = tool.lookup(query).model_dump(by_alias=True, mode="json")
    there = json.loads(done.stdout)
    assert there["found"] is True
    assert differences(comparable(there), comparable(here)) == []


def test_public_names_still_resolve_on_first_use() -> None:
    import lookup_knowledge

    assert lookup_knowledge.load_config().retrieval.effective_return_n == 5
    with pytest.raises(AttributeError):
        lookup_knowledge.no_such_name  # noqa: B018


def test_a_missing_extra_names_the_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRAS, "eval", ("pytrec_eval", "no_such_module_xyz"))
    with pytest.raises(MissingExtraError) as raised:
        require("eval", "lookup-knowledge eval")
    assert str(raised.value) == (
        "lookup-knowledge eval needs the 'eval' extra (no_such_module_xyz not installed): "
        "pip install 'lookup-knowledge[eval]'"
    )


@pytest.mark.parametrize(
    ("blocked", "argv", "extra"),
    [
        ("matplotlib", ["eval", "queries.parquet"], "eval"),
        ("mcp", ["mcp"], "mcp"),
        ("distributed", ["ingest", "kb", "--dask", "tcp://127.0.0.1:1"], "dask"),
        ("psycopg", ["query", "x", "--set", "recorder.url=postgresql+psycopg://u@localhost/db"], "postgres"),
    ],
)
def test_the_cli_answers_a_missing_extra_in_one_line(blocked: str, argv: list[str], extra: str) -> None:
    """The package is hidden from the import system (as if not installed) in a child process."""
    script = (
        "import importlib.util, sys\n"
        f"real = importlib.util.find_spec\n"
        f"importlib.util.find_spec = lambda name, *a: None if name == {blocked!r} else real(name, *a)\n"
        "from lookup_knowledge.cli.app import app\n"
        f"app({argv!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 2
    assert f"pip install 'lookup-knowledge[{extra}]'" in done.stderr
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
