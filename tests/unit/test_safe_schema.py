"""The bounded JSON Schema keywords (`app/worker/safe_schema.py`) and the patterns' engine
(`app/patterns.py`): what each answers, the same as the library's own where both answer."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from app.patterns import pattern_problem
from app.worker.safe_schema import TooCostly, canonical, deadline, deeper_than, validator_for


def errors(schema: dict[str, object], value: object) -> list[str]:
    return [error.message for error in validator_for(schema).iter_errors(value)]


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"pattern": "^a+$"}, "aaa"),
        ({"pattern": "^a+$"}, "aab"),
        ({"pattern": "b"}, "abc"),  # (unanchored, as JSON Schema's)
        ({"patternProperties": {"^x_": {"type": "integer"}}}, {"x_a": 1, "x_b": "no"}),
        ({"patternProperties": {"^x_": {}}, "additionalProperties": False}, {"x_a": 1, "y": 2}),
        ({"properties": {"a": {}}, "additionalProperties": False}, {"a": 1, "b": 2, "c": 3}),
        ({"additionalProperties": {"type": "string"}}, {"a": "x", "b": 2}),
        ({"uniqueItems": True}, [1, 2, 1.0]),
        ({"uniqueItems": True}, [{"a": 1, "b": 2}, {"b": 2, "a": 1}]),
        ({"uniqueItems": True}, [True, 1, False, 0, None]),
        ({"uniqueItems": True}, [[1, 2], [2, 1]]),
    ],
)
def test_the_bounded_keywords_judge_as_the_library_does(
    schema: dict[str, object], value: object
) -> None:
    library = [e.message for e in Draft202012Validator(schema).iter_errors(value)]
    assert (errors(schema, value) == []) == (library == [])


def test_equal_json_values_are_one_canonical_form() -> None:
    assert canonical(1) == canonical(1.0)
    assert canonical({"a": [1, {"b": 2}]}) == canonical({"a": [1.0, {"b": 2}]})
    assert canonical(True) != canonical(1) and canonical(None) != canonical(0)
    assert canonical([1, 2]) != canonical([2, 1])


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("email", "ada@example.com", "ada.example.com"),
        ("date-time", "2026-11-28T10:00:00.5+01:00", "2026-13-28T10:00:00Z"),
        ("date", "2024-02-29", "2023-02-29"),
        ("time", "23:59:60Z", "24:00:00Z"),
        ("uri", "https://example.com/a?b#c", "not a uri"),
        ("uuid", "3f2504e0-4f89-11d3-9a0c-0305e82c3301", "3f2504e0"),
        ("ipv4", "192.0.2.1", "192.0.2.256"),
        ("hostname", "example.com", "-bad-.com"),
        ("regex", "^[a-z]+$", "(?=a)"),
    ],
)
def test_formats_are_asserted(fmt: str, good: str, bad: str) -> None:
    assert errors({"format": fmt}, good) == []
    assert errors({"format": fmt}, bad) == [f"{bad!r} is not a {fmt!r}"]
    assert errors({"format": fmt}, 7) == []  # (a format speaks of strings only)
    assert validator_for({"format": fmt}, formats=False).is_valid(bad)


def test_a_formatted_string_is_capped_before_it_is_read() -> None:
    assert errors({"format": "email"}, "a" * 300 + "@example.com") != []
    assert errors({"format": "uri"}, "https://x/" + "a" * 10_000) != []


def test_depth_is_measured_without_recursion() -> None:
    assert not deeper_than({"a": [1, {"b": []}]}, 4)  # (an object, an array, an object, an array)
    assert deeper_than({"a": [1, {"b": []}]}, 3)
    assert deeper_than(_deep(50_000), 64) and not deeper_than(_deep(63), 64)
    assert not deeper_than("text", 1)


def _deep(levels: int) -> list[object]:
    """`levels` + 1 arrays, each in the next."""
    value: list[object] = []
    for _ in range(levels):
        value = [value]
    return value


def test_a_check_past_its_deadline_stops() -> None:
    fan = {
        "$defs": {
            **{f"d{n}": {"anyOf": [{"$ref": f"#/$defs/d{n + 1}"}] * 2} for n in range(40)},
            "d40": {"minLength": 5},
        },
        "$ref": "#/$defs/d0",
    }
    with pytest.raises(TooCostly), deadline(0.05):
        list(validator_for(fan).iter_errors("x"))


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("a{4294967296}", "a repetition {4294967296} is over 1,000"),
        ("(?=a)", "invalid perl operator"),
        ("(a)\\1", "invalid escape sequence"),
        ("x" * 1001, "at most 1,000 characters"),
    ],
)
def test_a_pattern_re2_cannot_run_is_told_why(pattern: str, says: str) -> None:
    problem = pattern_problem(pattern)
    assert problem is not None and says in problem


def test_a_pattern_re2_runs_has_no_problem() -> None:
    assert pattern_problem("^(a+)+$") is None
    assert pattern_problem("[[:alpha:]]{2,1000}") is None
    assert pattern_problem(7) is None
