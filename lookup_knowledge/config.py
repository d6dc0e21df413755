"""Typed configuration: YAML files under ``configs/`` validated into pydantic models.

>>> config = load_config(overrides=["retrieval.return_n=3"])
>>> config.retrieval.effective_return_n
3
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lookup_knowledge.adapters.encoder_choices import BackendChoice, Quantize
from lookup_knowledge.adapters.redaction import mask_secrets
from lookup_knowledge.contract import FallbackRule, FusionMethod, RetrievalMode
from lookup_knowledge.extras import MissingExtraError, require

DEFAULT_RETRIEVE_K = 20
DEFAULT_RETURN_N = 5
QDRANT_API_KEY_ENV = "QDRANT_API_KEY"
# How a new server collection is spread over a Qdrant cluster (None: the server's default).
CLUSTER_SETTINGS = ("shard_number", "replication_factor", "write_consistency_factor")


class ConfigError(ValueError):
    """A configuration file or override that cannot be used; the message names the key."""


def _is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine (``localhost`` or a loopback address)."""
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Section(BaseModel):
    # YAML (and so ``--set``) reads ``collection: 2024`` as a number: let text fields take it.
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True, allow_inf_nan=False)


class StoreConfig(_Section):
    backend: Literal["edge", "qdrant"] = "edge"
    path: Path = Path(".lookup-knowledge")
    url: str | None = None
    collection: str = Field("knowledge", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    timeout_s: float = Field(5.0, gt=0, le=600)
    lock_wait_s: float = Field(10.0, ge=0, le=3600)
    shard_number: int | None = Field(None, ge=1)
    replication_factor: int | None = Field(None, ge=1)
    write_consistency_factor: int | None = Field(None, ge=1)
    # send QDRANT_API_KEY over plain http to a host that is not this machine (refused otherwise)
    allow_api_key_over_http: bool = False

    @field_validator("collection")
    @classmethod
    def _not_only_dots(cls, value: str) -> str:
        """``.`` and ``..`` name the store's folder or its parent, not a collection inside it."""
        if not value.strip("."):
            raise ValueError("a name made only of dots names a folder, not a collection")
        return value

    @field_validator("path", mode="before")
    @classmethod
    def _path_from_number(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value

    @model_validator(mode="after")
    def _cluster_settings(self) -> StoreConfig:
        """Cluster settings only where a Qdrant server creates the collection, and consistent."""
        given = [f"store.{name}" for name in CLUSTER_SETTINGS if getattr(self, name) is not None]
        if given and self.backend == "edge":
            raise ValueError(
                f"{', '.join(given)}: how a Qdrant server spreads a collection (store.backend: qdrant); "
                "the embedded edge store is one local shard without replicas"
            )
        factor, copies = self.write_consistency_factor, self.replication_factor
        if factor is not None and copies is not None and factor > copies:
            raise ValueError(
                f"store.write_consistency_factor ({factor}) exceeds store.replication_factor ({copies}): "
                "no write could gather that many replica acknowledgements"
            )
        return self

    @model_validator(mode="after")
    def _api_key_not_in_clear(self) -> StoreConfig:
        """``QDRANT_API_KEY`` goes with every request: never over plain http to another host
        unless ``store.allow_api_key_over_http`` says so (the key itself is never named)."""
        if self.backend != "qdrant" or not self.url or not self.api_key or self.allow_api_key_over_http:
            return self
        parts = urlsplit(self.url if "://" in self.url else f"http://{self.url}")
        if parts.scheme.lower() != "https" and not _is_loopback(parts.hostname or ""):
            raise ValueError(
                f"{QDRANT_API_KEY_ENV} would be sent in clear over {parts.scheme}:// to {parts.hostname}: "
                "use an https:// store.url (or set store.allow_api_key_over_http: true on a trusted network)"
            )
        return self

    @property
    def api_key(self) -> str | None:
        """The Qdrant API key, from the environment only."""
        return os.environ.get(QDRANT_API_KEY_ENV) or None


class EmbedderConfig(_Section):
    model: str = Field("all-MiniLM-L6-v2", min_length=1)
    batch_size: int = Field(64, ge=1, le=4096)
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?|mps)$")
    backend: BackendChoice = "auto"
    quantize: Quantize = "none"

    @field_validator("model")
    @classmethod
    def _existing_model_path(cls, value: str) -> str:
        """A model given as a path (``/``, ``./``, ``../``, ``~``) must exist; names load later."""
        if value.startswith(("/", "./", "../", "~")) and not Path(value).expanduser().exists():
            raise ValueError("no model folder at this path")
        return value


class MultilingualConfig(_Section):
    """The multilingual encoder beside the English one (docs/multilingual.md)."""

    vectors: Literal["auto", "on", "off"] = "auto"
    search: Literal["auto", "always", "off"] = "auto"
    other_languages: bool = True  # a question whose hits are in its language: also search the others
    max_chars: int = Field(600, ge=50, le=100_000)
    threads: int = Field(1, ge=1, le=64)

    @field_validator("vectors", "search", mode="before")
    @classmethod
    def _yaml_switch(cls, value: Any) -> Any:
        """YAML reads a bare ``on``/``off`` as a boolean: take it as the word written."""
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


class DocumentsConfig(_Section):
    """Limits on one PDF, DOCX, HTML, PPTX or XLSX file (docs/documents.md)."""

    max_bytes: int = Field(50_000_000, ge=1)
    max_unpacked_bytes: int = Field(300_000_000, ge=1)
    timeout_s: float = Field(60.0, gt=0, le=3600)
    max_memory_mb: int = Field(2048, ge=1024)  # markitdown's imports alone reserve ~460 MB


class IngestConfig(_Section):
    chunk_chars: int = Field(1000, ge=100, le=100_000)
    max_file_bytes: int = Field(2_000_000, ge=1)
    max_record_bytes: int = Field(2_000_000, ge=1)
    allow_outside_root: bool = False
    documents: DocumentsConfig = DocumentsConfig()


class ToggleConfig(_Section):
    enabled: bool = True


class RetrievalConfig(_Section):
    mode: RetrievalMode = "hybrid"
    fusion: FusionMethod = "dbsf"
    few_matches_fusion: FusionMethod | None = "rrf"
    prefetch_k: int | None = Field(200, ge=1, le=1000)
    retrieve_k: int | None = Field(None, ge=1, le=1000)
    return_n: int | None = Field(None, ge=1, le=1000)
    top_k: int | None = Field(None, ge=1, le=1000)
    max_chunks_per_document: int | None = Field(2, ge=1)
    reference_threshold: float = Field(0.45, ge=0.0, le=1.0)
    fallback: bool = True
    fallback_rule: FallbackRule = "relative"
    fallback_score_ratio: float = Field(0.75, ge=0.0, le=1.0)
    fallback_sparse_ratio: float = Field(0.6, ge=0.0, le=1.0)
    min_evidence_score: float = Field(0.2, ge=0.0, le=1.0)
    relative_evidence_floor: float = Field(0.5, ge=0.0, le=1.0)
    max_query_chars: int = Field(2000, ge=1)

    @property
    def effective_retrieve_k(self) -> int:
        """Vector recall width: explicit ``retrieve_k``, else legacy ``top_k``, else 20."""
        return self.retrieve_k or self.top_k or DEFAULT_RETRIEVE_K

    @property
    def effective_return_n(self) -> int:
        """Most evidence blocks: explicit ``return_n``, else legacy ``top_k``, else 5."""
        return self.return_n or self.top_k or DEFAULT_RETURN_N


class RerankConfig(_Section):
    vector: float = Field(1.0, ge=0.0)
    domain_match: float = Field(0.05, ge=0.0)
    entity_match: float = Field(0.04, ge=0.0)
    keyword_match: float = Field(0.03, ge=0.0)
    title_match: float = Field(0.04, ge=0.0)
    exact_code: float = Field(0.1, ge=0.0)
    code_question: float = Field(1.0, ge=0.0)
    source_type: dict[str, float] = Field(default_factory=dict)
    cross_language_lines: bool = True
    cross_language_rank: float = Field(0.2, ge=0.0)


class ContextConfig(_Section):
    budget_chars: int = Field(6000, ge=1)
    hit_reasons: bool = False


class AbstentionConfig(_Section):
    enabled: bool = True
    strictness: float = Field(1.5, ge=0.0, le=20.0)
    own_questions: bool = True


class AnswerabilityConfig(_Section):
    reader: bool = False


class RecorderConfig(_Section):
    url: str | None = None
    timeout_s: float = Field(2.0, gt=0, le=60)
    retry_after_s: float = Field(30.0, ge=0, le=3600)
    session_memory: int = Field(10_000, ge=0, le=10_000_000)

    @field_validator("url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        """A URL SQLAlchemy can parse, of a dialect it knows (the message never echoes it: it may
        hold a password)."""
        if value is None:
            return value
        from sqlalchemy.engine import make_url  # only for a configured URL: SQL stays unloaded
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        try:
            url = make_url(value)
            url.get_dialect()
        except (ArgumentError, NoSuchModuleError, ValueError):
            raise ValueError("not a database URL SQLAlchemy knows, e.g. postgresql+psycopg://...") from None
        if url.get_backend_name() == "postgresql":
            try:
                require("postgres", "a PostgreSQL recorder.url")
            except MissingExtraError as exc:
                raise ValueError(str(exc)) from None
        return value


class AccessConfig(_Section):
    """Who may see what: a document's ``access`` (frontmatter or JSONL field) lists the principals
    (groups, users) that may see it; ``default`` is what a document that says nothing gets."""

    default: Literal["public", "deny"] = "public"
    principals: list[str] | None = None

    @field_validator("principals")
    @classmethod
    def _principal_names(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not all(name.strip() for name in value):
            raise ValueError("a principal name must not be blank")
        return None if value is None else [name.strip() for name in value]

    @property
    def default_access(self) -> tuple[str, ...]:
        """The access of a document whose source names none: everyone, or no restricted caller."""
        return ("public",) if self.default == "public" else ()


class TokenConfig(_Section):
    """One bearer token of ``serve``: its name (logged, never a principal), the SHA-256 of the token
    (``lookup-knowledge token`` makes both; the token itself is never stored) and whom its requests
    are made as: its ``principals``, or, with ``unrestricted: true`` (an operator, an admin
    reviewer), a caller that sees every document and every call and eval run, those made without
    principals too. One or the other, never both."""

    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.@-]+$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    principals: list[str] = Field(default_factory=list)
    unrestricted: bool = False

    @field_validator("principals")
    @classmethod
    def _principal_names(cls, value: list[str]) -> list[str]:
        if not all(name.strip() for name in value):
            raise ValueError("a principal name must not be blank")
        return [name.strip() for name in value]

    @model_validator(mode="after")
    def _principals_or_unrestricted(self) -> TokenConfig:
        if self.unrestricted and self.principals:
            raise ValueError(
                f"token {self.name!r} has principals and unrestricted: true: give it one or the other "
                "(an unrestricted token sees every document, whatever principals it names)"
            )
        if not self.unrestricted and not self.principals:
            raise ValueError(
                f"token {self.name!r} names no principals: list the principals its calls are made as, "
                "or set unrestricted: true for a token that sees every document"
            )
        return self


class ServeConfig(_Section):
    """``lookup-knowledge serve``: where it listens, who may call it and how much it takes at once."""

    host: str = Field("127.0.0.1", min_length=1)
    port: int = Field(8765, ge=0, le=65535)
    tokens: list[TokenConfig] = Field(default_factory=list)
    max_body_bytes: int = Field(1_048_576, ge=1024, le=100 * 2**20)
    body_timeout_s: float = Field(10.0, gt=0, le=600)
    request_timeout_s: float = Field(30.0, gt=0, le=3600)
    max_in_flight: int = Field(8, ge=1, le=1024)
    retry_after_s: int = Field(1, ge=1, le=3600)
    shutdown_timeout_s: float = Field(30.0, gt=0, le=3600)

    @field_validator("tokens")
    @classmethod
    def _distinct(cls, value: list[TokenConfig]) -> list[TokenConfig]:
        if len({token.name for token in value}) != len(value) or len({t.sha256 for t in value}) != len(value):
            raise ValueError("each token needs a name and a hash of its own")
        return value


class TracingConfig(_Section):
    opentelemetry: bool = False
    include_query: bool = False


class Config(_Section):
    """The whole lookup-knowledge configuration."""

    store: StoreConfig = StoreConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    multilingual: MultilingualConfig = MultilingualConfig()
    ingest: IngestConfig = IngestConfig()
    l0: ToggleConfig = ToggleConfig()
    l1: ToggleConfig = ToggleConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    rerank: RerankConfig = RerankConfig()
    context: ContextConfig = ContextConfig()
    abstention: AbstentionConfig = AbstentionConfig()
    answerability: AnswerabilityConfig = AnswerabilityConfig()
    recorder: RecorderConfig = RecorderConfig()
    access: AccessConfig = AccessConfig()
    tracing: TracingConfig = TracingConfig()
    serve: ServeConfig = ServeConfig()


def default_config_path() -> Path:
    """The shipped ``configs/default.yaml``."""
    return Path(str(resources.files("lookup_knowledge.configs").joinpath("default.yaml")))


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Iterable[str] | Mapping[str, Any] = (),
) -> Config:
    """Load a YAML config (default: the shipped one) and apply ``dotted.key=value`` overrides."""
    data = _read_yaml(Path(path) if path is not None else default_config_path())
    items = overrides.items() if isinstance(overrides, Mapping) else map(parse_override, overrides)
    for key, value in items:
        _set_dotted(data, key, value)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:  # a folder, no permission
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections")
    return data


def parse_override(override: str) -> tuple[str, Any]:
    """``dotted.key=value`` -> (key, YAML-parsed value)."""
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {mask_secrets(override)!r} must look like dotted.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    node = data
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{key}: {part!r} is not a section")
        node = child
    node[leaf] = value


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "<root>"
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        message = message.removeprefix("Value error, ")  # a validator's own sentence, as it wrote it
        lines.append(f"{key}: {message}")
    return "invalid configuration: " + "; ".join(lines)
