"""Hamilton node modules of the lookup_knowledge dataflow (installed as ``lookup_knowledge.dataflows``)."""
