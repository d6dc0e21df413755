"""The tool where agent builders already are: one small module per framework, each an optional
extra that only that module imports (``pip install 'lookup-knowledge[langchain]'``, ...).

- :mod:`~lookup_knowledge.integrations.langchain`: a retriever (``Document`` per evidence block)
  and the ``lookup_knowledge`` and ``verify_answer`` tools;
- :mod:`~lookup_knowledge.integrations.llamaindex`: a retriever of ``NodeWithScore``;
- :mod:`~lookup_knowledge.integrations.haystack`: a pipeline component (``documents``, ``result``);
- :mod:`~lookup_knowledge.integrations.openai_agents`: the OpenAI Agents SDK's function tools;
- :mod:`~lookup_knowledge.integrations.pydantic_ai`: a Pydantic AI toolset.

Each runs its calls through one :class:`~lookup_knowledge.agent.lookup.AgentLookup` (recorded,
one session, one caller's principals): docs/integrations.md.
"""
