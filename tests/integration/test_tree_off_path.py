"""Commands on a message off the active path, through the client on PostgreSQL and SQLite with
the real loop: an edit, a regenerate or a reply after a message of another branch applies to that
message's own path (the path moves to its branch first), at rest on the web side and queued
behind a running turn at the claim that starts it. The model is sent exactly the new path.

    messages 1-6 (u1 a2 u3 a4 u5 a6), then       the path after the command's turn
    -------------------------------------------  ------------------------------------------------
    edit 3, regenerate 5                         1 2 3 4 5 + the new answer
    edit 1, edit 5                               1 2 3 4 + the edit + its answer
    edit 1, regenerate 5                         1 2 3 4 5 + the new answer
    edit 1, reply after 4                        1 2 3 4 + the reply + its answer
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from app.testing import fakes
from app.worker.lease_runner import Outcome
from app.worker.ports import ModelError, ModelRequest
from tests.integration.test_loop import World, make_tools, run
from tests.integration.test_user_in_the_loop import world_of


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


def echo(request: ModelRequest) -> Any:
    """Answers with the last user message's text, upper-cased."""
    last = [m for m in request.messages if m["role"] == "user"][-1]
    return fakes.text(str(last["content"]).upper())


def said(request: ModelRequest) -> list[str]:
    """What the model was sent, as texts, the system message left out."""
    return [str(m.get("content") or "") for m in request.messages if m["role"] != "system"]


def path(world: World, conversation_id: uuid.UUID) -> list[tuple[int, str]]:
    return [
        (m.seq, m.content or "") for m in world.client.get_conversation(conversation_id).messages
    ]


def answered(world: World, conversation_id: uuid.UUID) -> fakes.ScriptedModel:
    """Run the conversation's turns with the echo model; it must come to rest idle."""
    model = fakes.ScriptedModel(echo)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    return model


def six_messages(world: World) -> uuid.UUID:
    """u1 a2 u3 a4 u5 a6: three answered turns on one path."""
    conversation_id = world.conversation("one", tools=[])
    answered(world, conversation_id)
    for text in ("three", "five"):
        world.client.submit_message(conversation_id, text)
        answered(world, conversation_id)
    assert [seq for seq, _text in path(world, conversation_id)] == [1, 2, 3, 4, 5, 6]
    return conversation_id


FIRST_FOUR = ["one", "ONE", "three", "THREE"]
FIRST_FOUR_PATH = list(zip([1, 2, 3, 4], FIRST_FOUR, strict=True))


def test_a_regenerate_of_a_message_on_another_branch_answers_it_on_its_own_branch(
    world: World,
) -> None:
    conversation_id = six_messages(world)
    world.client.edit_message(conversation_id, 3, "three, edited")
    answered(world, conversation_id)  # 7 and 8: the path is 1 2 7 8

    again = world.client.regenerate(conversation_id, 5)
    model = answered(world, conversation_id)
    assert said(model.requests[0]) == [*FIRST_FOUR, "five"]
    assert path(world, conversation_id) == [
        *FIRST_FOUR_PATH,
        (5, "five"),
        (9, "FIVE"),
    ]
    assert again.turn is not None
    assert world.client.get_turn(again.turn.id).status == "completed"
    assert world.client.get_conversation(conversation_id).messages[-1].siblings == [6, 9]


def test_an_edit_of_a_message_on_another_branch_keeps_the_messages_before_it(
    world: World,
) -> None:
    conversation_id = six_messages(world)
    world.client.edit_message(conversation_id, 1, "uno")
    answered(world, conversation_id)  # 7 and 8: the path is 7 8

    world.client.edit_message(conversation_id, 5, "five, edited")
    model = answered(world, conversation_id)
    assert said(model.requests[0]) == [*FIRST_FOUR, "five, edited"]
    assert path(world, conversation_id) == [
        *FIRST_FOUR_PATH,
        (9, "five, edited"),
        (10, "FIVE, EDITED"),
    ]


def test_a_regenerate_after_an_edit_of_the_first_message_answers_on_the_old_branch(
    world: World,
) -> None:
    conversation_id = six_messages(world)
    world.client.edit_message(conversation_id, 1, "uno")
    answered(world, conversation_id)

    world.client.regenerate(conversation_id, 5)
    model = answered(world, conversation_id)
    assert said(model.requests[0]) == [*FIRST_FOUR, "five"]
    assert [seq for seq, _text in path(world, conversation_id)] == [1, 2, 3, 4, 5, 9]


def test_a_reply_after_a_message_on_another_branch_goes_on_from_its_path(world: World) -> None:
    conversation_id = six_messages(world)
    world.client.edit_message(conversation_id, 1, "uno")
    answered(world, conversation_id)

    world.client.submit_message(conversation_id, "and then", after_seq=4)
    model = answered(world, conversation_id)
    assert said(model.requests[0]) == [*FIRST_FOUR, "and then"]
    assert [seq for seq, _text in path(world, conversation_id)] == [1, 2, 3, 4, 9, 10]


@pytest.mark.parametrize("command", ["edit", "regenerate"])
def test_a_command_off_the_path_queued_behind_a_turn_moves_the_path_when_it_starts(
    world: World, command: str
) -> None:
    conversation_id = six_messages(world)
    world.client.edit_message(conversation_id, 1, "uno")
    answered(world, conversation_id)  # 7 and 8
    world.client.submit_message(conversation_id, "dos")  # 9, its turn not run yet
    if command == "edit":
        world.client.edit_message(conversation_id, 5, "five, edited", on_busy="enqueue")
    else:
        world.client.regenerate(conversation_id, 5, on_busy="enqueue")

    model = answered(world, conversation_id)
    assert said(model.requests[0]) == ["uno", "UNO", "dos"]
    last = "five, edited" if command == "edit" else "five"
    assert said(model.requests[1]) == [*FIRST_FOUR, last]
    seqs = [seq for seq, _text in path(world, conversation_id)]
    assert seqs == ([1, 2, 3, 4, 11, 12] if command == "edit" else [1, 2, 3, 4, 5, 11])


def test_wait_for_turn_shows_each_message_s_versions_as_the_conversation_does(
    world: World,
) -> None:
    conversation_id = world.conversation("one", tools=[])
    answered(world, conversation_id)
    edited = world.client.edit_message(conversation_id, 1, "uno")
    answered(world, conversation_id)
    finished = world.client.wait_for_turn(edited.turn_id, 5)
    read = world.client.get_conversation(conversation_id).messages
    assert [(m.seq, m.siblings) for m in finished.messages] == [(3, [1, 3]), (4, [4])]
    assert [(m.seq, m.siblings) for m in finished.messages] == [(m.seq, m.siblings) for m in read]


def test_a_queued_edit_s_new_call_ids_are_unique_against_the_path_its_claim_leaves(
    world: World,
) -> None:
    conversation_id = world.conversation("1 + 2?", tools=["add"])  # its turn not run yet
    world.client.edit_message(conversation_id, 1, "2 + 2?", on_busy="enqueue")

    def add_then_answer(request: ModelRequest) -> Any:  # the same call id every time
        if request.messages[-1]["role"] == "user":
            return fakes.calls(("c1", "add", {"a": 1, "b": 2}))
        return fakes.text("Done.")

    # the edit's claim leaves the path holding the first turn's result for c1
    assert run(world.runner(fakes.ScriptedModel(add_then_answer)), conversation_id) is (
        Outcome.IDLE
    )
    view = world.client.get_conversation(conversation_id)
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "assistant"]
    assert view.messages[0].content == "2 + 2?"
    assert view.messages[2].tool_call_id not in (None, "c1")


def test_a_cancel_answers_only_the_open_calls_of_the_active_path(world: World) -> None:
    conversation_id = world.conversation("one", tools=["add"])
    answered(world, conversation_id)  # 1 and 2

    async def add(a: int, b: int) -> str:  # the janitor fails the turn while its tool runs
        await asyncio.to_thread(world.upkeep.fail_stale, -1, "silent too long")
        return str(a + b)

    world.tools.tools["add"] = add
    world.client.submit_message(conversation_id, "two")
    calls = fakes.ScriptedModel(lambda _: fakes.calls(("c1", "add", {"a": 1, "b": 2})))
    assert run(world.runner(calls), conversation_id) is Outcome.LEASE_LOST
    assert world.client.get_conversation(conversation_id).status == "failed"  # c1 left open

    # a regenerate of the first answer, cancelled before a worker claims it
    again = world.client.regenerate(conversation_id, 2)
    assert again.turn is not None
    world.client.cancel(conversation_id)
    assert world.client.get_turn(again.turn.id).status == "cancelled"
    assert path(world, conversation_id) == [(1, "one")]  # nothing answers c1 on this path
    every = world.client.get_conversation(conversation_id, all_versions=True).messages
    assert [m.role for m in every] == ["user", "assistant", "user", "assistant"]


def test_a_retry_after_a_switch_to_an_answered_version_completes_without_a_model_call(
    world: World,
) -> None:
    conversation_id = world.conversation("one", tools=[])
    answered(world, conversation_id)  # 1 and 2
    world.client.edit_message(conversation_id, 1, "uno")
    answered(world, conversation_id)  # 3 and 4
    world.client.submit_message(conversation_id, "dos")
    broken = fakes.ScriptedModel(fakes.by_iteration([ModelError("the model broke")]))
    assert run(world.runner(broken), conversation_id) is Outcome.FAILED

    world.client.switch_branch(conversation_id, 1)  # the first version, answered; still failed
    retried = world.client.retry_conversation(conversation_id)
    model = fakes.ScriptedModel(echo)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert model.requests == []  # its path ends with an answer: nothing to do
    assert retried.turn_id is not None
    assert world.client.get_turn(retried.turn_id).status == "completed"
    assert path(world, conversation_id) == [(1, "one"), (2, "ONE")]
