"""The test processes' environment, set before any library starts a thread pool (``conftest``
imports this first)."""

from __future__ import annotations

import os

# No node uses a Hamilton extension: the suite, and every process it starts (README snippets,
# ingest workers, Dask workers), skips the autoloader's seconds of imports, as the CLI does.
# tests/test_extras.py checks a lookup with the autoloader on.
os.environ.setdefault("HAMILTON_AUTOLOAD_EXTENSIONS", "0")
# Nothing phones home from a test: Haystack's usage telemetry, the Agents SDK's trace export.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")


def share_the_cores_among_workers() -> None:
    """Under pytest-xdist (``make test`` runs ``-n 2``), each worker gets its own share of the
    cores, set before any thread pool starts: the model's (OpenVINO, ONNX Runtime, torch) and
    BLAS's size themselves to the cores a process may use, so two workers that each took every
    core would oversubscribe them (measured: a third more CPU time for the same tests). The
    processes a test starts inherit their worker's share."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1))
    if not worker or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if count <= len(cores):
        os.sched_setaffinity(0, cores[int(worker.removeprefix("gw")) :: count])


share_the_cores_among_workers()
