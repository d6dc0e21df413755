"""The ``lookup-knowledge`` command line: ingest, query, mcp, render, info and eval."""
