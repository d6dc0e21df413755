"""`agent/tool_definition.py`: what an agent sees of the tool (name, description, one JSON schema
of its arguments) and its OpenAI and Anthropic shapes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema

from lookup_knowledge import tool_definition
from lookup_knowledge.adapters.multilingual import LANGUAGES
from lookup_knowledge.agent.tool_definition import (
    INPUT_SCHEMA,
    QUERY_DESCRIPTION,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    VERIFY_INPUT_SCHEMA,
    LookupArguments,
    VerifyArguments,
    anthropic_tool,
    openai_tool,
)


def test_tool_definition_is_a_json_schema_function() -> None:
    definition = tool_definition()
    assert definition == {
        "name": "lookup_knowledge",
        "description": TOOL_DESCRIPTION,
        "parameters": INPUT_SCHEMA,
    }
    schema = definition["parameters"]
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"query": "who approves refunds?"})
    for bad in ({}, {"query": 5}, {"query": "x", "top_k": 3}):
        assert not validator.is_valid(bad)
    json.dumps(definition)  # plain JSON, as tool-calling APIs take it


def test_description_tells_the_agent_how_to_read_the_result() -> None:
    for phrase in (
        "evidenceKey",
        "cite",
        "no_evidence",
        "retrieval_failed",
        "outage",
        "l0Hints",
        "never facts",
        "<docId>#chunk-<n>",
        "evidenceStatus",
        "relevanceLevel",
        "completenessHint",
    ):
        assert phrase in TOOL_DESCRIPTION


def test_the_description_is_short_rules_without_measured_figures() -> None:
    """Every agent reads it on every call: at most 150 words, and no percentages (measured
    figures change with each benchmark run; they belong in docs/trust.md)."""
    assert len(TOOL_DESCRIPTION.split()) <= 150
    assert "%" not in TOOL_DESCRIPTION
    assert "measured" not in TOOL_DESCRIPTION


def test_the_description_names_no_document_of_the_sample_knowledge_base() -> None:
    """The same text describes whatever store is served: no sample key or topic in it."""
    sample = Path(__file__).resolve().parents[1] / "lookup_knowledge" / "sample-kb"
    words = re.findall(r"[\w-]+#chunk-\d+|runbooks|payments|refund", TOOL_DESCRIPTION)
    assert words == []
    assert not any(path.stem in TOOL_DESCRIPTION for path in sample.rglob("*.md"))


def test_openai_and_anthropic_shapes() -> None:
    assert openai_tool() == {"type": "function", "function": tool_definition()}
    assert anthropic_tool() == {
        "name": TOOL_NAME,
        "description": TOOL_DESCRIPTION,
        "input_schema": INPUT_SCHEMA,
    }


def test_definitions_are_fresh_copies() -> None:
    tool_definition()["parameters"]["properties"]["query"]["type"] = "integer"
    anthropic_tool()["input_schema"]["required"].append("x")
    assert INPUT_SCHEMA["properties"]["query"]["type"] == "string"
    assert INPUT_SCHEMA["required"] == ["query"]


def test_the_schemas_are_the_argument_models() -> None:
    """What the schema accepts the argument model accepts, and what it refuses the model refuses."""
    cases = [
        (
            LookupArguments,
            INPUT_SCHEMA,
            [
                ({"query": "who approves refunds?"}, True),
                ({}, False),
                ({"query": 5}, False),
                ({"query": "x", "top_k": 3}, False),
            ],
        ),
        (
            VerifyArguments,
            VERIFY_INPUT_SCHEMA,
            [
                ({"answer": "Refunds need approval [a#chunk-0]."}, True),
                ({"answer": "x", "check_uncited": True}, True),
                ({"check_uncited": True}, False),
                ({"answer": "x", "session_id": "s"}, False),
            ],
        ),
    ]
    for model, schema, samples in cases:
        validator = jsonschema.Draft202012Validator(schema)
        for arguments, valid in samples:
            assert validator.is_valid(arguments) is valid, arguments
            try:
                model.model_validate(arguments)
            except ValueError:
                accepted = False
            else:
                accepted = True
            assert accepted is valid, arguments


def test_the_query_description_says_how_other_languages_are_read() -> None:
    """Not "English only" (the multilingual leg reads 15 languages by meaning), nor more than a
    store without multilingual vectors does."""
    assert "English" in QUERY_DESCRIPTION and "multilingual vectors" in QUERY_DESCRIPTION
    assert "`language`" in QUERY_DESCRIPTION
    assert "English text only" not in QUERY_DESCRIPTION


def test_the_query_description_names_the_languages_read_by_meaning() -> None:
    """Every language the encoder and the identifier read (``LANGUAGES``) is named; Ukrainian,
    which they do not read (it is taken for Russian), is not: the agent is told to ask in English."""
    names = {
        "ar": "Arabic", "de": "German", "es": "Spanish", "fr": "French", "it": "Italian",
        "ja": "Japanese", "ko": "Korean", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
        "ru": "Russian", "th": "Thai", "tr": "Turkish", "zh": "Chinese",
    }  # fmt: skip
    assert set(LANGUAGES) - {"en"} == set(names)
    assert all(name in QUERY_DESCRIPTION for name in names.values())
    assert "Ukrainian" not in QUERY_DESCRIPTION and "ask in English" in QUERY_DESCRIPTION
