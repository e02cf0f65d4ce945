"""What a response shows back of the request that made it (`store`, `previous_response_id`,
`tool_choice`), read from the committed turn and conversation, the same on create, retrieve and
the stream's snapshots; and how a create request's `store` and `tool_choice` are read."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from app.api.responses.errors import Unsupported
from app.api.responses.ids import ResponseId
from app.api.responses.objects import initial_object, response_object
from app.api.responses.requests import parse_create
from app.client.views import ConversationView, TurnRecord, TurnView

NOW = datetime(2026, 11, 30, tzinfo=UTC)
PREVIOUS = "resp_" + "1" * 32


def record(
    echo: dict[str, Any] | None, tool_choice: str = "auto", forced: str | None = None
) -> TurnRecord:
    conversation = ConversationView(
        id=uuid.uuid4(), owner="o", status="processing", error=None, model="m",
        instructions=None, tools=["add"], tool_choice=tool_choice,  # type: ignore[arg-type]
        context=None, iterations=0, prompt_tokens=0, completion_tokens=0, turn_number=1,
        created_at=NOW, updated_at=NOW, forced_tool=forced,
    )  # fmt: skip
    turn = TurnView(
        id=uuid.uuid4(), conversation_id=conversation.id, number=1, status="queued",
        kind="message", message_seq=1, idempotency_key=None, error=None, prompt_tokens=0,
        completion_tokens=0, created_at=NOW, started_at=None, finished_at=None,
        cancel_requested_at=None, echo=echo,
    )  # fmt: skip
    return TurnRecord(turn, conversation, [])


def shown(found: TurnRecord) -> list[dict[str, Any]]:
    """The response as created or retrieved, and as the stream's first snapshot shows it."""
    response = ResponseId(found.turn.id)
    return [response_object(found, response, {}), initial_object(found, response, {})("queued")]


@pytest.mark.parametrize("store", [False, True])
def test_store_and_previous_response_id_are_shown_as_the_request_gave_them(store: bool) -> None:
    for body in shown(record({"store": store, "previous_response_id": PREVIOUS})):
        assert (body["store"], body["previous_response_id"]) == (store, PREVIOUS)


def test_a_turn_with_no_echo_shows_it_stored_and_after_no_response() -> None:
    """A turn of our own API, or written by the previous release."""
    for body in shown(record(None)):
        assert (body["store"], body["previous_response_id"]) == (True, None)


def test_a_forced_tool_is_shown_as_the_object_naming_it() -> None:
    for body in shown(record(None, "required", "add")):
        assert body["tool_choice"] == {"type": "function", "name": "add"}
    for body in shown(record(None, "none")):
        assert body["tool_choice"] == "none"


def test_store_is_read_as_given_and_the_default_is_true() -> None:
    assert parse_create({"model": "m", "input": "x"}).store is True
    assert parse_create({"model": "m", "input": "x", "store": False}).store is False
    assert parse_create({"model": "m", "input": "x", "store": True}).store is True
    with pytest.raises(Unsupported) as refused:
        parse_create({"model": "m", "input": "x", "store": "no"})
    assert refused.value.param == "store"


def test_tool_choice_is_kept_as_given_for_the_check_against_the_tools() -> None:
    named = {"type": "function", "name": "get_weather"}
    assert parse_create({"model": "m", "input": "x", "tool_choice": named}).tool_choice == named
    assert parse_create({"model": "m", "input": "x"}).tool_choice is None
    with pytest.raises(Unsupported) as refused:
        parse_create({"model": "m", "input": "x", "tool_choice": 3})
    assert refused.value.param == "tool_choice"
