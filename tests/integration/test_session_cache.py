"""The session tool cache: every MCP call's whole output kept outside the prompt (`tool_outputs`),
a compact version in the model's context, and the built-in `session_cache_list` and
`session_cache_get` that page through it, on this turn or a later one; on a real database
(PostgreSQL and SQLite) with in-process model and tools.

What each bad call of the cache tools gets (an error result the model reads; nothing written to
the cache; the turn goes on):

| call                                                  | result                                   |
|-------------------------------------------------------|------------------------------------------|
| session_cache_get with an id nothing was kept for     | "no output is kept under id '...'"       |
| session_cache_get with an offset past the end         | "offset N is past the end of output ..." |
| session_cache_get with a limit above the context cap  | the schema's refusal, naming `limit`     |
| session_cache_get without an id                       | the schema's refusal, naming `id`        |
| session_cache_list with an argument it does not take  | the schema's refusal                     |
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select, update

from app.models import ToolOutput
from app.testing import fakes
from app.worker.lease_runner import Outcome
from app.worker.plan import ToolCall
from app.worker.store import KeptOutput, LeaseLost
from tests.integration.test_loop import CONFIG, World, run
from tests.integration.test_user_in_the_loop import world_of
from tests.invariants import violations

CAP = 1_000  # what the model's context holds of one output, in these tests
SETTINGS = CONFIG.model_copy(update={"tool_context_chars": CAP})
REPORT = "".join(f"line {n:05d}: revenue {n * 7 % 1000}\n" for n in range(2_000))  # 50,000 chars


def tools() -> fakes.InMemoryTools:
    return fakes.InMemoryTools(
        {
            "report": lambda quarter="Q3": f"{quarter}\n{REPORT}",
            "add": lambda a, b: str(a + b),
            "explode": lambda: 1 / 0,
        },
        annotations={"report": {"readOnlyHint": True}},
    )


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, tools())


def model(*replies: Any) -> fakes.ScriptedModel:
    return fakes.ScriptedModel(fakes.by_iteration(list(replies)))


def kept(world: World, conversation_id: uuid.UUID) -> list[ToolOutput]:
    from sqlalchemy.orm import Session

    with Session(world.engine) as session:
        query = select(ToolOutput).where(ToolOutput.conversation_id == conversation_id)
        return list(session.scalars(query.order_by(ToolOutput.seq)))


def tool_messages(world: World, conversation_id: uuid.UUID) -> list[Any]:
    messages = world.client.get_conversation(conversation_id).messages
    return [m for m in messages if m.role == "tool"]


def conversation(world: World, text: str = "How did Q3 go?") -> uuid.UUID:
    return world.conversation(text, tools=["report", "add", "explode"])


# --- the compact version in context, the whole kept ---------------------------------------------


def test_a_long_output_is_kept_whole_and_the_model_reads_a_compact_version(world: World) -> None:
    scripted = model(fakes.calls(("c_rep", "report", {"quarter": "Q3"})), fakes.text("Fine."))
    conversation_id = conversation(world)
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE

    whole = f"Q3\n{REPORT}"
    (message,) = tool_messages(world, conversation_id)
    marker = (
        f"\n[... 1,000 of {len(whole):,} characters shown. The whole output is kept: call "
        'session_cache_get with {"id": "c_rep", "offset": 1000} to read on.]'
    )
    assert message.content == whole[:CAP] + marker
    assert scripted.requests[1].messages[-1]["content"] == message.content  # what the model read
    (row,) = kept(world, conversation_id)
    assert (row.call_id, row.tool, row.arguments) == ("c_rep", "report", {"quarter": "Q3"})
    assert (row.content, row.chars, row.is_error, row.seq) == (whole, len(whole), False, 3)
    turn = world.client.current_turn(conversation_id)
    assert turn is not None and row.turn_id == turn.id


def test_a_short_output_is_kept_too_and_read_whole(world: World) -> None:
    scripted = model(fakes.calls(("c_add", "add", {"a": 1, "b": 2})), fakes.text("3"))
    conversation_id = conversation(world, "1 + 2?")
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE
    (message,) = tool_messages(world, conversation_id)
    (row,) = kept(world, conversation_id)
    assert message.content == row.content == "3"


def test_a_failed_call_s_output_is_kept_with_its_error_flag(world: World) -> None:
    scripted = model(fakes.calls(("c_x", "explode", {})), fakes.text("It failed."))
    conversation_id = conversation(world, "Explode")
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE
    (row,) = kept(world, conversation_id)
    assert row.is_error and "division by zero" in row.content


def test_only_the_calls_a_tool_ran_for_are_kept(world: World) -> None:
    scripted = model(
        fakes.calls(
            ("c_unknown", "no_such_tool", {}),  # refused: the model's mistake, never run
            ("c_bad", "add", "not json"),  # refused before running
            ("c_ok", "add", {"a": 2, "b": 2}),
        ),
        fakes.text("4"),
    )
    conversation_id = conversation(world, "2 + 2?")
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE
    assert [m.tool_call_id for m in tool_messages(world, conversation_id)] == [
        "c_unknown",
        "c_bad",
        "c_ok",
    ]
    assert [row.call_id for row in kept(world, conversation_id)] == ["c_ok"]


# --- paging through it ----------------------------------------------------------------------------


def test_the_model_pages_through_a_kept_output_instead_of_calling_the_tool_again(
    world: World,
) -> None:
    whole = f"Q3\n{REPORT}"
    scripted = model(
        fakes.calls(("c_rep", "report", {"quarter": "Q3"})),
        fakes.calls(("c_get", "session_cache_get", {"id": "c_rep", "offset": 1000})),
        fakes.calls(("c_last", "session_cache_get", {"id": "c_rep", "offset": len(whole) - 10})),
        fakes.calls(("c_list", "session_cache_list", {})),
        fakes.text("Done."),
    )
    conversation_id = conversation(world)
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE
    assert world.tools.executed == [("report", {"quarter": "Q3"})]  # the tool ran once

    _, page, last, listing = (m.content for m in tool_messages(world, conversation_id))
    assert page == (
        f"[output of report, id c_rep: characters 1,000-2,000 of {len(whole):,}]\n"
        f"{whole[1000:2000]}\n"
        f"[... {len(whole) - 2000:,} characters follow: call session_cache_get with "
        '{"id": "c_rep", "offset": 2000}]'
    )
    end = f"{len(whole):,}"
    assert last == (
        f"[output of report, id c_rep: characters {len(whole) - 10:,}-{end} of {end}]\n"
        f"{whole[-10:]}\n[end of output]"
    )
    listed = json.loads(listing)
    assert listed["outputs"] == [
        {
            "id": "c_rep",
            "tool": "report",
            "arguments": {"quarter": "Q3"},
            "characters": len(whole),
            "turn": 1,
        }
    ]
    assert [row.call_id for row in kept(world, conversation_id)] == ["c_rep"]  # reads keep nothing


def test_a_page_is_no_longer_than_asked(world: World) -> None:
    scripted = model(
        fakes.calls(("c_rep", "report", {})),
        fakes.calls(("c_get", "session_cache_get", {"id": "c_rep", "offset": 3, "limit": 5})),
        fakes.text("ok"),
    )
    conversation_id = conversation(world)
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE
    page = tool_messages(world, conversation_id)[1].content
    assert page.splitlines()[1] == REPORT[:5]  # "Q3\n" is characters 0-2
    assert page.startswith("[output of report, id c_rep: characters 3-8 of ")


def test_outputs_are_shared_across_the_turns_of_a_conversation(world: World) -> None:
    first = model(fakes.calls(("c_rep", "report", {"quarter": "Q3"})), fakes.text("Fine."))
    conversation_id = conversation(world)
    assert run(world.runner(first, settings=SETTINGS), conversation_id) is Outcome.IDLE

    world.client.submit_message(conversation_id, "And the numbers at line 1500?")
    second = model(
        fakes.calls(("c_list", "session_cache_list", {"tool": "report"})),
        fakes.calls(("c_get", "session_cache_get", {"id": "c_rep", "offset": 40_000})),
        fakes.text("Revenue 500."),
    )
    assert run(world.runner(second, settings=SETTINGS), conversation_id) is Outcome.IDLE
    assert world.tools.executed == [("report", {"quarter": "Q3"})]  # not called again
    listing, page = (m.content for m in tool_messages(world, conversation_id)[1:])
    assert [entry["turn"] for entry in json.loads(listing)["outputs"]] == [1]
    assert f"{REPORT[40_000 - 3 : 41_000 - 3]}" in page


def test_the_list_shows_the_latest_outputs_and_how_many_are_older(world: World) -> None:
    # (the report's output is cut short: the readers are offered from the next call on)
    calls = [("c_rep", "report", {}), *((f"c{n}", "add", {"a": n, "b": 0}) for n in range(55))]
    scripted = model(
        fakes.calls(*calls),
        fakes.calls(("c_list", "session_cache_list", {})),
        fakes.calls(("c_list2", "session_cache_list", {"tool": "add2"})),
        fakes.text("ok"),
    )
    conversation_id = conversation(world, "Count")
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE
    listing, empty = (json.loads(m.content) for m in tool_messages(world, conversation_id)[-2:])
    assert [e["id"] for e in listing["outputs"]] == [f"c{n}" for n in range(5, 55)]
    assert listing["older_not_listed"] == 6
    assert empty["outputs"] == [] and "No tool output of add2" in empty["note"]


# --- bad calls of the cache tools ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"id": "c_nothing"}, "no output is kept under id 'c_nothing'"),
        ({"id": "c_rep", "offset": 10**6}, "offset 1000000 is past the end of output 'c_rep'"),
        ({"id": "c_rep", "limit": CAP + 1}, "limit"),
        ({"offset": 5}, "'id' is a required property"),
    ],
    ids=["unknown id", "offset past the end", "limit above the cap", "no id"],
)
def test_a_bad_cache_read_is_an_error_result_the_model_reads(
    world: World, arguments: dict[str, Any], expected: str
) -> None:
    scripted = model(
        fakes.calls(("c_rep", "report", {})),
        fakes.calls(("c_get", "session_cache_get", arguments)),
        fakes.text("ok"),
    )
    conversation_id = conversation(world)
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE
    result = tool_messages(world, conversation_id)[1]
    assert result.is_error and expected in (result.content or ""), result.content
    assert [row.call_id for row in kept(world, conversation_id)] == ["c_rep"]


def test_the_list_refuses_an_argument_it_does_not_take(world: World) -> None:
    scripted = model(
        fakes.calls(("c_rep", "report", {})),
        fakes.calls(("c_list", "session_cache_list", {"all": True})),
        fakes.text("k"),
    )
    conversation_id = conversation(world)
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE
    result = tool_messages(world, conversation_id)[1]
    assert result.is_error and "'all' was unexpected" in (result.content or ""), result.content


def test_the_readers_are_offered_once_what_is_sent_refers_to_the_cache(world: World) -> None:
    """Before an output is cut short (or elided, or summarised) they could serve nothing: not
    offered, so no request pays for their definitions; from the next call on, they are."""
    scripted = model(
        fakes.calls(("c_add", "add", {"a": 1, "b": 2})),
        fakes.calls(("c_rep", "report", {})),
        fakes.text("Fine."),
    )
    conversation_id = conversation(world)
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE
    readers = {"session_cache_list", "session_cache_get"}
    offered = [{t["function"]["name"] for t in r.tools} for r in scripted.requests]
    assert [bool(readers & names) for names in offered] == [False, False, True]
    # A later turn of the conversation offers them from its first call (the cut output is in it).
    again = model(fakes.text("Still fine."))
    world.client.submit_message(conversation_id, "And now?")
    assert run(world.runner(again, settings=SETTINGS), conversation_id) is Outcome.IDLE
    assert readers <= {t["function"]["name"] for t in again.requests[0].tools}


# --- its lifetime and its switch ----------------------------------------------------------------


def test_kept_outputs_go_with_their_conversation(world: World) -> None:
    scripted = model(fakes.calls(("c_rep", "report", {})), fakes.text("Fine."))
    conversation_id = conversation(world)
    other = conversation(world)
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE
    again = model(fakes.calls(("c_rep", "report", {})), fakes.text("Fine."))
    assert run(world.runner(again, settings=SETTINGS), other) is Outcome.IDLE
    assert len(kept(world, conversation_id)) == len(kept(world, other)) == 1

    world.client.delete_conversation(conversation_id)
    assert kept(world, conversation_id) == []
    assert len(kept(world, other)) == 1  # the other conversation's stay
    with world.engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(ToolOutput)) == 1


def test_with_the_cache_off_long_outputs_are_cut_and_nothing_is_kept(world: World) -> None:
    scripted = model(fakes.calls(("c_rep", "report", {})), fakes.text("Fine."))
    conversation_id = conversation(world)
    settings = SETTINGS.model_copy(update={"session_cache": False})
    assert run(world.runner(scripted, settings=settings), conversation_id) is Outcome.IDLE
    whole = f"Q3\n{REPORT}"
    (message,) = tool_messages(world, conversation_id)
    cut = f"\n[... output truncated: {CAP} of {len(whole)} characters shown]"
    assert message.content == whole[:CAP] + cut
    assert kept(world, conversation_id) == []
    offered = {t["function"]["name"] for t in scripted.requests[0].tools}
    assert not offered & {"session_cache_list", "session_cache_get"}


def test_the_cache_tools_come_only_with_tools_a_server_runs(world: World) -> None:
    no_tools = model(fakes.text("Hi"))
    conversation_id = world.conversation("Hello", tools=[])
    assert run(world.runner(no_tools, settings=SETTINGS), conversation_id) is Outcome.IDLE
    assert no_tools.requests[0].tools in (None, [])

    client_only = model(fakes.text("Hi"))
    locate = {"name": "get_location", "parameters": {"type": "object", "properties": {}}}
    conversation_id = world.conversation("Hello", tools=[], client_tools=[locate])
    assert run(world.runner(client_only, settings=SETTINGS), conversation_id) is Outcome.IDLE
    offered = {t["function"]["name"] for t in client_only.requests[0].tools}
    assert offered == {"get_location", "agent_clarify"}


# --- one statement: the output and its message, or neither ---------------------------------------


def test_a_worker_that_lost_its_lease_keeps_nothing(world: World) -> None:
    conversation_id = conversation(world)
    stale = world.store.claim(conversation_id, "worker-1", -1)  # its lease expired at once
    assert stale is not None
    holder = world.store.claim(conversation_id, "worker-2", 30)  # taken over
    assert holder is not None
    with pytest.raises(LeaseLost):
        world.store.record_tool_result(
            stale.claim,
            status="processing",
            seq=2,
            parent=1,
            call=ToolCall("c_rep", "report", "{}"),
            content="short",
            is_error=False,
            ttl=30,
            kept=KeptOutput({}, "the whole"),
        )
    assert kept(world, conversation_id) == [] and world.roles(conversation_id) == ["user"]
    world.store.fail(holder.claim, "the test is over", status="processing")


@pytest.fixture
def pg_world(database_url: str) -> Iterator[World]:
    """PostgreSQL only: the invariant checker reads it."""
    yield from world_of(database_url, tools())


def test_the_invariants_catch_a_kept_output_that_disagrees_with_its_message(
    pg_world: World,
) -> None:
    world = pg_world
    scripted = model(fakes.calls(("c_rep", "report", {})), fakes.text("Fine."))
    conversation_id = conversation(world)
    assert run(world.runner(scripted, settings=SETTINGS), conversation_id) is Outcome.IDLE
    url = world.engine.url.render_as_string(hide_password=False)
    assert violations(url) == []
    where = (ToolOutput.conversation_id == conversation_id) & (ToolOutput.call_id == "c_rep")
    for change, why in [
        ({"content": "something else"}, "a wrong length"),
        ({"content": "something else", "chars": 14}, "another text"),
        ({"is_error": True}, "another error flag"),
        ({"tool": "add"}, "another tool"),
    ]:
        with world.engine.begin() as connection:
            before = connection.execute(select(ToolOutput.__table__).where(where)).one()._asdict()
            connection.execute(update(ToolOutput).where(where).values(**change))
        assert violations(url) == [
            f"conversation {conversation_id}: kept output of c_rep has {why}"
        ]
        with world.engine.begin() as connection:
            connection.execute(update(ToolOutput).where(where).values(**before))
