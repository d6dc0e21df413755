"""``lookup-knowledge serve``: one process owning the store and the model serves many agents over
HTTP, MCP (streamable HTTP) at ``/mcp`` and a JSON API under ``/v1`` (:mod:`.app`), with bearer
tokens mapped to principals (:mod:`.tokens`), limits (:mod:`.limits`) and Prometheus metrics
(:mod:`.metrics`)."""
