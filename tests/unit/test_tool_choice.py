"""OpenAI's `tool_choice`, both dialects' shapes, read into how a conversation keeps it; every
value that cannot be kept refused naming `tool_choice`."""

from __future__ import annotations

from typing import Any

import pytest

from app.client.setup import check_setup
from app.client.tool_choice import InvalidToolChoice, ToolChoice, read_tool_choice
from app.errors import InvalidRequest

TOOLS = ("get_weather", "add")


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        (None, ToolChoice("auto")),
        ("auto", ToolChoice("auto")),
        ("none", ToolChoice("none")),
        ("required", ToolChoice("required")),
        ({"type": "required"}, ToolChoice("required")),
        ({"type": "function", "name": "get_weather"}, ToolChoice("required", "get_weather")),
        (
            {"type": "function", "function": {"name": "add"}},  # Chat Completions
            ToolChoice("required", "add"),
        ),
    ],
)
def test_each_shape_is_kept_as_a_mode_and_the_forced_tool(given: Any, kept: ToolChoice) -> None:
    assert read_tool_choice(given, TOOLS) == kept


@pytest.mark.parametrize(
    ("given", "tools", "says"),
    [
        ("sometimes", TOOLS, "must be one of auto, none, required"),
        (3, TOOLS, "must be one of"),
        ({"type": "function", "name": "nope"}, TOOLS, "'nope', which is not one of"),
        ({"type": "function"}, TOOLS, "needs the function's name"),
        ({"type": "function", "name": ""}, TOOLS, "needs the function's name"),
        ({"type": "function", "function": "add"}, TOOLS, "needs the function's name"),
        (
            {"type": "function", "name": "add", "function": {"name": "add"}},
            TOOLS,
            "give the function's name once",
        ),
        ({"type": "function", "name": "x" * 65}, TOOLS, "at most 64"),
        ({"type": "web_search_preview"}, TOOLS, "'web_search_preview' is not supported"),
        ({"type": "auto", "extra": 1}, TOOLS, "'auto' is not supported"),
        ("required", (), "needs at least one tool"),
        ({"type": "function", "name": "add"}, (), "needs at least one tool"),
    ],
)
def test_a_choice_that_cannot_be_kept_is_refused_naming_tool_choice(
    given: Any, tools: tuple[str, ...], says: str
) -> None:
    with pytest.raises(InvalidToolChoice, match=says) as refused:
        read_tool_choice(given, tools)
    assert isinstance(refused.value, InvalidRequest) and refused.value.param == "tool_choice"


def test_the_responses_api_shows_a_forced_tool_as_its_function_object() -> None:
    assert ToolChoice("required", "add").responses_shape() == {"type": "function", "name": "add"}
    assert ToolChoice("none").responses_shape() == "none"


def test_a_setup_keeps_the_forced_tool_beside_required_and_a_client_tool_can_be_forced() -> None:
    locate = {"name": "get_location", "description": "", "parameters": {"type": "object"}}
    columns = check_setup(
        {
            "tools": ["add"],
            "client_tools": [locate],
            "tool_choice": {"type": "function", "name": "get_location"},
        },
        "demo/offline",
        10_000,
    )
    assert (columns["tool_choice"], columns["forced_tool"]) == ("required", "get_location")
    plain = check_setup({"tools": ["add"]}, "demo/offline", 10_000)
    assert (plain["tool_choice"], plain["forced_tool"]) == ("auto", None)
    with pytest.raises(InvalidToolChoice):
        check_setup({"tool_choice": "required"}, "demo/offline", 10_000)
