"""Conversations as a tree, through the client on PostgreSQL and SQLite, with the real loop
(in-process model and tools): edit, regenerate, switch, fork; the busy policies `rollback` and
`steer`; what the model is sent (only the active path, ever); the bad-input table.

    bad input                                              what it gets (nothing written)
    -----------------------------------------------------  ---------------------------------
    edit / regenerate / switch / fork at a seq the          MessageNotFound
      conversation does not have (another conversation's
      message, or none)
    seq 0, -1, True, "2"                                    InvalidRequest ("seq must be ...")
    edit of an assistant or tool message                    NotBranchable ("only a user
                                                              message can be edited")
    regenerate with no user message at or above it          NotBranchable
    switch while a turn runs, is queued or waits            ConversationBusy
    fork at a message whose calls have no result on its     NotBranchable ("without results")
      path
    an edit with on_busy='steer' while a turn runs          NotBranchable ("cannot steer")
    a steer into a turn that waits for its client           NotBranchable ("nothing runs to
                                                              steer")
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from app.errors import (
    ConversationBusy,
    InvalidRequest,
    MessageNotFound,
    NotBranchable,
)
from app.models import tables
from app.testing import fakes
from app.worker.lease_runner import Outcome
from app.worker.ports import ModelRequest
from tests.integration.test_loop import World, make_tools, run
from tests.integration.test_user_in_the_loop import world_of


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


def said(request: ModelRequest) -> list[tuple[str, str]]:
    """What the model was sent, as (role, text) pairs, the system message left out."""
    return [
        (str(m["role"]), str(m.get("content") or ""))
        for m in request.messages
        if m["role"] != "system"
    ]


def echo(request: ModelRequest) -> Any:
    """Answers with the last user message's text, upper-cased."""
    last = [m for m in request.messages if m["role"] == "user"][-1]
    return fakes.text(str(last["content"]).upper())


def by_request(first: Any, then: str) -> Any:
    """The first request gets `first`, every later one the text `then`."""
    asked: list[ModelRequest] = []

    def reply(request: ModelRequest) -> Any:
        asked.append(request)
        return first if len(asked) == 1 else fakes.text(then)

    return reply


def path(world: World, conversation_id: uuid.UUID) -> list[tuple[int, str, str]]:
    return [
        (m.seq, m.role, m.content or "")
        for m in world.client.get_conversation(conversation_id).messages
    ]


def event_types(world: World, conversation_id: uuid.UUID) -> list[str]:
    return [e.type for e in world.client.events(conversation_id).events]


def chat(world: World, text: str = "hello") -> uuid.UUID:
    """A conversation without tools whose first turn is answered."""
    conversation_id = world.conversation(text, tools=[])
    assert run(world.runner(fakes.ScriptedModel(echo)), conversation_id) is Outcome.IDLE
    return conversation_id


# --- edit, regenerate, switch -----------------------------------------------------------------


def test_an_edit_is_a_new_version_and_the_model_is_sent_only_its_path(world: World) -> None:
    conversation_id = chat(world, "hello")
    world.client.submit_message(conversation_id, "second")
    assert run(world.runner(fakes.ScriptedModel(echo)), conversation_id) is Outcome.IDLE

    edited = world.client.edit_message(conversation_id, 3, "second, edited")
    assert edited.turn_status == "queued" and edited.seq == 5
    model = fakes.ScriptedModel(echo)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert said(model.requests[0]) == [
        ("user", "hello"),
        ("assistant", "HELLO"),
        ("user", "second, edited"),
    ]
    assert path(world, conversation_id) == [
        (1, "user", "hello"),
        (2, "assistant", "HELLO"),
        (5, "user", "second, edited"),
        (6, "assistant", "SECOND, EDITED"),
    ]
    view = world.client.get_conversation(conversation_id)
    edit = view.messages[2]
    assert (edit.parent_seq, edit.siblings, edit.version, edit.version_count) == (2, [3, 5], 2, 2)
    assert [m.version_count for m in view.messages] == [1, 1, 2, 1]
    every = world.client.get_conversation(conversation_id, all_versions=True).messages
    assert [(m.seq, m.active) for m in every] == [
        (1, True), (2, True), (3, False), (4, False), (5, True), (6, True),
    ]  # fmt: skip
    assert "branch.switched" in event_types(world, conversation_id)

    # back to the first version (its newest message), then forward again: no turn runs
    back = world.client.switch_branch(conversation_id, 3)
    assert [m.seq for m in back.messages] == [1, 2, 3, 4]
    assert world.client.get_conversation(conversation_id).status == "idle"
    assert [m.seq for m in world.client.switch_branch(conversation_id, 5).messages] == [1, 2, 5, 6]
    assert event_types(world, conversation_id).count("branch.switched") == 3
    # the next message goes on the active path, and only it is sent
    world.client.switch_branch(conversation_id, 3)
    world.client.submit_message(conversation_id, "third")
    model = fakes.ScriptedModel(echo)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert [text for _role, text in said(model.requests[0])] == [
        "hello", "HELLO", "second", "SECOND", "third",
    ]  # fmt: skip
    assert [m.parent_seq for m in world.client.get_conversation(conversation_id).messages] == [
        None, 1, 2, 3, 4, 7,
    ]  # fmt: skip


def test_editing_the_first_message_makes_a_new_root(world: World) -> None:
    conversation_id = chat(world, "hello")
    world.client.edit_message(conversation_id, 1, "bonjour")
    model = fakes.ScriptedModel(echo)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert said(model.requests[0]) == [("user", "bonjour")]
    view = world.client.get_conversation(conversation_id)
    assert [(m.seq, m.parent_seq, m.siblings) for m in view.messages] == [
        (3, None, [1, 3]),
        (4, 3, [4]),
    ]


def test_a_regenerate_answers_the_same_message_again_as_a_sibling(world: World) -> None:
    conversation_id = chat(world, "hello")
    again = world.client.regenerate(conversation_id)
    assert again.turn is not None and again.turn.kind == "regenerate"
    model = fakes.ScriptedModel(lambda _: fakes.text("Hi, once more"))
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert said(model.requests[0]) == [("user", "hello")]  # the old answer is not sent
    view = world.client.get_conversation(conversation_id)
    assert [(m.seq, m.content, m.siblings) for m in view.messages] == [
        (1, "hello", [1]),
        (3, "Hi, once more", [2, 3]),
    ]
    # an older answer named by its seq: the same user message, a third version
    world.client.regenerate(conversation_id, 2)
    assert run(world.runner(fakes.ScriptedModel(echo)), conversation_id) is Outcome.IDLE
    assert world.client.get_conversation(conversation_id).messages[1].siblings == [2, 3, 4]
    assert world.client.current_turn(conversation_id) is not None


def test_a_regenerate_after_tool_calls_makes_new_call_ids_unique_across_branches(
    world: World,
) -> None:
    conversation_id = world.conversation("1 + 2?", tools=["add"])
    add_then_answer = fakes.by_iteration(
        [fakes.calls(("c1", "add", {"a": 1, "b": 2})), fakes.text("3")]
    )
    assert run(world.runner(fakes.ScriptedModel(add_then_answer)), conversation_id) is Outcome.IDLE
    world.client.regenerate(conversation_id)
    # the model repeats the id c1: a result of another branch holds it
    again = fakes.by_iteration([fakes.calls(("c1", "add", {"a": 1, "b": 2})), fakes.text("3!")])
    assert run(world.runner(fakes.ScriptedModel(again)), conversation_id) is Outcome.IDLE
    view = world.client.get_conversation(conversation_id)
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "assistant"]
    renamed = view.messages[2].tool_call_id
    assert renamed not in (None, "c1") and view.messages[-1].content == "3!"
    # the session cache serves the path's outputs only: the other branch's c1 is not there
    listed, total = world.store.cached_outputs(conversation_id)
    assert (total, [output.call_id for output in listed]) == (1, [renamed])
    assert world.store.cached_output(conversation_id, "c1", offset=0, limit=10) is None
    assert world.store.cached_output(conversation_id, renamed, offset=0, limit=10) is not None


# --- fork ---------------------------------------------------------------------------------------


def test_a_fork_copies_the_path_into_a_new_conversation_that_goes_its_own_way(
    world: World,
) -> None:
    conversation_id = world.conversation("1 + 2?", tools=["add"], context={"app": "x"})
    add_then_answer = fakes.by_iteration(
        [fakes.calls(("c1", "add", {"a": 1, "b": 2})), fakes.text("It is 3.")]
    )
    assert run(world.runner(fakes.ScriptedModel(add_then_answer)), conversation_id) is Outcome.IDLE
    world.client.submit_message(conversation_id, "and 2 + 2?")
    assert run(world.runner(fakes.ScriptedModel(echo)), conversation_id) is Outcome.IDLE

    fork = world.client.fork_conversation(conversation_id, 4)
    assert fork.id != conversation_id and fork.status == "idle"
    assert (fork.forked_from, fork.forked_at_seq) == (conversation_id, 4)
    assert (fork.tools, fork.context, fork.owner) == (["add"], {"app": "x"}, None)
    assert [(m.seq, m.role, m.parent_seq) for m in fork.messages] == [
        (1, "user", None), (2, "assistant", 1), (3, "tool", 2), (4, "assistant", 3),
    ]  # fmt: skip
    # the session cache's outputs came along
    with world.engine.connect() as connection:
        kept = connection.execute(
            select(tables.tool_outputs.c.call_id, tables.tool_outputs.c.seq).where(
                tables.tool_outputs.c.conversation_id == fork.id
            )
        ).all()
    assert [tuple(row) for row in kept] == [(fork.messages[1].tool_calls[0]["id"], 3)]
    world.client.submit_message(fork.id, "and 5 + 5?")
    model = fakes.ScriptedModel(echo)
    assert run(world.runner(model), fork.id) is Outcome.IDLE
    assert [text for _role, text in said(model.requests[0])][-2:] == ["It is 3.", "and 5 + 5?"]
    assert len(path(world, conversation_id)) == 6  # the source is untouched
    # the whole active path by default; a fork of a fork
    assert len(world.client.fork_conversation(fork.id).messages) == 6


# --- the busy policies --------------------------------------------------------------------------


def test_a_steer_message_joins_the_running_turn_at_its_next_model_call(world: World) -> None:
    conversation_id = world.conversation("Add 1 and 2", tools=["add"])
    first = world.client.current_turn(conversation_id)
    assert first is not None
    steered: list[Any] = []

    async def add(a: int, b: int) -> str:  # the user writes while the tool runs
        steered.append(
            await asyncio.to_thread(
                world.client.submit_message, conversation_id, "then add 10", on_busy="steer"
            )
        )
        return str(a + b)

    world.tools.tools["add"] = add
    model = fakes.ScriptedModel(by_request(fakes.calls(("c1", "add", {"a": 1, "b": 2})), "13"))
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert [role for role, _text in said(model.requests[1])] == [
        "user", "assistant", "tool", "user",
    ]  # fmt: skip
    assert said(model.requests[1])[-1] == ("user", "then add 10")
    assert len(model.requests) == 2  # one run: no new claim, no third call
    (steer,) = steered
    ended = world.client.get_turn(first.id)
    running_on = world.client.get_turn(steer.turn_id)
    assert (ended.status, running_on.status, running_on.kind) == ("completed", "completed", "steer")
    assert path(world, conversation_id)[-1][1:] == ("assistant", "13")
    assert world.roles(conversation_id) == ["user", "assistant", "tool", "user", "assistant"]
    types = event_types(world, conversation_id)
    at = types.index("turn.completed")
    assert types[at : at + 4] == [
        "turn.completed", "message.committed", "turn.started", "status.changed",
    ]  # fmt: skip


def test_a_steer_message_runs_next_when_the_turn_ends_first(world: World) -> None:
    conversation_id = world.conversation("hello", tools=[])

    def answer_while_the_user_writes(request: ModelRequest) -> Any:
        if len(model.requests) == 1:
            world.client.submit_message(conversation_id, "and goodbye", on_busy="steer")
        return echo(request)

    model = fakes.ScriptedModel(answer_while_the_user_writes)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert said(model.requests[1]) == [
        ("user", "hello"), ("assistant", "HELLO"), ("user", "and goodbye"),
    ]  # fmt: skip
    turns = [world.client.get_turn(t) for t in _turn_ids(world, conversation_id)]
    assert [(t.kind, t.status) for t in turns] == [("message", "completed"), ("steer", "completed")]


def test_a_steer_message_repeats_by_its_key_and_a_cancelled_one_is_not_taken_in(
    world: World,
) -> None:
    conversation_id = world.conversation("Add 1 and 2", tools=["add"])
    sent: list[Any] = []

    async def add(a: int, b: int) -> str:
        def steer_then_cancel() -> None:
            for _ in range(2):  # the same key twice: one turn
                sent.append(
                    world.client.submit_message(
                        conversation_id, "then add 10", on_busy="steer", idempotency_key="s1"
                    )
                )
            assert sent[1].repeated and sent[1].turn_id == sent[0].turn_id
            world.client.cancel_turn(sent[0].turn_id)  # the user takes it back

        await asyncio.to_thread(steer_then_cancel)
        return str(a + b)

    world.tools.tools["add"] = add
    model = fakes.ScriptedModel(by_request(fakes.calls(("c1", "add", {"a": 1, "b": 2})), "3"))
    # the turn answers; the cancelled steer turn, next, is ended at its claim (the last outcome)
    assert run(world.runner(model), conversation_id) is Outcome.CANCELLED
    assert len(model.requests) == 2
    assert "then add 10" not in str(model.requests[1].messages)  # not taken in
    turns = [world.client.get_turn(t) for t in _turn_ids(world, conversation_id)]
    assert [(t.kind, t.status) for t in turns] == [("message", "completed"), ("steer", "cancelled")]


def test_a_steer_message_waits_through_a_pause_and_joins_the_resumed_turn(
    world: World,
) -> None:
    conversation_id = world.client.create_conversation(
        client_tools=[{"name": "pick", "description": "the user picks", "parameters": {}}]
    )
    world.client.submit_message(conversation_id, "pick one")

    async def ask(request: ModelRequest) -> Any:
        if len(model.requests) == 1:  # the user writes while the model answers
            await asyncio.to_thread(
                world.client.submit_message, conversation_id, "the blue one", on_busy="steer"
            )
            return fakes.calls(("p1", "pick", {}))
        return fakes.text("Blue it is.")

    model = fakes.ScriptedModel(ask)
    assert run(world.runner(model), conversation_id) is Outcome.REQUIRES_ACTION
    waiting = world.client.current_turn(conversation_id)
    assert waiting is not None and waiting.status == "requires_action"
    world.client.answer_actions(waiting.id, {"p1": "red or blue"})
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert said(model.requests[-1])[-2:] == [("tool", "red or blue"), ("user", "the blue one")]
    turns = [world.client.get_turn(t) for t in _turn_ids(world, conversation_id)]
    assert [(t.kind, t.status) for t in turns] == [("message", "completed"), ("steer", "completed")]


def test_a_rollback_cancels_the_turn_and_drops_its_messages_from_the_path(world: World) -> None:
    conversation_id = world.conversation("Add 1 and 2", tools=["add"])

    async def add(a: int, b: int) -> str:  # the user changes their mind while the tool runs
        await asyncio.to_thread(
            world.client.submit_message, conversation_id, "no: add 5 and 5", on_busy="rollback"
        )
        return str(a + b)

    world.tools.tools["add"] = add
    model = fakes.ScriptedModel(by_request(fakes.calls(("c1", "add", {"a": 1, "b": 2})), "10"))
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert said(model.requests[-1]) == [("user", "no: add 5 and 5")]
    assert path(world, conversation_id)[-1][1:] == ("assistant", "10")
    assert [role for _seq, role, _text in path(world, conversation_id)] == ["user", "assistant"]
    turns = [world.client.get_turn(t) for t in _turn_ids(world, conversation_id)]
    assert [t.status for t in turns] == ["cancelled", "completed"]
    every = world.client.get_conversation(conversation_id, all_versions=True).messages
    assert [m.active for m in every[:3]] == [False, False, False]  # kept, off the path
    now_asked = world.client.get_conversation(conversation_id).messages[0]
    assert now_asked.siblings == [1, now_asked.seq] and now_asked.seq > 3


def test_an_edit_queued_behind_a_running_turn_moves_the_path_when_it_starts(
    world: World,
) -> None:
    conversation_id = chat(world, "hello")
    world.client.submit_message(conversation_id, "second")
    # while turn 2 is queued (it has not run), the user edits the first message: enqueued
    edited = world.client.edit_message(conversation_id, 1, "hi", on_busy="enqueue")
    assert edited.detail is not None  # queued behind
    model = fakes.ScriptedModel(echo)
    assert run(world.runner(model), conversation_id) is Outcome.IDLE
    assert said(model.requests[-1]) == [("user", "hi")]
    assert [text for _seq, _role, text in path(world, conversation_id)] == ["hi", "HI"]


def test_racing_edits_of_one_message_one_wins_or_both_queue(world: World) -> None:
    conversation_id = chat(world, "hello")
    outcomes: list[Any] = []

    def edit(text: str, policy: str) -> None:
        try:
            outcomes.append(world.client.edit_message(conversation_id, 1, text, on_busy=policy))
        except ConversationBusy as exc:
            outcomes.append(exc)

    racers = [threading.Thread(target=edit, args=(f"v{n}", "reject")) for n in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert sorted(type(o).__name__ for o in outcomes) == ["ConversationBusy", "Submitted"]
    assert run(world.runner(fakes.ScriptedModel(echo)), conversation_id) is Outcome.IDLE
    outcomes.clear()
    racers = [threading.Thread(target=edit, args=(f"w{n}", "enqueue")) for n in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert [type(o).__name__ for o in outcomes] == ["Submitted", "Submitted"]
    assert run(world.runner(fakes.ScriptedModel(echo)), conversation_id) is Outcome.IDLE
    view = world.client.get_conversation(conversation_id)
    assert len(view.messages) == 2 and view.messages[0].content in ("w0", "w1")
    assert len(view.messages[0].siblings) == 4  # hello, the winner of the first race, w0, w1

    # two regenerates at once: one starts, the other is refused; never a broken path
    outcomes.clear()

    def regenerate() -> None:
        try:
            outcomes.append(world.client.regenerate(conversation_id))
        except ConversationBusy as exc:
            outcomes.append(exc)

    racers = [threading.Thread(target=regenerate) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert sorted(type(o).__name__ for o in outcomes) == ["ConversationBusy", "Submitted"]
    assert run(world.runner(fakes.ScriptedModel(echo)), conversation_id) is Outcome.IDLE
    assert len(world.client.get_conversation(conversation_id).messages[1].siblings) == 2


# --- bad input ----------------------------------------------------------------------------------


def test_each_bad_tree_request_is_refused_and_writes_nothing(world: World) -> None:
    conversation_id = world.conversation("1 + 2?", tools=["add"])
    script = fakes.by_iteration([fakes.calls(("c1", "add", {"a": 1, "b": 2})), fakes.text("3")])
    assert run(world.runner(fakes.ScriptedModel(script)), conversation_id) is Outcome.IDLE
    other = chat(world, "elsewhere")
    world.client.submit_message(other, "more")  # (it runs: a switch of it is refused)
    short = chat(world, "short")  # messages 1 and 2; the first conversation has a 3
    client = world.client
    before = client.events(conversation_id).last_seq
    refusals: list[tuple[Any, type[Exception], str]] = [
        (lambda: client.edit_message(conversation_id, 9, "x"), MessageNotFound, "no message 9"),
        (lambda: client.switch_branch(conversation_id, 9), MessageNotFound, "no message 9"),
        (lambda: client.regenerate(conversation_id, 9), MessageNotFound, "no message 9"),
        (lambda: client.fork_conversation(conversation_id, 9), MessageNotFound, "no message 9"),
        (lambda: client.edit_message(short, 3, "x"), MessageNotFound, "no message 3"),
        (lambda: client.edit_message(conversation_id, 0, "x"), InvalidRequest, "seq must be"),
        (lambda: client.switch_branch(conversation_id, True), InvalidRequest, "seq must be"),
        (lambda: client.regenerate(conversation_id, "2"), InvalidRequest, "seq must be"),  # type: ignore[arg-type]
        (lambda: client.edit_message(conversation_id, 2, "x"), NotBranchable, "only a user"),
        (lambda: client.edit_message(conversation_id, 3, "x"), NotBranchable, "tool message"),
        (lambda: client.fork_conversation(conversation_id, 2), NotBranchable, "without results"),
        (lambda: client.switch_branch(other, 1), ConversationBusy, "cancel it"),
        (lambda: client.edit_message(other, 1, "x", on_busy="steer"), NotBranchable, "steer"),
    ]
    for attempt, error, words in refusals:
        with pytest.raises(error, match=words):
            attempt()
    assert client.events(conversation_id).last_seq == before
    assert len(client.get_conversation(conversation_id, all_versions=True).messages) == 4
    client.cancel(other)


def test_a_steer_into_a_turn_that_waits_for_its_client_is_refused(world: World) -> None:
    conversation_id = world.client.create_conversation(
        client_tools=[{"name": "pick", "description": "the user picks", "parameters": {}}]
    )
    world.client.submit_message(conversation_id, "pick one")
    script = fakes.by_iteration([fakes.calls(("p1", "pick", {}))])
    assert run(world.runner(fakes.ScriptedModel(script)), conversation_id) is (
        Outcome.REQUIRES_ACTION
    )
    before = world.client.events(conversation_id).last_seq
    with pytest.raises(NotBranchable, match="nothing runs to steer"):
        world.client.submit_message(conversation_id, "hurry", on_busy="steer")
    assert world.client.events(conversation_id).last_seq == before
    world.client.cancel(conversation_id)


def _turn_ids(world: World, conversation_id: uuid.UUID) -> list[uuid.UUID]:
    with world.engine.connect() as connection:
        return list(
            connection.execute(
                select(tables.turns.c.id)
                .where(tables.turns.c.conversation_id == conversation_id)
                .order_by(tables.turns.c.number)
            ).scalars()
        )
