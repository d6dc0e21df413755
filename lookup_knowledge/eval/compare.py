"""Configuration comparisons and sweeps over the same eval queries, with paired significance tests."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402
from scipy import stats  # noqa: E402

from lookup_knowledge.agent.knowledge_tool import KnowledgeTool  # noqa: E402
from lookup_knowledge.config import Config, ConfigError, load_config  # noqa: E402
from lookup_knowledge.eval.data import Qrels  # noqa: E402
from lookup_knowledge.eval.evaluation import METRIC_NAMES, EvalRun, evaluate  # noqa: E402

SHARED_SECTIONS = ("store.", "embedder.")  # variants share one open store and one model
BASELINE = "baseline"
FILTER_KEYS = ("retrieval.reference_threshold", "retrieval.fallback")  # key prefixes: filtered queries only
RULE_KEYS = {  # fallback setting -> the fallback rule that reads it
    "retrieval.fallback_score_ratio": "relative",
    "retrieval.fallback_sparse_ratio": "relative",
    "retrieval.reference_threshold": "threshold",
}
BOOST_HINTS = {  # rerank weight -> the hit reason of the L0 match that earns it
    "rerank.domain_match": "l0_domain:",
    "rerank.entity_match": "l0_entity:",
    "rerank.keyword_match": "l0_keyword:",
    "rerank.title_match": "l0_title:",
}


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: dict[str, Any] = field(default_factory=dict)


def parse_compare(spec: str) -> Variant:
    """``NAME=--set k=v --set k2=v2`` (or ``NAME=k=v,k2=v2``) -> a variant."""
    name, sep, rest = spec.partition("=")
    if not sep or not name.strip():
        raise ConfigError(f"--compare {spec!r}: expected NAME=--set key=value ...")
    tokens = shlex.split(rest)
    pairs = [t for t in tokens if t not in ("--set", "-s")]
    if len(tokens) == 1 and "," in tokens[0]:
        pairs = tokens[0].split(",")
    return Variant(name.strip(), dict(_pair(p) for p in pairs))


def _pair(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep:
        raise ConfigError(f"override {text!r} must look like dotted.key=value")
    return key.strip(), yaml.safe_load(raw) if raw.strip() else None


def load_variants(path: str | Path) -> list[Variant]:
    """A YAML list of ``{name: ..., set: {dotted.key: value}}``."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a list of {{name, set}} variants")
    return [Variant(str(item["name"]), dict(item.get("set") or {})) for item in data]


def parse_sweep(spec: str) -> list[Variant]:
    """``dotted.key=start:stop:step`` (stop inclusive) -> one variant per value."""
    key, sep, values = spec.partition("=")
    try:
        start, stop, step = (float(v) for v in values.split(":"))
    except ValueError:
        raise ConfigError(f"--sweep {spec!r}: expected dotted.key=start:stop:step") from None
    if not sep or step <= 0 or stop < start:
        raise ConfigError(f"--sweep {spec!r}: expected dotted.key=start:stop:step with step > 0")
    points = np.round(np.arange(start, stop + step / 2, step), 10)
    return [Variant(f"{key}={p:g}", {key.strip(): float(p)}) for p in points]


def run_variants(
    base: Config,
    base_overrides: dict[str, Any],
    config_path: str | Path | None,
    variants: list[Variant],
    queries: pd.DataFrame,
    qrels: Qrels | None,
    base_tool: KnowledgeTool,
    on_variant: Callable[[str], None] | None = None,
) -> dict[str, EvalRun]:
    """Evaluate the baseline and every variant over the same queries, sharing store and model."""
    runs = {BASELINE: evaluate(base_tool, queries, qrels)}
    for variant in variants:
        shared = [k for k in variant.overrides if k.startswith(SHARED_SECTIONS)]
        if shared:
            raise ConfigError(f"variant {variant.name!r} changes {shared}: variants share store and embedder")
        if on_variant is not None:
            on_variant(variant.name)
        config = variant_config(config_path, base_overrides, variant)
        tool = base_tool.variant(config)
        runs[variant.name] = evaluate(tool, queries, qrels)
        runs[variant.name].config_overrides = variant.overrides
    return runs


def variant_config(
    config_path: str | Path | None, base_overrides: dict[str, Any], variant: Variant
) -> Config:
    """The configuration a variant runs with: the base overrides, then its own."""
    return load_config(config_path, {**base_overrides, **variant.overrides})


HYBRID_DBSF = ("hybrid", "dbsf")  # the searches retrieval.few_matches_fusion can change


def inert_settings(config: Config, keys: Iterable[str]) -> dict[str, str]:
    """The keys that ``config`` never reads when it ranks or falls back, each with why."""
    retrieval = config.retrieval
    reasons = {}
    for key in keys:
        if (key in RULE_KEYS or key == "retrieval.fallback_rule") and not retrieval.fallback:
            reasons[key] = f"{key} is read only by the fallback, and retrieval.fallback is off"
        elif key in RULE_KEYS and RULE_KEYS[key] != retrieval.fallback_rule:
            reasons[key] = (
                f"{key} decides the fallback only under retrieval.fallback_rule: {RULE_KEYS[key]} "
                f"(in force: {retrieval.fallback_rule})"
            )
            if key == "retrieval.reference_threshold":
                reasons[key] += "; otherwise it sets only the relevance level, which no metric reads"
        elif key == "retrieval.fallback_sparse_ratio" and retrieval.mode == "dense":
            reasons[key] = f"{key} compares BM25 scores, and retrieval.mode is dense"
        elif key == "retrieval.few_matches_fusion" and (retrieval.mode, retrieval.fusion) != HYBRID_DBSF:
            reasons[key] = f"{key} changes only hybrid DBSF searches ({retrieval.mode}, {retrieval.fusion})"
    return reasons


def ineffective_variants(
    runs: dict[str, EvalRun], variants: list[Variant], configs: Mapping[str, Config] | None = None
) -> list[str]:
    """One warning per variant whose every query came out as in the baseline, saying why its
    keys could not act on these queries (a flat comparison or sweep is otherwise silent);
    ``configs`` (variant name -> its configuration) lets it name keys the rule in force ignores."""
    base = runs[BASELINE].results
    by_keys: dict[tuple[str, ...], list[Variant]] = {}
    for variant in variants:
        if not _results_differ(base, runs[variant.name].results):
            by_keys.setdefault(tuple(variant.overrides), []).append(variant)
    warnings = []
    for keys, group in by_keys.items():
        who = f"variant {group[0].name!r}"
        if len(group) > 1:
            who = f"{len(group)} variants of {', '.join(keys)}"
        config = (configs or {}).get(group[0].name)
        warnings.append(
            f"{who} gave the baseline's results on every query: {_why_no_effect(group[0], base, config)}"
        )
    return warnings


def is_flat(runs: dict[str, EvalRun], variants: list[Variant]) -> bool:
    """Whether every variant gave the baseline's results on every query."""
    base = runs[BASELINE].results
    return not any(_results_differ(base, runs[v.name].results) for v in variants)


def _results_differ(base: pd.DataFrame, other: pd.DataFrame) -> bool:
    columns = ["evidence_keys", "rerank_scores", "fallback_reason", "evidence_status"]
    return any(
        not np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
        for column in columns
        for a, b in zip(base[column], other[column], strict=True)
    )


def _why_no_effect(variant: Variant, base: pd.DataFrame, config: Config | None) -> str:
    reasons = []
    hit_reasons = " ".join(base["result_json"])
    inert = inert_settings(config, variant.overrides) if config is not None else {}
    for key in variant.overrides:
        if key in inert:
            reasons.append(inert[key])
        elif key.startswith(FILTER_KEYS) and base["category_filter"].isna().all():
            reasons.append(
                f"{key} acts on filtered queries and no query had a category filter (pin one per query "
                "with a `category` column, e.g. `eval-queries --categories true`)"
            )
        elif key in BOOST_HINTS and f'"{BOOST_HINTS[key]}' not in hit_reasons:
            reasons.append(f"{key} boosts blocks matching an L0 hint and no returned block matched one")
        else:
            reasons.append(f"{key} changed nothing on these queries")
    return "; ".join(reasons)


def comparison_table(runs: dict[str, EvalRun]) -> pd.DataFrame:
    """Per variant and metric: value, delta to the baseline, paired t-test p-value per query."""
    base = runs[BASELINE]
    rows = []
    for name, run in runs.items():
        for metric in [*METRIC_NAMES, "fallback_rate", "found_rate"]:
            value = run.metrics["overall"][metric]
            reference = base.metrics["overall"][metric]
            rows.append(
                {
                    "variant": name,
                    "metric": metric,
                    "value": value,
                    "delta": None if value is None or reference is None else value - reference,
                    "p_value": _paired_p(base, run, metric) if name != BASELINE else None,
                }
            )
    return pd.DataFrame(rows)


def _paired_p(base: EvalRun, other: EvalRun, metric: str) -> float | None:
    if metric not in METRIC_NAMES or base.per_query.empty:
        return None
    paired = base.per_query[["query_id", metric]].merge(
        other.per_query[["query_id", metric]], on="query_id", suffixes=("_a", "_b")
    )
    a, b = paired[f"{metric}_a"].to_numpy(), paired[f"{metric}_b"].to_numpy()
    if len(a) < 2 or np.allclose(a, b):
        return 1.0
    return float(stats.ttest_rel(a, b).pvalue)


def plot_sweep(runs: dict[str, EvalRun], variants: list[Variant], path: str | Path) -> Path:
    """Metrics and fallback rate against the swept value; a flat sweep says so in its title."""
    key = next(iter(variants[0].overrides))
    xs = [v.overrides[key] for v in variants]
    figure, axes = plt.subplots(figsize=(7, 4))
    for metric in ("ndcg@10", "recall@10", "mrr@10", "fallback_rate", "found_rate"):
        ys = [runs[v.name].metrics["overall"][metric] for v in variants]
        if all(y is not None for y in ys):
            axes.plot(xs, ys, marker="o", label=metric)
    axes.set_xlabel(key)
    axes.set_ylabel("metric or rate")
    flat = "\n(flat: no value changed any query; see comparison.md)" if is_flat(runs, variants) else ""
    axes.set_title(f"Sweep of {key}{flat}")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return Path(path)


def comparison_markdown(table: pd.DataFrame, warnings: list[str] = ()) -> str:
    """The comparison table as markdown, with warnings about variants that could not take effect."""
    lines = [f"> warning: {w}" for w in warnings] + ([""] if warnings else [])
    lines += ["| variant | metric | value | delta | p (paired t-test) |", "|---|---|---|---|---|"]
    for row in table.itertuples(index=False):
        value = "-" if row.value is None else f"{row.value:.4f}"
        delta = "-" if row.delta is None or pd.isna(row.delta) else f"{row.delta:+.4f}"
        p = "-" if row.p_value is None or pd.isna(row.p_value) else f"{row.p_value:.3g}"
        lines.append(f"| {row.variant} | {row.metric} | {value} | {delta} | {p} |")
    return "\n".join(lines) + "\n"
