"""The ``lookup-knowledge`` command line: ingest, query, mcp, render, info and eval.

Its processes do not autoload Hamilton's extensions (``HAMILTON_AUTOLOAD_EXTENSIONS=0`` unless
the environment says otherwise): the autoloader imports every installed library Hamilton has a
plugin for (scikit-learn, Dask, matplotlib, ...), about three seconds of every command's start,
and no lookup, ingest or eval node uses one (``eval --dask`` imports its executor itself).
Set before Hamilton is first imported, which the ``cli`` package's commands do when they run:
the modules import only Typer and Rich at load, so ``--help`` loads nothing else.
"""

import os

from lookup_knowledge.cli import wall  # noqa: F401 - starts the fallback clock of a command's wall time

os.environ.setdefault("HAMILTON_AUTOLOAD_EXTENSIONS", "0")
