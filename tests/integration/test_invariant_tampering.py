"""The invariant checker, fed one violation at a time (a checker that cannot fail proves nothing).

The product leaves a clean state once per module (a completed turn with a tool call, its kept
output and a webhook's deliveries; a turn waiting for the user; a failed turn); each row of the
table breaks one invariant of that database by hand, with triggers and foreign keys off, in a
transaction the check runs in and that is then rolled back.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.migrate import upgrade
from app.testing import fakes, services
from app.worker import summary
from app.worker.lease_runner import Outcome
from app.worker.ports import ModelError, ModelReply, ModelRequest
from app.worker.store import TurnStore, Upkeep
from tests.conftest import copy_rows
from tests.integration.test_loop import ADD_THEN_ANSWER, World, _publish, make_tools, run
from tests.invariants import (
    MCP_SERVER_MARK,
    orphaned_mcp_servers,
    violations,
    violations_after_test,
    violations_seen_by,
)

pytestmark = pytest.mark.xdist_group("invariant-tampering")  # one baseline, built once


@dataclass(frozen=True)
class Baseline:
    server: str
    template: str
    ids: dict[str, uuid.UUID]  # done, waiting, failed


@pytest.fixture(scope="module")
def baseline(postgres_server: str, migrated_template: str) -> Iterator[Baseline]:
    name = services.unique_name("template")
    url = services.create_database(postgres_server, name, template=migrated_template)
    try:
        yield Baseline(postgres_server, name, populate(url))
    finally:
        services.drop_database(postgres_server, name)


def populate(url: str) -> dict[str, uuid.UUID]:
    """Three conversations as the product leaves them, and a webhook that heard of the first."""
    engine = make_engine(url)
    tools = make_tools()
    upkeep = Upkeep(engine)
    asyncio.run(_publish(upkeep, tools))
    client = ChatClient(load_settings(database_url=url), engine=engine, enqueue=lambda _: None)
    world = World(engine, TurnStore(engine), upkeep, client, tools)
    try:
        done = world.conversation("What is 1 + 2?", tools=["add"])
        tamper(
            url,
            "INSERT INTO webhooks (id, conversation_id, url, secret, event_types, created_at)"
            " VALUES (gen_random_uuid(), %(done)s, 'https://example.invalid/hook', 'whsec_x',"
            " ' turn.completed turn.failed ', now() - interval '1 hour')",
            {"done": done},
            replica=False,  # (the row is legitimate: the outbox trigger must see it)
        )
        assert run(world.runner(fakes.ScriptedModel(ADD_THEN_ANSWER)), done) is Outcome.IDLE
        waiting = world.conversation("Send me the report", tools=["add"])
        ask = fakes.calls(("ask", "agent_clarify", {"question": "Q2 or Q3?", "reason": "two"}))
        assert (
            run(world.runner(fakes.ScriptedModel(lambda _: ask)), waiting)
            is Outcome.REQUIRES_ACTION
        )
        failed = world.conversation("Hello", tools=[])
        error = ModelError("LLM call failed (HTTP 400 BadRequestError): bad")
        refusing = fakes.ScriptedModel(fakes.by_iteration([error]))
        assert run(world.runner(refusing), failed) is Outcome.FAILED
        compacted = compact(world)
    finally:
        client.close()
        engine.dispose()
    return {"done": done, "waiting": waiting, "failed": failed, "compacted": compacted}


def compact(world: World) -> uuid.UUID:
    """A conversation whose small window made its turns compact what they send (a summary)."""
    adding = fakes.by_iteration([fakes.calls(("c1", "add", {"a": 1, "b": 2})), fakes.text("3.")])

    def answer(request: ModelRequest) -> ModelReply:
        if summary.MARKER in str(request.messages):
            return fakes.text("They added numbers.")
        return adding(request)

    model = fakes.ScriptedModel(answer)
    conversation_id = world.conversation(
        "What is 1 + 2?", tools=["add"], context_policy={"window": 1_000}
    )
    for n in range(30):
        outcome = run(world.runner(model), conversation_id)
        assert outcome is Outcome.IDLE, world.client.get_conversation(conversation_id).error
        if len(model.requests) > 2 * (n + 1):  # one more than the turn's two: a summary
            return conversation_id
        world.client.submit_message(conversation_id, f"And {n} + {n}?")
    raise AssertionError("no summary in 30 turns")


def tamper(url: str, sql: str, ids: dict[str, uuid.UUID], replica: bool = True) -> None:
    with psycopg.connect(services.libpq_dsn(url)) as conn:
        if replica:  # no trigger, no foreign key: the checker must see what they would refuse
            conn.execute("SET session_replication_role = replica")
        for statement in sql.split(";"):
            conn.execute(statement.encode(), ids)


@pytest.fixture
def clone(baseline: Baseline) -> Iterator[str]:
    name = services.unique_name("db")
    url = services.create_database(baseline.server, name, template=baseline.template)
    yield url
    services.drop_database(baseline.server, name)


def test_the_baseline_the_product_left_has_no_violations(clone: str, baseline: Baseline) -> None:
    assert violations(clone) == []
    with psycopg.connect(services.libpq_dsn(clone)) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM tool_outputs WHERE conversation_id = %(done)s),"
            " (SELECT count(*) FROM webhook_deliveries),"
            " (SELECT count(*) FROM turns WHERE status = 'requires_action'),"
            " (SELECT count(*) > 0 FROM compactions WHERE kind = 'summary')",
            baseline.ids,
        ).fetchone()
    assert counts == (1, 1, 1, True)  # every check below has something to look at


# Appends an event to a conversation the way a writer would (the next seq, counted).
APPEND = (
    "UPDATE conversations SET event_seq = event_seq + 1 WHERE id = %(done)s;"
    " INSERT INTO events (conversation_id, seq, type, message_seq)"
    " SELECT id, event_seq, 'message.committed', {message} FROM conversations WHERE id = %(done)s"
)
LAST_STATUS_EVENT = (
    "(SELECT max(seq) FROM events WHERE conversation_id = %(done)s AND type = 'status.changed')"
)
DONE_TURN = "(SELECT id FROM turns WHERE conversation_id = %(done)s)"

# (what is broken, the SQL that breaks it, what the checker says, checked at rest)
ROWS = [
    # the transcript, in the database
    ("a call left open", "DELETE FROM messages WHERE conversation_id = %(done)s AND seq = 3",
     "tool call c1 has no result"),
    # the tree of messages
    ("an active path with a hole",
     "UPDATE messages SET active = false WHERE conversation_id = %(done)s AND seq = 2",
     "the active messages are not one path: 3 follows 2, not 1"),
    ("a message whose parent does not exist",
     "UPDATE messages SET parent_seq = 0 WHERE conversation_id = %(done)s AND seq = 3",
     "message 3 names the parent 0, not an older message"),
    ("an inactive version that answers no call",
     "INSERT INTO messages (conversation_id, seq, parent_seq, role, content, tool_call_id,"
     " tool_name, active) SELECT id, 99, 1, 'tool', 'x', 'zz', 'add', false FROM conversations"
     " WHERE id = %(done)s",
     "the version ending at 99: result at seq 99 answers no earlier call (zz)"),
    # lease, error, heartbeat
    ("a resting conversation leased",
     "UPDATE conversations SET lease_owner = 'w-9' WHERE id = %(done)s",
     "(idle): at rest but still leased to w-9"),
    ("a failed conversation without its error",
     "UPDATE conversations SET error = ' ' WHERE id = %(failed)s",
     "(failed): failed without an error"),
    ("a conversation still running",
     "UPDATE conversations SET status = 'processing' WHERE id = %(done)s",
     "(processing): still running at the end"),
    ("a lease whose heartbeat stopped a day ago",
     "UPDATE conversations SET status = 'processing', lease_owner = 'w-9',"
     " heartbeat_at = now() - interval '2 days' WHERE id = %(done)s",
     "leased without a live heartbeat"),
    # the event log
    ("a gap in the event seqs",
     "UPDATE conversations SET event_seq = event_seq + 1 WHERE id = %(done)s",
     "are not 1.."),
    ("a message committed twice", APPEND.format(message=1),
     "message 1 has 2 message.committed events"),
    ("a message never committed",
     "UPDATE events SET type = 'turn.resumed', message_seq = NULL"
     " WHERE conversation_id = %(done)s AND type = 'message.committed' AND message_seq = 4",
     "message 4 has 0 message.committed events"),
    ("a commit of a message that does not exist", APPEND.format(message=99),
     "message.committed for a missing message 99"),
    ("a finished turn with the wrong terminal event",
     "UPDATE events SET type = 'turn.cancelled'"
     " WHERE conversation_id = %(done)s AND type = 'turn.completed'",
     "(completed): terminal events ['turn.cancelled']"),
    ("the last status event disagrees",
     "UPDATE events SET status = 'failed' WHERE conversation_id = %(done)s"
     f" AND seq = {LAST_STATUS_EVENT}",
     "(idle): last status event says failed"),
    ("a resting conversation whose current turn runs",
     f"UPDATE turns SET status = 'running' WHERE id = {DONE_TURN}",
     "(idle): its current turn is running"),
    ("a queued turn nobody will run",
     "INSERT INTO turns (id, conversation_id, number, status, input)"
     " SELECT gen_random_uuid(), id, turn_number + 1, 'queued', 'and then?'"
     " FROM conversations WHERE id = %(done)s;"
     " UPDATE conversations SET turn_count = turn_count + 1 WHERE id = %(done)s",
     "turn 2 still waits, forgotten"),
    # the turn that waits for the user
    ("a waiting turn whose conversation is leased",
     "UPDATE conversations SET lease_owner = 'w-9' WHERE id = %(waiting)s",
     "conversation idle, lease_owner='w-9'"),
    ("a waiting turn that is not the current one",
     "UPDATE conversations SET turn_number = turn_number + 1, turn_count = turn_count + 1"
     " WHERE id = %(waiting)s",
     "current=False"),
    ("a waiting turn that never said so",
     "UPDATE events SET type = 'turn.resumed'"
     " WHERE conversation_id = %(waiting)s AND type = 'action.required'",
     "no action.required event"),
    ("a waiting turn with no action left",
     "UPDATE turns SET actions = '[]' WHERE conversation_id = %(waiting)s",
     "pending actions set() but open calls {'ask'}"),
    # the session tool cache: every branch
    ("a kept output of another tool",
     "UPDATE tool_outputs SET tool = 'secret' WHERE conversation_id = %(done)s",
     "kept output of c1 has another tool"),
    ("a kept output with another error flag",
     "UPDATE tool_outputs SET is_error = NOT is_error WHERE conversation_id = %(done)s",
     "kept output of c1 has another error flag"),
    ("a kept output at another seq",
     "UPDATE tool_outputs SET seq = 1 WHERE conversation_id = %(done)s",
     "kept output of c1 has another seq"),
    ("a kept output of another conversation's turn",
     "UPDATE tool_outputs SET turn_id = (SELECT id FROM turns WHERE conversation_id"
     " = %(waiting)s) WHERE conversation_id = %(done)s",
     "kept output of c1 has another conversation's turn"),
    ("a kept output of the wrong length",
     "UPDATE tool_outputs SET chars = chars + 1 WHERE conversation_id = %(done)s",
     "kept output of c1 has a wrong length"),
    ("a kept output that is not its message's",
     "UPDATE tool_outputs SET content = 'x' || content, chars = chars + 1"
     " WHERE conversation_id = %(done)s",
     "kept output of c1 has another text"),
    # compactions
    ("a compaction out of order",
     "UPDATE compactions SET number = number + 10 WHERE conversation_id = %(compacted)s",
     "compaction 11 follows compaction 0"),
    ("a compaction past the transcript",
     "UPDATE compactions SET through_seq = 999 WHERE conversation_id = %(compacted)s",
     "names messages"),
    ("a compaction nobody was told of",
     "UPDATE events SET message_seq = message_seq + 1"
     " WHERE conversation_id = %(compacted)s AND type = 'context.compacted'",
     "context.compacted events naming it"),
    ("a compaction that compacts less than the one before",
     "UPDATE compactions SET summarized_through = 0, summary = NULL, number = 99"
     " WHERE conversation_id = %(compacted)s AND number = 1;"
     " UPDATE compactions SET number = 1, summarized_through = 1, summary = 's'"
     " WHERE conversation_id = %(compacted)s AND number = 99;"
     " INSERT INTO compactions (conversation_id, number, turn_id, kind, reason, from_seq,"
     " through_seq, elided_through, summarized_through, tokens_before, tokens_after)"
     " SELECT conversation_id, 2, turn_id, 'elide', 'threshold', 1, 1, 0, 0, 1, 1"
     " FROM compactions WHERE conversation_id = %(compacted)s AND number = 1"
     " AND NOT EXISTS (SELECT 1 FROM compactions WHERE conversation_id = %(compacted)s"
     " AND number = 2)",
     "compacts less than the one before"),
    ("a summary that splits a call from its result",
     "UPDATE compactions SET summarized_through = 2 WHERE conversation_id = %(compacted)s",
     "summarises the call c1 but not its result"),
    ("a compaction of another conversation's turn",
     "UPDATE compactions SET turn_id = (SELECT id FROM turns WHERE conversation_id"
     " = %(waiting)s) WHERE conversation_id = %(compacted)s",
     "names a turn of another conversation"),
    # the webhook outbox
    ("a terminal event with no delivery", "DELETE FROM webhook_deliveries",
     "has no delivery to webhook"),
    ("a delivery of another type",
     "UPDATE webhook_deliveries SET type = 'turn.failed'",
     "names event"),
]  # fmt: skip


@pytest.mark.parametrize(("broken", "sql", "said"), ROWS, ids=[row[0] for row in ROWS])
def test_each_broken_invariant_is_reported(
    baseline: Baseline, broken: str, sql: str, said: str
) -> None:
    """The baseline broken and checked in one transaction, rolled back: the next row finds it
    as the product left it (as a clone of it would be, without a clone's cost)."""
    url = services.database_url(baseline.server, baseline.template)
    with psycopg.connect(services.libpq_dsn(url)) as conn:
        try:
            conn.execute("SET LOCAL session_replication_role = replica")
            for statement in sql.split(";"):
                conn.execute(statement.encode(), baseline.ids)
            conn.execute("SET LOCAL session_replication_role = origin")
            weak = "heartbeat" in said  # (at rest, a running one is reported as such first)
            problems = violations_seen_by(conn, at_rest=not weak, live_within=3600 if weak else 60)
        finally:
            conn.rollback()
    assert any(said in problem for problem in problems), (broken, problems)


def test_after_a_test_the_strong_check_runs_when_everything_is_at_rest(
    clone: str, baseline: Baseline
) -> None:
    """An idle transcript that ends on an unanswered call is only wrong at rest: the check after
    a test sees it unless a conversation is still running (a test may stop mid-turn)."""
    tamper(
        clone,
        'UPDATE messages SET content = NULL, tool_calls = \'[{"id": "c9", "name": "add",'
        ' "arguments": "{}"}]\' WHERE conversation_id = %(done)s AND seq = 4',
        baseline.ids,
    )
    assert "idle, but the transcript does not end with an answer" in " ".join(
        violations_after_test(clone)
    )
    assert violations(clone, at_rest=False) == []
    tamper(
        clone,
        "UPDATE conversations SET status = 'processing', lease_owner = 'w-9',"
        " heartbeat_at = now() WHERE id = %(failed)s",
        baseline.ids,
    )
    after = violations_after_test(clone)
    assert after and not [p for p in after if "does not end with an answer" in p], after


def test_an_orphaned_mcp_server_of_the_test_is_reported(tmp_path: Path) -> None:
    """A process that looks like the test MCP server (its module on the command line, the
    test's marker in its environment) whose parent died, kept alive by its open stdin."""
    marker = str(tmp_path / "ledger.jsonl")
    script = (
        "import subprocess, sys;"
        " subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()',"
        f" {MCP_SERVER_MARK!r}], stdin=sys.stdin)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, env={"LEDGER": marker}
    )
    try:
        assert parent.wait(timeout=30) == 0
        [problem] = orphaned_mcp_servers(marker, grace=0.5)
        assert problem.startswith("orphaned MCP server process") and MCP_SERVER_MARK in problem
        assert orphaned_mcp_servers(str(tmp_path / "another"), grace=0) == []
    finally:
        assert parent.stdin is not None
        parent.stdin.close()  # the orphan reads EOF and exits
    assert orphaned_mcp_servers(marker, grace=30) == []


def test_a_sqlite_run_is_checked_in_a_postgresql_copy_and_its_violations_are_found(
    sqlite_url: str, baseline: Baseline, migrated_template: str
) -> None:
    """The check after a SQLite test (tests/conftest.py): its rows, copied as they are into a
    clone of the template, are judged by the same SQL; a tampered SQLite database fails it."""
    upgrade(sqlite_url)
    client = ChatClient(load_settings(database_url=sqlite_url), enqueue=lambda _: None)
    try:
        conversation_id = client.create_conversation()
        client.submit_message(conversation_id, "hello")
    finally:
        client.close()
    found = []
    for tampered in (False, True):
        if tampered:
            engine = make_engine(sqlite_url)
            with engine.begin() as connection:
                connection.execute(text("UPDATE conversations SET event_seq = event_seq + 1"))
            engine.dispose()
        name = services.unique_name("copy")
        copy = services.create_database(baseline.server, name, template=migrated_template)
        try:
            copy_rows(sqlite_url, copy)
            found.append(violations_after_test(copy))
        finally:
            services.drop_database(baseline.server, name)
    clean, broken = found
    assert clean == []
    assert [p for p in broken if f"conversation {conversation_id}: event seqs" in p], broken
