"""Declarative stage configurations shipped with lookup-knowledge (``default.yaml``)."""
