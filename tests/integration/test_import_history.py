"""A history written elsewhere imported as a new conversation's path (`import_history`), through
the client on PostgreSQL and SQLite, with the real loop: the model is sent it as it was written,
the next message continues it, and what cannot be a transcript is refused, writing nothing.

    bad history                                        gets (InvalidMessage)
    -------------------------------------------------  ------------------------------------------
    empty, or a role other than user/assistant/tool    "non-empty list", "role must be one of"
    a tool message answering no call before it         "answers no open call"
    calls left unanswered (mid-history, or at its end)  "are not answered", "ends with the calls"
    a call id used twice, a call without an id/name    "used twice", "needs an id and a name"
    a text over the message limit, or with a NUL       MessageTooLarge, "NUL character"
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.errors import ConversationNotFound, InvalidMessage, StorageQuotaExceeded
from app.testing import fakes
from app.worker.lease_runner import Outcome
from tests.integration.test_file_isolation import client_with
from tests.integration.test_loop import World, make_tools, run
from tests.integration.test_message_tree import echo, said
from tests.integration.test_user_in_the_loop import world_of

WRITTEN = [
    {"role": "user", "content": "add 1 and 2"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "x1", "name": "add", "arguments": '{"a": 1, "b": 2}'}],
    },
    {"role": "tool", "tool_call_id": "x1", "content": "3"},
    {"role": "assistant", "content": "It is 3."},
]


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


def test_an_imported_history_is_the_path_the_next_message_continues(world: World) -> None:
    conversation_id = world.client.create_conversation(tools=["add"])
    assert world.client.import_history(conversation_id, WRITTEN) is True
    assert world.client.import_history(conversation_id, WRITTEN[:1]) is False  # (held already)
    view = world.client.get_conversation(conversation_id)
    assert [(m.seq, m.role, m.parent_seq) for m in view.messages] == [
        (1, "user", None), (2, "assistant", 1), (3, "tool", 2), (4, "assistant", 3),
    ]  # fmt: skip
    assert view.messages[2].tool_name == "add" and view.status == "idle"

    world.client.submit_message(conversation_id, "and times 3?")
    model = fakes.ScriptedModel(echo)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert said(model.requests[0]) == [
        ("user", "add 1 and 2"),
        ("assistant", ""),
        ("tool", "3"),
        ("assistant", "It is 3."),
        ("user", "and times 3?"),
    ]


BAD: list[tuple[Any, str]] = [
    ([], "non-empty list"),
    ([{"role": "system", "content": "x"}], "role must be one of"),
    ([{"role": "tool", "tool_call_id": "x1", "content": "3"}], "answers no open call"),
    ([*WRITTEN[:2], {"role": "user", "content": "next"}], "are not answered"),
    (WRITTEN[:2], "ends with the calls"),
    ([*WRITTEN, *WRITTEN[1:3]], "used twice"),
    ([WRITTEN[0], {"role": "assistant", "tool_calls": [{"id": "x"}]}], "needs an id and a name"),
    ([{"role": "user", "content": "a\x00b"}], "NUL character"),
    ([{"role": "user", "content": "x" * 2_000_000}], "the limit is"),
]


@pytest.mark.parametrize(("history", "said_"), BAD, ids=[b[1] for b in BAD])
def test_a_history_that_cannot_be_a_transcript_is_refused_writing_nothing(
    world: World, history: Any, said_: str
) -> None:
    conversation_id = world.client.create_conversation(tools=["add"])
    with pytest.raises(InvalidMessage, match=said_):
        world.client.import_history(conversation_id, history)
    assert world.client.get_conversation(conversation_id).messages == []
    assert world.client.events(conversation_id).events == []


def test_another_owner_s_conversation_is_not_found(world: World) -> None:
    conversation_id = world.client.create_conversation(tools=["add"], owner="alice")
    with pytest.raises(ConversationNotFound):
        world.client.import_history(conversation_id, WRITTEN, owner="mallory")
    assert world.client.get_conversation(conversation_id).messages == []


def test_a_history_past_the_owner_s_storage_quota_is_refused_writing_nothing(
    world: World,
) -> None:
    client = client_with(world, owner_storage_bytes=1_000)
    held = client.create_conversation(owner="erin")
    client.import_history(held, [{"role": "user", "content": "x" * 800}], owner="erin")
    conversation_id = client.create_conversation(owner="erin")
    with pytest.raises(StorageQuotaExceeded, match="the imported history would add 400 bytes"):
        client.import_history(
            conversation_id, [{"role": "user", "content": "y" * 400}], owner="erin"
        )
    assert client.get_conversation(conversation_id).messages == []
    assert client.events(conversation_id).events == []
