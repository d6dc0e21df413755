"""Adapters to the outside world (installed as ``lookup_knowledge.adapters``): search stores,
the embedder, the L0 index, corpus readers and the invocation recorder."""
