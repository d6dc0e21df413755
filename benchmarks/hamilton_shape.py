"""Hamilton alone: a driver over the lookup DAG's exact shape whose nodes do no work.

The benchmarks run it beside the real lookups to show what the framework itself costs per
lookup, the part no node-level work can remove.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from hamilton import ad_hoc_utils, driver

from lookup_knowledge.pipeline import ExecutedNodes


def _returning_at_once(name: str, parameters: list[str]) -> Callable[..., object]:
    """A node function called ``name`` with these parameters that does no work."""

    def node_function(**_: object) -> object:
        return None

    node_function.__name__ = node_function.__qualname__ = name
    node_function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [  # optional, as the real nodes' defaulted inputs are (source_staleness, access_scope)
            inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=object)
            for p in parameters
        ],
        return_annotation=object,
    )
    node_function.__annotations__ = {**dict.fromkeys(parameters, object), "return": object}
    return node_function


def shape_only_driver(dataflow: driver.Driver) -> driver.Driver:
    """A driver over the lookup DAG's exact shape (nodes, edges, config) whose nodes do no work,
    with the executed-node hook: what Hamilton itself costs per lookup."""
    functions = [
        _returning_at_once(node.name, [dependency.name for dependency in node.dependencies])
        for node in dataflow.graph.nodes.values()
        if not node.user_defined
    ]
    module = ad_hoc_utils.create_temporary_module(*functions, module_name="lookup_shape")
    return (
        driver.Builder()
        .with_modules(module)
        .with_config(dict(dataflow.graph.config))
        .with_adapters(ExecutedNodes())
        .build()
    )
