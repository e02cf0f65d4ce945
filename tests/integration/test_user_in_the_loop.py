"""A turn that waits for the user (`requires_action`): the model's question (`agent_clarify`) and
client-executed tools, on a real database (PostgreSQL and SQLite) with in-process model and tools.

Each answer is committed by the web side as the waiting call's result; the next claim resumes the
turn like after any other step. What each bad answer gets is at the bottom."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from app.client import ChatClient, Decision
from app.client.store import reads
from app.config import load_settings
from app.db import make_engine
from app.errors import (
    ActionAlreadyAnswered,
    ActionNotFound,
    ConversationBusy,
    InvalidRequest,
    TurnNotFound,
)
from app.models import CANCELLED_CALL_RESULT
from app.testing import fakes
from app.worker.lease_runner import Outcome
from app.worker.store import TurnStore, Upkeep
from tests.integration.test_loop import CONFIG, World, _publish, make_tools, run
from tests.invariants import violations

LOCATE = {
    "name": "get_location",
    "description": "The user's city, from their browser.",
    "parameters": {
        "type": "object",
        "properties": {"precision": {"type": "string", "enum": ["city", "country"]}},
        "required": ["precision"],
    },
}


def world_of(url: str, tools: fakes.InMemoryTools) -> Iterator[World]:
    """A database with `tools` published and a client on it; the invariants checked after."""
    engine = make_engine(url)
    upkeep = Upkeep(engine)
    asyncio.run(_publish(upkeep, tools))
    rung: list[uuid.UUID] = []
    client = ChatClient(load_settings(database_url=url), engine=engine, enqueue=rung.append)
    yield World(engine, TurnStore(engine), upkeep, client, tools, rung)
    if url.startswith("postgresql"):  # (the checker reads PostgreSQL)
        assert violations(url, at_rest=True) == []
    engine.dispose()


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


def model(*replies: Any) -> fakes.ScriptedModel:
    return fakes.ScriptedModel(fakes.by_iteration(list(replies)))


def event_types(world: World, conversation_id: uuid.UUID) -> list[str]:
    return [e.type for e in world.client.events(conversation_id, limit=1000).events]


# --- clarification --------------------------------------------------------------------------------


def test_the_model_s_question_pauses_the_turn_and_the_next_message_answers_it(
    world: World,
) -> None:
    question = {"question": "Which report: Q2 or Q3?", "reason": "there are two"}
    scripted = model(
        fakes.calls(("ask", "agent_clarify", question)), fakes.text("Here is the Q3 report.")
    )
    conversation_id = world.conversation("Send me the report", tools=["add"])

    assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    turn = world.client.current_turn(conversation_id)
    assert turn is not None and turn.status == "requires_action"
    ((action,),) = [turn.actions]
    assert (action.call_id, action.kind, action.name) == ("ask", "clarification", "agent_clarify")
    assert action.arguments == question and action.answered is False
    row = world.row(conversation_id)
    assert (row.status, row.lease_owner, row.lease_expires_at) == ("idle", None, None)
    assert event_types(world, conversation_id)[-2:] == ["action.required", "status.changed"]
    assert world.tools.executed == []  # never run anywhere

    rung = len(world.rung)
    submitted = world.client.submit_message(conversation_id, "The Q3 one")
    assert submitted.turn_id == turn.id and submitted.turn_status == "running"
    assert len(world.rung) == rung + 1  # a worker is rung to go on
    assert world.roles(conversation_id) == ["user", "assistant", "tool"]  # no new user message

    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE
    view = world.client.get_conversation(conversation_id)
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "assistant"]
    assert (view.messages[2].tool_call_id, view.messages[2].content) == ("ask", "The Q3 one")
    assert view.messages[-1].content == "Here is the Q3 report."
    second = scripted.requests[1].messages
    assert second[-1] == {"role": "tool", "tool_call_id": "ask", "content": "The Q3 one"}
    finished = world.client.get_turn(turn.id)
    assert finished.status == "completed" and finished.pending_actions == ()
    assert "turn.resumed" in event_types(world, conversation_id)


def test_clarification_can_be_turned_off_per_conversation(world: World) -> None:
    scripted = model(fakes.text("2"))
    conversation_id = world.conversation(tools=["add"], clarify=False)
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE
    offered = [t["function"]["name"] for t in scripted.requests[0].tools]
    assert offered == ["add"]


def test_clarification_can_be_turned_off_for_every_conversation_by_a_setting(
    world: World,
) -> None:
    scripted = model(fakes.text("2"))
    conversation_id = world.conversation(tools=["add"])  # the conversation allows it
    settings = CONFIG.model_copy(update={"clarify": False})
    assert run(world.runner(scripted, settings=settings), conversation_id) is Outcome.IDLE
    offered = [t["function"]["name"] for t in scripted.requests[0].tools]
    assert "agent_clarify" not in offered and "add" in offered


def test_a_conversation_without_tools_keeps_the_one_call_path(world: World) -> None:
    scripted = model(fakes.text("Hi"))
    conversation_id = world.conversation("Hello", tools=[])
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE
    assert scripted.requests[0].tools in (None, [])


# --- client-executed tools ------------------------------------------------------------------------


def test_server_calls_run_at_once_and_client_calls_wait_for_their_outputs(world: World) -> None:
    scripted = model(
        fakes.calls(
            ("c_loc", "get_location", {"precision": "city"}),
            ("c_add", "add", {"a": 1, "b": 2}),
        ),
        fakes.text("You are in Paris, and 1 + 2 = 3."),
    )
    conversation_id = world.conversation(
        "Where am I, and what is 1 + 2?", tools=["add"], client_tools=[LOCATE]
    )
    assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    offered = {t["function"]["name"] for t in scripted.requests[0].tools}
    assert offered == {
        "add",
        "get_location",
        "agent_clarify",
    }
    assert world.tools.executed == [("add", {"a": 1, "b": 2})]  # the server's call ran
    turn = world.client.current_turn(conversation_id)
    assert turn is not None and [a.call_id for a in turn.pending_actions] == ["c_loc"]
    assert turn.actions[0].kind == "client_tool" and turn.actions[0].arguments == {
        "precision": "city"
    }

    answered = world.client.answer_actions(turn.id, {"c_loc": "Paris"})
    assert answered.status == "running" and answered.pending_actions == ()
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE
    results = {
        m.tool_call_id: m.content
        for m in world.client.get_conversation(conversation_id).messages
        if m.role == "tool"
    }
    assert results == {"c_loc": "Paris", "c_add": "3"}
    # The same answer again (a retried request) is harmless: nothing is written.
    seq = world.row(conversation_id).event_seq
    assert world.client.answer_actions(turn.id, {"c_loc": "Paris"}).status == "completed"
    assert world.row(conversation_id).event_seq == seq


def test_a_client_call_with_arguments_its_schema_refuses_is_answered_by_the_worker(
    world: World,
) -> None:
    scripted = model(
        fakes.calls(("c_loc", "get_location", {"precision": "street"})), fakes.text("Sorry.")
    )
    conversation_id = world.conversation("Where am I?", tools=[], client_tools=[LOCATE])
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE  # it never waited
    result = world.client.get_conversation(conversation_id).messages[2]
    assert result.is_error and "'street' is not one of ['city', 'country']" in (
        result.content or ""
    )


def test_answers_come_one_by_one_and_the_last_one_resumes_the_turn(world: World) -> None:
    scripted = model(
        fakes.calls(
            ("c1", "get_location", {"precision": "city"}),
            ("c2", "get_location", {"precision": "country"}),
        ),
        fakes.text("Paris, France."),
    )
    conversation_id = world.conversation("Where?", tools=[], client_tools=[LOCATE])
    assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    turn_id = world.client.current_turn(conversation_id).id  # type: ignore[union-attr]
    rung = len(world.rung)
    first = world.client.answer_actions(turn_id, {"c2": "France"})
    assert first.status == "requires_action" and [a.call_id for a in first.pending_actions] == [
        "c1"
    ]
    assert len(world.rung) == rung  # not yet
    assert world.client.answer_actions(turn_id, {"c1": "Paris"}).status == "running"
    assert len(world.rung) == rung + 1
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE


def test_a_message_while_a_client_tool_waits_is_refused_queued_or_interrupts(
    world: World,
) -> None:
    scripted = model(
        fakes.calls(("c_loc", "get_location", {"precision": "city"})), fakes.text("Done.")
    )
    conversation_id = world.conversation("Where am I?", tools=[], client_tools=[LOCATE])
    assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    waiting = world.client.current_turn(conversation_id)
    assert waiting is not None
    with pytest.raises(ConversationBusy, match="waits for its client's tool outputs") as refused:
        world.client.submit_message(conversation_id, "hello?")
    assert refused.value.turn_id == waiting.id
    queued = world.client.submit_message(conversation_id, "And then?", on_busy="enqueue")
    assert queued.turn_status == "queued" and queued.seq is None  # behind the waiting turn
    world.client.answer_actions(waiting.id, {"c_loc": "Paris"})
    # (turn 1 at its second model call, turn 2 at its first: both answer)
    assert run(world.runner(model(fakes.text("Done."), fakes.text("Done."))), conversation_id) is (
        Outcome.IDLE
    )
    assert world.client.get_turn(waiting.id).status == "completed"
    assert world.client.get_turn(queued.turn_id).status == "completed"  # type: ignore[arg-type]


def test_cancel_while_waiting_ends_the_turn_and_answers_its_calls_cancelled(
    world: World,
) -> None:
    scripted = model(fakes.calls(("c_loc", "get_location", {"precision": "city"})))
    conversation_id = world.conversation("Where am I?", tools=[], client_tools=[LOCATE])
    assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    turn = world.client.current_turn(conversation_id)
    assert turn is not None
    cancelled = world.client.cancel(conversation_id)
    assert cancelled is not None and cancelled.status == "cancelled"
    result = world.client.get_conversation(conversation_id).messages[-1]
    assert (result.tool_call_id, result.content) == ("c_loc", CANCELLED_CALL_RESULT)
    assert world.row(conversation_id).status == "idle"
    # An output that comes too late is refused, and writes nothing.
    seq = world.row(conversation_id).event_seq
    with pytest.raises(ActionAlreadyAnswered):
        world.client.answer_actions(turn.id, {"c_loc": "Paris"})
    assert world.row(conversation_id).event_seq == seq
    # The conversation takes new messages as usual.
    assert world.client.submit_message(conversation_id, "Hi again").turn_status == "queued"
    world.client.cancel(conversation_id)  # (no worker here: leave it at rest)


# --- bad answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outputs", "error", "says"),
    [
        ({"nope": "x"}, ActionNotFound, "waits for no call 'nope'; it waits for c_loc"),
        ({"c_loc": "Paris", "nope": "x"}, ActionNotFound, "nope"),  # all or nothing
        ({}, InvalidRequest, "non-empty mapping"),
        ({"c_loc": 42}, InvalidRequest, "must be a string"),
        ({"c_loc": "a\x00b"}, InvalidRequest, "NUL"),
        ({"": "x"}, InvalidRequest, "call id"),
    ],
)
def test_a_bad_answer_is_refused_and_writes_nothing(
    world: World, outputs: Any, error: type[Exception], says: str
) -> None:
    scripted = model(fakes.calls(("c_loc", "get_location", {"precision": "city"})))
    conversation_id = world.conversation("Where am I?", tools=[], client_tools=[LOCATE])
    assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    turn = world.client.current_turn(conversation_id)
    assert turn is not None
    seq = world.row(conversation_id).event_seq
    with pytest.raises(error, match=says):
        world.client.answer_actions(turn.id, outputs)
    assert world.row(conversation_id).event_seq == seq
    assert world.client.get_turn(turn.id).status == "requires_action"
    with pytest.raises(ActionAlreadyAnswered):
        world.client.answer_actions(turn.id, {"c_loc": "Paris"})  # (answered, then otherwise)
        world.client.answer_actions(turn.id, {"c_loc": "London"})
    world.client.cancel(conversation_id)


def test_an_answer_for_another_owner_s_turn_or_an_unknown_turn_is_not_found(world: World) -> None:
    conversation_id = world.client.create_conversation(owner="alice")
    with pytest.raises(TurnNotFound):
        world.client.answer_actions(uuid.uuid4(), {"c": "x"})
    world.client.submit_message(conversation_id, "hi")
    turn = world.client.current_turn(conversation_id)
    assert turn is not None
    with pytest.raises(TurnNotFound):
        world.client.answer_actions(turn.id, {"c": "x"}, owner="bob")
    with pytest.raises(ActionNotFound, match="waits for no call 'c'"):
        world.client.answer_actions(turn.id, {"c": "x"}, owner="alice")  # it never waited
    world.client.cancel(conversation_id)


@pytest.mark.parametrize(
    ("client_tools", "says"),
    [
        ("get_location", "must be a list"),
        ([{"name": "bad name"}], r"client_tools\[0\].name"),
        ([{"name": "agent_clarify"}], "built-in"),
        ([{"name": "add"}], "also in tools"),
        ([LOCATE, LOCATE], "used twice"),
        ([{**LOCATE, "extra": 1}], "unknown field"),
        ([{**LOCATE, "parameters": {"type": "string"}}], "JSON Schema of an object"),
        ([{**LOCATE, "parameters": {"type": "object", "properties": {"a": {"type": 5}}}}], "valid"),
        ([{**LOCATE, "description": 7}], "description"),
    ],
)
def test_bad_client_tools_are_refused_at_creation(
    world: World, client_tools: Any, says: str
) -> None:
    with pytest.raises(InvalidRequest, match=says):
        world.client.create_conversation(tools=["add"], client_tools=client_tools)


def test_a_turn_left_waiting_is_a_resting_state_the_recovery_sweep_leaves_alone(
    world: World,
) -> None:
    scripted = model(fakes.calls(("ask", "agent_clarify", {"question": "Which one?"})))
    conversation_id = world.conversation("Pick one", tools=["add"])
    assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    # Nothing to claim: no worker may run a turn that waits for the user.
    assert run(world.runner(scripted), conversation_id) is Outcome.NOT_CLAIMED
    assert len(scripted.requests) == 1
    # (the fixture checks the invariants with the turn still waiting)


# --- approvals ------------------------------------------------------------------------------------


@pytest.fixture
def guarded(any_database_url: str) -> Iterator[World]:
    """Tools of which `write_note` needs the user's approval for every call."""
    notes: list[str] = []
    tools = fakes.InMemoryTools(
        {"add": lambda a, b: str(a + b), "write_note": lambda text: notes.append(text) or "saved"},
        annotations={"write_note": {"destructiveHint": True}},
        approval=["write_note"],
    )
    yield from world_of(any_database_url, tools)


def note_then_answer() -> fakes.ScriptedModel:
    return model(
        fakes.calls(("c_add", "add", {"a": 1, "b": 2}), ("c_note", "write_note", {"text": "hi"})),
        fakes.text("Done."),
    )


def test_a_call_that_needs_approval_waits_and_runs_once_approved(guarded: World) -> None:
    scripted = note_then_answer()
    conversation_id = guarded.conversation("Note it", tools=["add", "write_note"])
    assert run(guarded.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    assert guarded.tools.executed == [("add", {"a": 1, "b": 2})]  # the other call ran
    turn = guarded.client.current_turn(conversation_id)
    assert turn is not None
    ((action,),) = [turn.pending_actions]
    assert (action.call_id, action.kind, action.arguments) == ("c_note", "approval", {"text": "hi"})

    approved = guarded.client.answer_actions(turn.id, approvals={"c_note": True})
    assert approved.status == "running" and approved.actions[0].decision == "approved"
    assert guarded.client.answer_actions(turn.id, approvals={"c_note": True}).status == "running"
    with pytest.raises(ActionAlreadyAnswered):
        guarded.client.answer_actions(turn.id, approvals={"c_note": False})
    assert run(guarded.runner(scripted), conversation_id) is Outcome.IDLE
    assert guarded.tools.executed[-1] == ("write_note", {"text": "hi"})  # ran once approved
    assert [name for name, _ in guarded.tools.executed].count("write_note") == 1


def test_a_conversation_s_approval_tools_ask_before_a_tool_its_server_runs_freely(
    guarded: World,
) -> None:
    scripted = note_then_answer()
    conversation_id = guarded.conversation(
        "Note it", tools=["add", "write_note"], approval_tools=["add"]
    )
    assert guarded.client.get_conversation(conversation_id).approval_tools == ["add"]
    assert run(guarded.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    assert guarded.tools.executed == []  # add asks too, now
    turn = guarded.client.current_turn(conversation_id)
    assert turn is not None
    assert [(a.call_id, a.kind) for a in turn.pending_actions] == [
        ("c_add", "approval"),
        ("c_note", "approval"),
    ]
    guarded.client.answer_actions(turn.id, approvals={"c_add": True, "c_note": True})
    assert run(guarded.runner(scripted), conversation_id) is Outcome.IDLE
    assert [name for name, _ in guarded.tools.executed] == ["add", "write_note"]


@pytest.mark.parametrize(
    ("approval_tools", "says"),
    [(["nope"], "not one of the conversation's tools"), ("add", "list of tool names")],
)
def test_bad_approval_tools_are_refused_at_creation(
    world: World, approval_tools: Any, says: str
) -> None:
    with pytest.raises(InvalidRequest, match=says):
        world.client.create_conversation(tools=["add"], approval_tools=approval_tools)


def test_a_denied_call_never_runs_and_the_model_is_told_why(guarded: World) -> None:
    scripted = note_then_answer()
    conversation_id = guarded.conversation("Note it", tools=["add", "write_note"])
    assert run(guarded.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    turn = guarded.client.current_turn(conversation_id)
    assert turn is not None
    denied = guarded.client.answer_actions(
        turn.id, approvals={"c_note": Decision(False, "not today")}
    )
    assert denied.status == "running" and denied.actions[0].decision == "denied"
    assert run(guarded.runner(scripted), conversation_id) is Outcome.IDLE
    assert "write_note" not in [name for name, _ in guarded.tools.executed]
    result = next(
        m
        for m in guarded.client.get_conversation(conversation_id).messages
        if m.tool_call_id == "c_note"
    )
    assert result.is_error
    assert result.content == "Denied by the user: this call was not run. The user said: not today"
    # Denying twice is harmless; changing one's mind is refused.
    assert guarded.client.answer_actions(turn.id, approvals={"c_note": False}).status == "completed"
    with pytest.raises(ActionAlreadyAnswered):
        guarded.client.answer_actions(turn.id, approvals={"c_note": True})


@pytest.mark.parametrize(
    ("outputs", "approvals", "says"),
    [
        ({"c_note": "yes"}, None, "waits for approval"),
        (None, {"c_note": "yes"}, "must be true or false"),
        ({"c_note": "x"}, {"c_note": True}, "an output and a decision"),
        (None, {}, "non-empty mapping"),
    ],
)
def test_a_bad_approval_is_refused_and_writes_nothing(
    guarded: World, outputs: Any, approvals: Any, says: str
) -> None:
    conversation_id = guarded.conversation("Note it", tools=["add", "write_note"])
    assert run(guarded.runner(note_then_answer()), conversation_id) is Outcome.REQUIRES_ACTION
    turn = guarded.client.current_turn(conversation_id)
    assert turn is not None
    seq = guarded.row(conversation_id).event_seq
    with pytest.raises(InvalidRequest, match=says):
        guarded.client.answer_actions(turn.id, outputs, approvals=approvals)
    assert guarded.row(conversation_id).event_seq == seq
    guarded.client.cancel(conversation_id)


def test_a_turn_that_waits_twice_keeps_its_first_question_on_record(world: World) -> None:
    scripted = model(
        fakes.calls(("ask", "agent_clarify", {"question": "Which city?"})),
        fakes.calls(("c_loc", "get_location", {"precision": "country"})),
        fakes.text("Paris, France."),
    )
    conversation_id = world.conversation("Where?", tools=[], client_tools=[LOCATE])
    assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    turn = world.client.current_turn(conversation_id)
    assert turn is not None
    world.client.submit_message(conversation_id, "Paris")
    assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
    again = world.client.get_turn(turn.id)
    assert [(a.call_id, a.answered) for a in again.actions] == [("ask", True), ("c_loc", False)]
    world.client.answer_actions(turn.id, {"c_loc": "France"})
    assert run(world.runner(scripted), conversation_id) is Outcome.IDLE
    assert [a.call_id for a in world.client.get_turn(turn.id).actions] == ["ask", "c_loc"]


# --- a turn's record ------------------------------------------------------------------------------


def test_a_turn_s_record_is_of_one_moment_though_the_turn_pauses_while_it_is_read(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The AI SDK's and the Responses' streams tell from a turn's record whether its last
    `action.required` is the pause it waits in (the stream ends there) or one answered before
    (history, gone through): the turn's status and its events must be of one moment. Read in
    two snapshots, a pause committed between them gave a running turn with the pause among its
    events, and a stream that went past the pause and waited for an end that never came."""
    scripted = model(fakes.calls(("c_loc", "get_location", {"precision": "city"})))
    conversation_id = world.conversation("Where am I?", tools=[], client_tools=[LOCATE])
    before = world.client.current_turn(conversation_id)
    assert before is not None and before.status != "requires_action"
    read_turn = reads.read_turn

    def paused_meanwhile(connection: Any, turn_id: uuid.UUID) -> Any:
        view = read_turn(connection, turn_id)
        assert run(world.runner(scripted), conversation_id) is Outcome.REQUIRES_ACTION
        return view

    monkeypatch.setattr(reads, "read_turn", paused_meanwhile)
    record = world.client.turn_record(before.id)
    monkeypatch.undo()
    paused = [event.seq for event in record.events if event.type == "action.required"]
    assert (record.turn.status, paused) == (before.status, [])  # all of it before the pause
    after = world.client.turn_record(before.id)
    paused = [event.seq for event in after.events if event.type == "action.required"]
    assert after.turn.status == "requires_action" and len(paused) == 1
