"""The ``lookup-knowledge`` command line: ingest, query, mcp, render, info and eval.

Its processes do not autoload Hamilton's extensions (``HAMILTON_AUTOLOAD_EXTENSIONS=0`` unless
the environment says otherwise): the autoloader imports every installed library Hamilton has a
plugin for (scikit-learn, Dask, matplotlib, ...), about three seconds of every command's start,
and no lookup, ingest or eval node uses one (``eval --dask`` imports its executor itself).
Set before Hamilton is first imported, which the ``cli`` package's modules do.
"""

import os

os.environ.setdefault("HAMILTON_AUTOLOAD_EXTENSIONS", "0")
