"""Configuration: defaults, overrides, validation errors that name the key, precedence, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from lookup_knowledge.config import (
    DEFAULT_RETRIEVE_K,
    DEFAULT_RETURN_N,
    Config,
    ConfigError,
    default_config_path,
    load_config,
)


def write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# --- defaults -----------------------------------------------------------------------------------


def test_shipped_default_file_exists_and_loads() -> None:
    assert default_config_path().is_file()
    assert isinstance(load_config(), Config)


def test_defaults_match_documented_values() -> None:
    config = load_config()
    assert config.store.backend == "edge"
    assert config.store.collection == "knowledge"
    assert config.store.url is None
    assert config.embedder.model == "all-MiniLM-L6-v2"
    assert config.ingest.chunk_chars == 1000
    assert config.ingest.max_file_bytes == 2_000_000
    assert config.l0.enabled and config.l1.enabled
    assert config.retrieval.reference_threshold == pytest.approx(0.45)
    assert config.retrieval.max_chunks_per_document == 2


def test_default_recall_and_return_widths() -> None:
    retrieval = load_config().retrieval
    assert retrieval.effective_retrieve_k == DEFAULT_RETRIEVE_K == 20
    assert retrieval.effective_return_n == DEFAULT_RETURN_N == 5


def test_config_is_immutable() -> None:
    config = load_config()
    with pytest.raises(ValueError):
        config.retrieval.return_n = 9  # type: ignore[misc]


# --- overrides ----------------------------------------------------------------------------------


def test_set_override_applies_dotted_key() -> None:
    config = load_config(overrides=["retrieval.return_n=3"])
    assert config.retrieval.return_n == 3
    assert config.retrieval.effective_return_n == 3


def test_set_override_values_are_parsed_as_yaml() -> None:
    config = load_config(
        overrides=[
            "l0.enabled=false",
            "retrieval.reference_threshold=0.45",
            "ingest.chunk_chars=500",
            "rerank.source_type={runbook: 0.02, policy: 0.01}",
            "recorder.url=null",
        ]
    )
    assert config.l0.enabled is False
    assert config.retrieval.reference_threshold == pytest.approx(0.45)
    assert config.ingest.chunk_chars == 500
    assert config.rerank.source_type == {"runbook": 0.02, "policy": 0.01}
    assert config.recorder.url is None


def test_set_override_with_equals_sign_in_value_keeps_the_rest() -> None:
    config = load_config(overrides=["store.url=http://qdrant:6333/?a=b"])
    assert config.store.url == "http://qdrant:6333/?a=b"


def test_numeric_looking_string_values_stay_strings() -> None:
    config = load_config(overrides=["store.collection=2024", "store.path=2024"])
    assert config.store.collection == "2024"
    assert config.store.path == Path("2024")


def test_mapping_overrides_take_values_as_given(tmp_path: Path) -> None:
    config = load_config(overrides={"store.path": str(tmp_path), "retrieval.top_k": 4})
    assert config.store.path == tmp_path
    assert config.retrieval.top_k == 4


def test_override_without_equals_sign_is_refused() -> None:
    with pytest.raises(ConfigError, match="dotted.key=value"):
        load_config(overrides=["retrieval.return_n"])


def test_override_below_a_scalar_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"retrieval\.return_n\.deeper"):
        load_config(overrides=["retrieval.return_n=3", "retrieval.return_n.deeper=1"])


def test_overrides_win_over_the_config_file(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "retrieval:\n  return_n: 4\n")
    assert load_config(path).retrieval.return_n == 4
    assert load_config(path, overrides=["retrieval.return_n=2"]).retrieval.return_n == 2


def test_bare_on_and_off_switches_read_as_the_words_written(tmp_path: Path) -> None:
    """YAML 1.1 reads a bare ``on``/``off`` as a boolean; the multilingual switches take the word."""
    path = write_yaml(tmp_path, "multilingual:\n  vectors: off\n  search: off\n")
    assert (load_config(path).multilingual.vectors, load_config(path).multilingual.search) == ("off", "off")
    assert load_config(overrides=["multilingual.vectors=on"]).multilingual.vectors == "on"
    with pytest.raises(ConfigError, match="multilingual.search"):
        load_config(overrides=["multilingual.search=on"])  # not one of its values: refused by name


def test_partial_config_file_keeps_defaults_for_the_rest(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "store:\n  backend: qdrant\n  url: http://localhost:6333\n")
    config = load_config(path)
    assert config.store.backend == "qdrant"
    assert config.store.url == "http://localhost:6333"
    assert config.store.collection == "knowledge"
    assert config.embedder.model == "all-MiniLM-L6-v2"


def test_empty_config_file_means_all_defaults(tmp_path: Path) -> None:
    assert load_config(write_yaml(tmp_path, "")) == Config()


# --- validation errors name the dotted key ------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("retrieval.bogus=1", "retrieval.bogus"),
        ("nosuchsection.x=1", "nosuchsection"),
        ("store.colour=red", "store.colour"),
    ],
)
def test_unknown_key_is_refused_naming_it(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match="unknown key") as excinfo:
        load_config(overrides=[override])
    assert key in str(excinfo.value)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("retrieval.return_n=abc", "retrieval.return_n"),
        ("ingest.chunk_chars=[1, 2]", "ingest.chunk_chars"),
        ("l1.enabled=maybe", "l1.enabled"),
        ("store.backend=postgres", "store.backend"),
        ("retrieval=5", "retrieval"),
    ],
)
def test_wrong_type_is_refused_naming_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config(overrides=[override])
    assert f"{key}:" in str(excinfo.value)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("retrieval.return_n=0", "retrieval.return_n"),
        ("retrieval.retrieve_k=-1", "retrieval.retrieve_k"),
        ("retrieval.reference_threshold=1.5", "retrieval.reference_threshold"),
        ("retrieval.min_evidence_score=-0.1", "retrieval.min_evidence_score"),
        ("ingest.chunk_chars=10", "ingest.chunk_chars"),
        ("store.collection=bad name!", "store.collection"),
    ],
)
def test_out_of_range_value_is_refused_naming_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config(overrides=[override])
    assert f"{key}:" in str(excinfo.value)


def test_out_of_range_value_in_yaml_file_is_refused(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "retrieval:\n  return_n: 0\n  reference_threshold: 1.5\n")
    with pytest.raises(ConfigError) as excinfo:
        load_config(path)
    message = str(excinfo.value)
    assert "retrieval.return_n" in message
    assert "retrieval.reference_threshold" in message


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


# --- files --------------------------------------------------------------------------------------


def test_missing_config_file_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="not found") as excinfo:
        load_config(missing)
    assert str(missing) in str(excinfo.value)


def test_folder_given_as_config_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path)


def test_broken_yaml_file_is_refused(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "retrieval:\n  return_n: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_yaml_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)


def test_yaml_file_with_unknown_key_names_it(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "retrieval:\n  retrive_k: 10\n")
    with pytest.raises(ConfigError, match=r"retrieval\.retrive_k: unknown key"):
        load_config(path)


# --- retrieve_k / return_n / top_k precedence ---------------------------------------------------


def test_top_k_alone_sets_both_widths() -> None:
    retrieval = load_config(overrides=["retrieval.top_k=7"]).retrieval
    assert retrieval.effective_retrieve_k == 7
    assert retrieval.effective_return_n == 7


def test_explicit_retrieve_k_wins_over_top_k() -> None:
    retrieval = load_config(overrides=["retrieval.top_k=7", "retrieval.retrieve_k=40"]).retrieval
    assert retrieval.effective_retrieve_k == 40
    assert retrieval.effective_return_n == 7


def test_explicit_return_n_wins_over_top_k() -> None:
    retrieval = load_config(overrides=["retrieval.top_k=7", "retrieval.return_n=2"]).retrieval
    assert retrieval.effective_retrieve_k == 7
    assert retrieval.effective_return_n == 2


def test_return_n_alone_leaves_default_recall_width() -> None:
    retrieval = load_config(overrides=["retrieval.return_n=3"]).retrieval
    assert retrieval.effective_retrieve_k == DEFAULT_RETRIEVE_K
    assert retrieval.effective_return_n == 3


def test_retrieve_k_alone_leaves_default_return_n() -> None:
    retrieval = load_config(overrides=["retrieval.retrieve_k=50"]).retrieval
    assert retrieval.effective_retrieve_k == 50
    assert retrieval.effective_return_n == DEFAULT_RETURN_N


# --- secrets ------------------------------------------------------------------------------------


def test_api_key_comes_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", "s3cret")
    assert load_config().store.api_key == "s3cret"


def test_api_key_is_none_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QDRANT_API_KEY", raising=False)
    assert load_config().store.api_key is None


def test_empty_api_key_environment_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", "")
    assert load_config().store.api_key is None


def test_api_key_in_yaml_is_refused(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "store:\n  api_key: s3cret\n")
    with pytest.raises(ConfigError, match=r"store\.api_key: unknown key"):
        load_config(path)


def test_api_key_override_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"store\.api_key"):
        load_config(overrides=["store.api_key=s3cret"])


def test_api_key_is_not_part_of_the_dumped_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", "s3cret")
    assert "s3cret" not in load_config().model_dump_json()


# --- embedder backends ------------------------------------------------------------------------


def test_embedder_defaults_pick_backend_and_device_automatically() -> None:
    embedder = load_config().embedder
    assert (embedder.device, embedder.backend, embedder.quantize) == ("auto", "auto", "none")


def test_embedder_backend_quantize_and_device_are_settable() -> None:
    config = load_config(
        overrides=["embedder.backend=openvino", "embedder.quantize=int8", "embedder.device=cuda:1"]
    )
    assert (config.embedder.backend, config.embedder.quantize, config.embedder.device) == (
        "openvino", "int8", "cuda:1",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("override", "key"),
    [("embedder.backend=tensorrt", "embedder.backend"), ("embedder.quantize=int4", "embedder.quantize"),
     ("embedder.device=gpu", "embedder.device")],
)  # fmt: skip
def test_unknown_embedder_choices_name_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(overrides=[override])


# --- cluster layout of a server collection ----------------------------------------------------

SERVER = "store.backend=qdrant"


def test_cluster_settings_default_to_the_servers_own() -> None:
    store = load_config(overrides=[SERVER]).store
    assert store.shard_number is store.replication_factor is store.write_consistency_factor is None


def test_cluster_settings_are_settable_for_a_server_collection() -> None:
    sets = [SERVER, "store.shard_number=6", "store.replication_factor=2", "store.write_consistency_factor=2"]
    store = load_config(overrides=sets).store
    assert (store.shard_number, store.replication_factor, store.write_consistency_factor) == (6, 2, 2)


@pytest.mark.parametrize(
    "key", ["store.shard_number", "store.replication_factor", "store.write_consistency_factor"]
)
def test_a_cluster_setting_below_one_is_refused_naming_the_key(key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key}: Input should be greater than or equal to 1"):
        load_config(overrides=[SERVER, f"{key}=0"])


def test_cluster_settings_on_the_edge_store_are_refused_naming_them() -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config(overrides=["store.shard_number=3", "store.replication_factor=2"])
    message = str(excinfo.value)
    assert "store.shard_number, store.replication_factor: how a Qdrant server spreads" in message
    assert "store.backend: qdrant" in message


def test_write_consistency_above_the_replication_factor_is_refused() -> None:
    sets = [SERVER, "store.replication_factor=2", "store.write_consistency_factor=3"]
    with pytest.raises(ConfigError, match=r"write_consistency_factor \(3\) exceeds store.replication_factor"):
        load_config(overrides=sets)


# --- names and keys that would reach the wrong place -------------------------------------------


@pytest.mark.parametrize("name", [".", "..", "..."])
def test_a_collection_made_only_of_dots_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=r"^invalid configuration: store\.collection: .*only of dots"):
        load_config(overrides={"store.collection": name})


@pytest.mark.parametrize("name", ["knowledge", "kb.v2", "a..b", "-_x"])
def test_a_collection_with_dots_among_other_characters_is_kept(name: str) -> None:
    assert load_config(overrides={"store.collection": name}).store.collection == name


def test_ingest_into_a_dots_collection_exits_2_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from lookup_knowledge import sample_knowledge_base
    from lookup_knowledge.cli.app import app

    store = tmp_path / "store"
    args = [
        "ingest",
        str(sample_knowledge_base()),
        "--set",
        f"store.path={store}",
        "--set",
        "store.collection=..",
    ]
    outcome = CliRunner().invoke(app, args)
    assert outcome.exit_code == 2
    assert outcome.stderr.count("\n") == 1 and "store.collection" in outcome.stderr
    assert list(tmp_path.iterdir()) == []  # neither the store folder nor its parent got anything


REMOTE_IN_CLEAR = [
    "http://10.0.0.5:6333",
    "http://qdrant.example.com",
    "qdrant.example.com:6333",
    "HTTP://db:6333",
]
TRUSTED = ["https://qdrant.example.com", "http://localhost:6333", "http://127.0.0.1:6333", "http://[::1]:6333",
           "http://qdrant.localhost:6333"]  # fmt: skip


@pytest.mark.parametrize("url", REMOTE_IN_CLEAR)
def test_an_api_key_over_plain_http_to_another_host_is_refused(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", "s3cret-key")
    with pytest.raises(ConfigError) as refused:
        load_config(overrides={"store.backend": "qdrant", "store.url": url})
    message = str(refused.value)
    assert "QDRANT_API_KEY would be sent in clear" in message and "use an https:// store.url" in message
    assert "s3cret-key" not in message and "\n" not in message


@pytest.mark.parametrize("url", TRUSTED)
def test_an_api_key_over_https_or_to_this_machine_is_sent(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QDRANT_API_KEY", "s3cret-key")
    assert load_config(overrides={"store.backend": "qdrant", "store.url": url}).store.api_key == "s3cret-key"


def test_the_operator_may_send_the_key_over_http_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    sets = {"store.backend": "qdrant", "store.url": "http://10.0.0.5:6333"}
    monkeypatch.delenv("QDRANT_API_KEY", raising=False)
    assert load_config(overrides=sets).store.url  # no key: nothing to protect
    monkeypatch.setenv("QDRANT_API_KEY", "s3cret-key")
    assert load_config(
        overrides={**sets, "store.allow_api_key_over_http": True}
    ).store.allow_api_key_over_http


def test_the_cli_refuses_a_key_in_clear_before_any_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from lookup_knowledge.cli.app import app

    monkeypatch.setenv("QDRANT_API_KEY", "s3cret-key")
    # 192.0.2.1 (TEST-NET-1) never answers: a connection attempt would hang, not exit 2 at once
    sets = [
        "--set",
        "store.backend=qdrant",
        "--set",
        "store.url=http://192.0.2.1:6333",
        "--set",
        "store.timeout_s=600",
    ]
    for command in (["query", "refund", "--json"], ["info"], ["ingest", "."], ["mcp"]):
        outcome = CliRunner().invoke(app, [*command, *sets])
        assert outcome.exit_code == 2, command
        assert outcome.stderr.count("\n") == 1 and "use an https:// store.url" in outcome.stderr
        assert "s3cret-key" not in outcome.stderr + outcome.stdout


# --- serve tokens: principals or unrestricted ---------------------------------------------------

HASH = "ab" * 32
NEITHER = "token 'admin' names no principals"
BOTH = "token 'admin' has principals and unrestricted: true"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({}, NEITHER + ": list the principals its calls are made as, or set unrestricted: true"),
        ({"principals": []}, NEITHER),
        ({"unrestricted": False}, NEITHER),
        ({"principals": ["hr"], "unrestricted": True}, BOTH + ": give it one or the other"),
    ],
)
def test_a_token_names_its_principals_or_is_unrestricted_never_both_or_neither(
    entry: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=r"serve\.tokens\.0: ") as excinfo:
        load_config(overrides={"serve.tokens": [{"name": "admin", "sha256": HASH, **entry}]})
    assert message in str(excinfo.value)


def test_an_unrestricted_token_and_a_restricted_one_load(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        f"serve:\n  tokens:\n    - {{name: admin, sha256: {HASH}, unrestricted: true}}\n"
        f"    - {{name: hr-bot, sha256: {'cd' * 32}, principals: [hr]}}\n",
    )
    admin, hr = load_config(path).serve.tokens
    assert (admin.unrestricted, admin.principals) == (True, [])
    assert (hr.unrestricted, hr.principals) == (False, ["hr"])
