"""A tool call's arguments against the tool's inputSchema (`app/worker/arguments.py`), and the
planner's row that uses it: what each bad call gets, and that the tool never runs."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from app.worker.arguments import ArgumentCheck
from app.worker.offer import toolbox
from app.worker.plan import Entry, ToolCall, next_step
from app.worker.steps import RejectCall, RunTool

ADD = {
    "type": "object",
    "properties": {
        "a": {"type": "number"},
        "b": {"type": "number"},
        "options": {
            "type": "object",
            "properties": {"digits": {"type": "integer", "minimum": 0}},
        },
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"a": 1}, "Invalid arguments for add: 'b' is a required property."),
        ({"a": "one", "b": 2}, "Invalid arguments for add at `a`: 'one' is not of type 'number'."),
        ({"a": 1, "b": 2, "c": 3}, "Additional properties are not allowed ('c' was unexpected)"),
        (
            {"a": 1, "b": 2, "options": {"digits": -1}},
            "at `options.digits`: -1 is less than the minimum of 0",
        ),
        ({"a": 1, "b": 2, "options": {"digits": 2}}, None),
        ({"a": 1.5, "b": -2}, None),
    ],
)
def test_a_call_is_checked_against_its_tool_s_schema(
    arguments: dict[str, Any], expected: str | None
) -> None:
    refused = ArgumentCheck({"add": ADD})("add", arguments)
    if expected is None:
        assert refused is None
    else:
        assert refused is not None and expected in refused
        assert refused.endswith("call it again with arguments that match its input schema.")


def test_a_long_value_is_not_quoted_whole() -> None:
    refused = ArgumentCheck({"add": ADD})("add", {"a": "x" * 5000, "b": 1})
    assert refused is not None and len(refused) < 500


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({}, None),  # no schema: nothing to check
        ({"type": "object", "properties": {"a": {"type": "nonsense"}}}, "not a valid JSON Schema"),
        ({"$ref": "https://example.com/schema.json"}, "could not be applied"),
    ],
)
def test_a_tool_whose_schema_cannot_be_used_is_not_checked_and_that_is_logged(
    schema: dict[str, Any], why: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    tool = f"tool_{abs(hash(str(schema)))}"
    with caplog.at_level(logging.WARNING, logger="app.worker.arguments"):
        assert ArgumentCheck({tool: schema})(tool, {"anything": 1}) is None
        assert ArgumentCheck({tool: schema})(tool, {"anything": 2}) is None
    warned = [r.getMessage() for r in caplog.records]
    if why is None:
        assert warned == []
    else:
        assert len(warned) == 1 and why in warned[0] and tool in warned[0]  # once per tool


def test_a_tool_without_a_check_entry_runs_unchecked() -> None:
    assert ArgumentCheck({"add": ADD})("other", {"x": 1}) is None


def test_the_schema_s_own_draft_is_used() -> None:
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"n": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
    }
    check = ArgumentCheck({"t": draft4})
    assert check("t", {"n": 0}) is not None  # draft 4's boolean exclusiveMinimum
    assert check("t", {"n": 1}) is None


def test_the_planner_rejects_a_call_its_schema_refuses_and_runs_one_it_accepts() -> None:
    tools = toolbox({"add"}, {"add"}, ArgumentCheck({"add": ADD}))
    bad, good = ToolCall("c1", "add", '{"a": 1}'), ToolCall("c2", "add", '{"a": 1, "b": 2}')
    transcript = [
        Entry(1, "user", "add"),
        Entry(2, "assistant", None, (bad, good)),
    ]
    action = next_step(transcript, 1, 20, tools=tools)
    assert isinstance(action, RejectCall) and "'b' is a required property" in action.error
    answered = [*transcript, Entry(3, "tool", action.error, (), "c1", "add", True)]
    assert next_step(answered, 1, 20, tools=tools) == RunTool(good, {"a": 1, "b": 2})


# --- bounded: a client tool's schema is the user's, its arguments the model's ---------------

FANS_OUT = {
    "type": "object",
    "properties": {"a": {"$ref": "#/$defs/d0"}},
    "$defs": {
        **{
            f"d{n}": {"anyOf": [{"$ref": f"#/$defs/d{n + 1}"}, {"$ref": f"#/$defs/d{n + 1}"}]}
            for n in range(40)
        },
        "d40": {"type": "string", "minLength": 5},
    },
}


def test_a_backtracking_pattern_is_run_by_re2_and_answers_at_once() -> None:
    check = ArgumentCheck(
        {"spell": {"type": "object", "properties": {"w": {"pattern": "^(a+)+$"}}}}
    )
    # (Python's re would take hours: each `a` more doubles its work)
    refused = check("spell", {"w": "a" * 40 + "!"})
    assert refused is not None and "does not match '^(a+)+$'" in refused
    assert check("spell", {"w": "a" * 5000}) is None


def test_unique_items_over_many_objects_are_found_by_hashing() -> None:
    check = ArgumentCheck({"rows": {"type": "object", "properties": {"r": {"uniqueItems": True}}}})
    rows = [{"id": n, "tags": ["x", n]} for n in range(1000)]
    assert check("rows", {"r": rows}) is None
    refused = check("rows", {"r": [*rows, {"tags": ["x", 0.0], "id": 0}]})  # (0.0 == 0)
    assert refused is not None and "has non-unique elements" in refused


def test_a_check_that_would_hold_the_event_loop_is_stopped_and_told() -> None:
    refused = ArgumentCheck({"fan": FANS_OUT})("fan", {"a": "x"})
    assert refused is not None
    assert refused.startswith("Invalid arguments for fan: they could not be checked")


def test_arguments_nested_past_the_parser_are_refused_not_raised() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    found = next_step(
        [Entry(1, "user", "go"), Entry(2, "assistant", None, (ToolCall("c1", "add", deep),))],
        1,
        20,
        tools=toolbox(["add"], ["add"]),
    )
    assert isinstance(found, RejectCall) and "nested too deeply" in found.error
