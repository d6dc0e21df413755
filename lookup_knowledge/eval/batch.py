"""Batched lookups: the same DAG as a single lookup, with embeddings and searches done in batches.

Each query runs through ``KnowledgeTool``'s Hamilton driver in two steps. First the DAG runs up
to ``l1_requests``, what it would ask the store (the query vectors of its chunk, encoded as one
batch, handed in as an override of ``query_vector``); then the requests of every query of the
chunk go to the store as one ``search_batch``, the hybrid searches among them whose BM25 leg
matched few chunks go fused again as one more (the DAG's own rule,
``lookup_knowledge.ranking.few_matches_searches``), and the DAG runs on from there with each
query's answers as its ``l1_answers`` and ``fused_answers`` (and the nodes it already computed as
overrides). The requests are the DAG's own, whatever fields its nodes put in them (filter,
fallback companion, any later field), so a batched result equals the single-call result by
construction. A search the DAG makes past that point (the ``threshold`` rule's retry) goes to
the store live; a batch the store fails is asked again, per query, by the DAG's own
``l1_answers`` or ``fused_answers``, which trace the errors.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lookup_knowledge.adapters.search import Candidates, SearchRequest
from lookup_knowledge.agent.failures import rejected_result
from lookup_knowledge.agent.knowledge_tool import KnowledgeTool
from lookup_knowledge.agent.request import RejectedRequest
from lookup_knowledge.blas import one_blas_thread
from lookup_knowledge.config import Config
from lookup_knowledge.contract import LookupResult, NodeTiming
from lookup_knowledge.dataflows.retrieval import SearchAnswer
from lookup_knowledge.pipeline import ANSWER_NODE, FUSED_NODE, REQUEST_NODE
from lookup_knowledge.ranking import few_matches_searches

CHUNK_SIZE = 100  # at most this many queries embedded, and searched, together
VECTOR_NODE = "query_vector"


@dataclass(frozen=True, slots=True)
class PlannedLookup:
    """One query's DAG run up to its store requests: the nodes it computed, with their timings
    (``query_vector`` as its share of the batch's embedding)."""

    values: dict[str, Any]
    timings: list[NodeTiming]

    @property
    def requests(self) -> list[SearchRequest]:
        return self.values[REQUEST_NODE]


@dataclass(frozen=True, slots=True)
class BatchedAnswers:
    """The store's answers to one query's requests, from the batch, and its share of the batch's
    time; and the same answers with the few-matches searches fused again, from the chunk's one
    more batch (``None`` when that batch failed: the DAG's ``fused_answers`` then asks alone)."""

    answers: list[SearchAnswer]
    share_ms: float
    fused: list[SearchAnswer] | None = None
    fused_share_ms: float = 0.0


@dataclass(frozen=True)
class ToolProvider:
    """Where a batch of eval lookups runs: on the caller's open ``tool`` (in-process executor),
    or on a tool built from ``config`` by whichever worker runs the batch (Dask: only the
    configuration travels; every worker opens the configured store itself)."""

    config: Config
    tool: KnowledgeTool | None = field(default=None, compare=False)

    @contextmanager
    def open(self) -> Iterator[KnowledgeTool]:
        """The tool for one batch; a tool built here is closed afterwards."""
        if self.tool is not None:
            yield self.tool
            return
        with KnowledgeTool.from_config(self.config) as tool:
            yield tool

    def __getstate__(self) -> dict:
        if self.tool is not None:
            raise TypeError("an open tool cannot leave its process; give only the configuration")
        return {"config": self.config, "tool": None}

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)


def lookup_many(
    tool: KnowledgeTool,
    queries: Sequence[str],
    pinned_categories: Sequence[str | None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> list[LookupResult]:
    """Look up every query (in order), batching embeddings and searches per chunk of queries.

    The next chunk's queries are embedded on a worker thread while this chunk's DAGs run: the
    model releases the GIL as it encodes, so its time overlaps the nodes' Python work instead of
    adding to it (eval throughput: docs/benchmarks.md). BLAS keeps one thread throughout, set
    once for all the lookups.
    """
    pinned = list(pinned_categories) if pinned_categories is not None else [None] * len(queries)
    chunks = [_chunk(tool, queries[span], pinned[span]) for span in _spans(len(queries))]
    results: list[LookupResult] = []
    with one_blas_thread(), ThreadPoolExecutor(1, thread_name_prefix="lookup-embedding") as encoder:
        upcoming = [encoder.submit(_query_vectors, tool, chunk) for chunk in chunks[:1]]
        for n, chunk in enumerate(chunks):
            vectors = upcoming.pop().result()
            if n + 1 < len(chunks):  # encoded while this chunk's DAGs run
                upcoming.append(encoder.submit(_query_vectors, tool, chunks[n + 1]))
            with _older_objects_frozen():
                results.extend(_lookup_chunk(tool, chunk, vectors))
            if on_progress is not None:
                on_progress(len(chunk.queries))
    return results


def _spans(count: int) -> list[slice]:
    """``count`` queries in chunks of at most :data:`CHUNK_SIZE`, as even as they divide (a
    short last chunk would leave little to overlap the next encoding with)."""
    chunks = -(-count // CHUNK_SIZE)
    bounds = [n * count // chunks for n in range(chunks + 1)] if chunks else []
    return [slice(start, end) for start, end in itertools.pairwise(bounds)]


@dataclass(frozen=True, slots=True)
class _Chunk:
    """Queries looked up together: each one's checked request (or the result that rejects it)
    and the DAG inputs of the valid ones."""

    queries: list[str]
    rejected: dict[int, LookupResult]
    inputs: dict[int, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class _QueryVectors:
    """A chunk's query vectors, by query, and each one's share of the batch's encoding time."""

    vectors: dict[int, np.ndarray]
    share_ms: float


def _chunk(tool: KnowledgeTool, queries: Sequence[str], pinned: Sequence[str | None]) -> _Chunk:
    rejected: dict[int, LookupResult] = {}
    inputs: dict[int, dict[str, Any]] = {}
    for i, query in enumerate(queries):
        request = tool.request(query, pinned_category=pinned[i])
        if isinstance(request, RejectedRequest):
            rejected[i] = rejected_result(request, [])
        else:
            inputs[i] = tool.dataflow_inputs(request.query, request.pinned_category, scope=request.scope)
    return _Chunk(list(queries), rejected, inputs)


def _query_vectors(tool: KnowledgeTool, chunk: _Chunk) -> _QueryVectors:
    """The chunk's valid queries embedded as one batch (none when L1 is off: nothing searches)."""
    if not tool.config.l1.enabled or not chunk.inputs:
        return _QueryVectors({}, 0.0)
    started = time.perf_counter()
    rows = tool.embedder.embed_queries([inputs["query"] for inputs in chunk.inputs.values()])
    share_ms = (time.perf_counter() - started) * 1000 / len(chunk.inputs)
    return _QueryVectors(dict(zip(chunk.inputs, rows, strict=True)), share_ms)


@contextmanager
def _older_objects_frozen() -> Iterator[None]:
    """Keep the collector's full passes off the objects that exist before a chunk of lookups.

    A chunk allocates many short-lived containers, so Python's cyclic collector runs often, and
    now and then a full pass walks the whole heap: the loaded model, the store client and the
    results so far (~320,000 objects, ~150 ms on SciFact). Frozen (``gc.freeze``), those are
    skipped while the chunk runs; the lookups' own garbage is still collected as it goes. Young
    garbage is collected first, so none is carried into the frozen heap; everything is unfrozen
    afterwards, also when a lookup raises. Eval throughput +5-7% (docs/benchmarks.md).
    """
    gc.collect(1)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _lookup_chunk(tool: KnowledgeTool, chunk: _Chunk, embedded: _QueryVectors) -> list[LookupResult]:
    results, inputs = dict(chunk.rejected), chunk.inputs
    if not tool.config.l1.enabled:
        results.update({i: tool.execute_dataflow(inputs[i]) for i in inputs})
        return [results[i] for i in range(len(chunk.queries))]
    vectors = embedded.vectors
    plans = {i: _plan(tool, inputs[i], vectors[i], embedded.share_ms) for i in inputs}
    answers = _answers(tool, {i: plan for i, plan in plans.items() if plan is not None})
    for i in inputs:
        plan = plans[i]
        if plan is None:  # the DAG failed before its searches: the full run reports it
            results[i] = tool.execute_dataflow(inputs[i], overrides={VECTOR_NODE: vectors[i]})
        else:
            results[i] = _execute_planned(tool, inputs[i], plan, answers.get(i))
    return [results[i] for i in range(len(chunk.queries))]


def _plan(
    tool: KnowledgeTool, inputs: dict[str, Any], vector: np.ndarray, vector_ms: float
) -> PlannedLookup | None:
    values = tool.execute_requests(inputs, {VECTOR_NODE: vector})
    if values is None:
        return None
    return PlannedLookup(
        values, [NodeTiming(VECTOR_NODE, round(vector_ms, 4)), *tool.executed_nodes.timings()]
    )


def _execute_planned(
    tool: KnowledgeTool, inputs: dict[str, Any], plan: PlannedLookup, batched: BatchedAnswers | None
) -> LookupResult:
    """The DAG run on from its requests: with the batch's answers as ``l1_answers`` and
    ``fused_answers`` (none: the nodes ask the store themselves), its executed nodes those of
    both runs."""
    overrides, answered = plan.values, []
    if batched is not None:
        overrides = {**overrides, ANSWER_NODE: batched.answers}
        answered.append(NodeTiming(ANSWER_NODE, round(batched.share_ms, 4)))
    if batched is not None and batched.fused is not None:
        overrides[FUSED_NODE] = batched.fused
        answered.append(NodeTiming(FUSED_NODE, round(batched.fused_share_ms, 4)))
    result = tool.execute_dataflow(inputs, overrides=overrides)
    trace = result.retrieval_trace
    if trace is None or not trace.executed_nodes:  # failed: nothing ran to report
        return result
    nodes = [*plan.timings, *answered, *trace.executed_nodes]
    return result.model_copy(update={"retrieval_trace": trace.model_copy(update={"executed_nodes": nodes})})


def _answers(tool: KnowledgeTool, plans: dict[int, PlannedLookup]) -> dict[int, BatchedAnswers]:
    """Every planned request of the batch in one ``search_batch``, each query's answers back in
    its own requests' order (none when the batch fails: each query then asks alone)."""
    keys = [(i, n) for i, plan in plans.items() for n in range(len(plan.requests))]
    requests = [plans[i].requests[n] for i, n in keys]
    started = time.perf_counter()
    try:
        found = tool.search_port.search_batch(requests)
    except Exception:  # asked again per query by the DAG's l1_answers, which traces the errors
        return {}
    share_ms = (time.perf_counter() - started) * 1000 / max(len(plans), 1)
    started = time.perf_counter()
    fused = _fused_again(tool, requests, found)
    fused_share_ms = (time.perf_counter() - started) * 1000 / max(len(plans), 1)
    answers: dict[int, list[SearchAnswer]] = {i: [] for i in plans}
    fused_answers: dict[int, list[SearchAnswer]] = {i: [] for i in plans}
    for (i, _), candidates, fused_candidates in zip(keys, found, fused or found, strict=True):
        answers[i].append(SearchAnswer(candidates))
        fused_answers[i].append(SearchAnswer(fused_candidates))
    return {
        i: BatchedAnswers(answers[i], share_ms, fused_answers[i] if fused else None, fused_share_ms)
        for i in plans
    }


def _fused_again(
    tool: KnowledgeTool, requests: list[SearchRequest], found: list[Candidates]
) -> list[Candidates] | None:
    """The batch's answers with the chunk's few-matches searches fused again, asked in one more
    batch (what each DAG's ``fused_answers`` would ask alone); ``None`` when that batch fails."""
    again = few_matches_searches(requests, found)
    if not again:
        return found
    try:
        fused = dict(zip(again, tool.search_port.search_batch(list(again.values())), strict=True))
    except Exception:  # asked again per query by the DAG's fused_answers, which traces the errors
        return None
    return [fused.get(n, candidates) for n, candidates in enumerate(found)]
