"""The message tree holds for any sequence of commands: random sequences of submit, edit,
regenerate, switch, fork and cancel, each at any message of any branch and with any busy policy,
with the real loop (an in-process scripted model and tools) run in between, and some commands
issued while a turn runs: during its model call, or from threads racing the worker's claims and
steps on PostgreSQL.

    after every step                        after the work is drained
    --------------------------------------  --------------------------------------------------
    each conversation's tree holds          every turn ended completed or cancelled (none
      (`invariants.tree_violations`): seq     failed, none left waiting or running)
      gap-free, each parent an older          every invariant of the database at rest
      message, the active messages exactly    (`invariants.violations`)
      one path from a root to the leaf      each model call was sent exactly the active path
    a refused command is one of the           of that moment, ending in a message to answer
      documented refusals                       (a user message or a tool result)

A small, fixed set of examples by default (derandomized: the same sequences every run, well under
a minute); `CHATWORKER_TREE_EXAMPLES=500` runs that many random ones, a soak.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from sqlalchemy import select

from app.errors import ConversationBusy, NotBranchable
from app.models import tables
from app.testing import fakes
from app.worker.ports import ModelRequest
from tests.integration.test_loop import World, make_tools, run
from tests.integration.test_user_in_the_loop import world_of
from tests.invariants import tree_violations, violations

SOAK = os.environ.get("CHATWORKER_TREE_EXAMPLES")
EXAMPLES = int(SOAK or "12")
REFUSALS = (ConversationBusy, NotBranchable)  # (what a command may meet: the state decides)
AT_REST = ("idle", "failed")
ENDED = ("completed", "cancelled")
DRAINS = 12  # runs of the worker before a conversation that never rests fails the test

# --- the commands -------------------------------------------------------------------------------

POLICIES = st.sampled_from(["reject", "enqueue", "interrupt", "rollback", "steer"])
PICK = st.integers(min_value=0, max_value=10_000)  # a message of any branch, by position
COMMANDS = st.one_of(
    st.tuples(st.just("submit"), POLICIES, st.booleans()),  # (the bool: a turn with a tool call)
    st.tuples(st.just("edit"), PICK, POLICIES, st.booleans()),
    st.tuples(st.just("regenerate"), PICK, POLICIES),
    st.tuples(st.just("switch"), PICK),
    st.tuples(st.just("fork"), PICK),
    st.tuples(st.just("cancel")),
)
# A command, then (or not) the worker run until the conversation rests; commands issued during
# the next model call; commands from threads racing the worker's run.
_DO = st.tuples(st.just("do"), COMMANDS, st.booleans())
STEPS = st.lists(
    st.one_of(
        _DO,
        _DO,  # (twice: most steps are one command)
        st.tuples(st.just("during"), st.lists(COMMANDS, min_size=1, max_size=3)),
        st.tuples(st.just("race"), st.lists(COMMANDS, min_size=1, max_size=3)),
    ),
    min_size=3,
    max_size=14,
)


@dataclass
class Session:
    """One example: a conversation with the `add` tool, what its commands met, and what the
    model was sent that was not the active path."""

    world: World
    conversation_id: uuid.UUID
    texts: Iterator[int] = field(default_factory=itertools.count)
    forks: list[uuid.UUID] = field(default_factory=list)
    during: list[Any] = field(default_factory=list)  # commands for the next model call
    mismatches: list[str] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)  # of commands run in threads
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seq(self, pick: int) -> int | None:
        """The message at position `pick` (modulo their number) over every branch; None when
        there is none yet."""
        every = self.world.client.get_conversation(self.conversation_id, all_versions=True)
        return every.messages[pick % len(every.messages)].seq if every.messages else None

    def text(self, tool: bool) -> str:
        with self.lock:
            number = next(self.texts)
        return f"m{number} add" if tool else f"m{number}"

    def issue(self, command: tuple[Any, ...]) -> None:
        """Run one command; a documented refusal is fine, anything else fails the test."""
        client, conversation_id = self.world.client, self.conversation_id
        name, *arguments = command
        seq = self.seq(arguments[0]) if name in ("edit", "regenerate", "switch", "fork") else 1
        if seq is None:
            return  # (no message to name yet)
        try:
            match name:
                case "submit":
                    policy, tool = arguments
                    client.submit_message(conversation_id, self.text(tool), on_busy=policy)
                case "edit":
                    _pick, policy, tool = arguments
                    client.edit_message(conversation_id, seq, self.text(tool), on_busy=policy)
                case "regenerate":
                    client.regenerate(conversation_id, seq, on_busy=arguments[1])
                case "switch":
                    client.switch_branch(conversation_id, seq)
                case "fork":
                    fork = client.fork_conversation(conversation_id, seq)
                    with self.lock:
                        self.forks.append(fork.id)
                case "cancel":
                    client.cancel(conversation_id)
        except REFUSALS:
            pass

    def in_threads(self, commands: list[tuple[Any, ...]]) -> list[threading.Thread]:
        """Each command from a thread of its own, all let go at once."""
        start = threading.Barrier(len(commands))

        def issue(command: tuple[Any, ...]) -> None:
            start.wait()
            try:
                self.issue(command)
            except BaseException as exc:  # (told by `join`, on the test's thread)
                self.failures.append(exc)

        threads = [threading.Thread(target=issue, args=(c,), daemon=True) for c in commands]
        for thread in threads:
            thread.start()
        return threads

    def join(self, threads: list[threading.Thread]) -> None:
        for thread in threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), "a command never returned"
        assert self.failures == [], self.failures

    # --- the model: it checks what it is sent, then answers ----------------------------------

    async def reply(self, request: ModelRequest) -> Any:
        sent = [_said(m) for m in request.messages if m["role"] != "system"]
        on_path = self.active_path()
        if sent != on_path:
            self.mismatches.append(f"sent {sent}, the active path is {on_path}")
        if not sent or sent[-1][0] not in ("user", "tool"):
            self.mismatches.append(f"sent {sent}: nothing to answer")
        if self.during:  # the user acts while the model thinks
            commands, self.during = self.during, []
            await asyncio.to_thread(lambda: self.join(self.in_threads(commands)))
        last_role, last_text = sent[-1] if sent else ("user", "")
        if last_role == "user" and last_text.endswith(" add"):
            return fakes.calls(("c1", "add", {"a": 1, "b": 2}))  # (the same id every time)
        return fakes.text(f"re {last_text}")

    def active_path(self) -> list[tuple[str, str]]:
        with self.world.engine.connect() as connection:
            rows = connection.execute(
                select(tables.messages.c.role, tables.messages.c.content)
                .where(
                    tables.messages.c.conversation_id == self.conversation_id,
                    tables.messages.c.active,
                )
                .order_by(tables.messages.c.seq)
            ).all()
        return [(str(role), str(content or "")) for role, content in rows]

    # --- the worker ------------------------------------------------------------------------------

    def drain(self) -> None:
        """Run the worker until the conversation rests with no turn waiting."""
        model = fakes.ScriptedModel(self.reply, record=False)
        for _ in range(DRAINS):
            run(self.world.runner(model), self.conversation_id)
            if self.rests():
                return
        pytest.fail(f"conversation {self.conversation_id} never came to rest")

    def rests(self) -> bool:
        row = self.world.row(self.conversation_id)
        return row.status in AT_REST and row.turn_count == row.turn_number

    # --- the checks ------------------------------------------------------------------------------

    def check_trees(self) -> None:
        for conversation_id in [self.conversation_id, *self.forks]:
            problems = tree_violations(_tree(self.world, conversation_id))
            assert problems == [], f"conversation {conversation_id}: {problems}"
        assert self.mismatches == [], self.mismatches

    def check_at_rest(self, url: str) -> None:
        self.check_trees()
        with self.world.engine.connect() as connection:
            statuses = connection.execute(
                select(tables.turns.c.number, tables.turns.c.status, tables.turns.c.error).where(
                    tables.turns.c.conversation_id == self.conversation_id
                )
            ).all()
        unended = [tuple(turn) for turn in statuses if turn.status not in ENDED]
        assert unended == [], f"turns that did not end completed or cancelled: {unended}"
        mine = [str(c) for c in (self.conversation_id, *self.forks)]
        # (another example's conversations are that example's to judge)
        found = violations(url, at_rest=True)
        assert [p for p in found if any(c in p for c in mine) or "conversation " not in p] == []


def _said(message: dict[str, Any]) -> tuple[str, str]:
    return str(message["role"]), str(message.get("content") or "")


def _tree(world: World, conversation_id: uuid.UUID) -> list[tuple[Any, ...]]:
    """The rows `invariants.tree_violations` reads, in seq order."""
    m = tables.messages.c
    with world.engine.connect() as connection:
        rows = connection.execute(
            select(m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.parent_seq, m.active)
            .where(m.conversation_id == conversation_id)
            .order_by(m.seq)
        ).all()
    return [tuple(row) for row in rows]


def play(session: Session, steps: list[tuple[Any, ...]], url: str) -> None:
    """Each step, the trees checked after it; then the work drained and everything checked."""
    for step in steps:
        match step:
            case ("do", command, then_run):
                session.issue(command)
                if then_run:
                    session.drain()
            case ("during", commands):
                session.during = list(commands)
                session.drain()
                if session.during:  # no model call came: they are issued at rest
                    session.join(session.in_threads(session.during))
                    session.during = []
            case ("race", commands):
                threads = session.in_threads(commands)
                session.drain()
                session.join(threads)
        session.check_trees()
    session.drain()
    session.check_at_rest(url)


# --- the test -----------------------------------------------------------------------------------


@pytest.fixture
def tree_world(database_url: str) -> Iterator[tuple[World, str]]:
    for world in world_of(database_url, make_tools()):
        yield world, database_url


def session_of(world: World) -> Session:
    conversation_id = world.client.create_conversation(tools=["add"])
    return Session(world, conversation_id)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=SOAK is None,
    database=None,
    print_blob=True,
    # (one database for every example: each plays on a conversation of its own)
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=STEPS)
def test_any_sequence_of_tree_commands_keeps_one_valid_path_and_ends_every_turn(
    tree_world: tuple[World, str], steps: list[tuple[Any, ...]]
) -> None:
    world, url = tree_world
    note(f"steps: {steps}")
    play(session_of(world), steps, url)


# --- the sequences the issue reported, played through the same checks --------------------------

REPORTED: dict[str, Callable[[], list[tuple[Any, ...]]]] = {
    # messages 1-6, edit 3, regenerate 5: the cut left an answer as the leaf
    "regenerate on another branch": lambda: [
        *_six(),
        ("do", ("edit", 2, "reject", False), True),
        ("do", ("regenerate", 4, "reject"), False),
    ],
    # messages 1-6, edit 1, edit 5: only the two new messages stayed active
    "edit on another branch": lambda: [
        *_six(),
        ("do", ("edit", 0, "reject", False), True),
        ("do", ("edit", 4, "reject", False), False),
    ],
    # the same regenerate, queued behind a running turn: the claim moves the path
    "queued regenerate on another branch": lambda: [
        *_six(),
        ("do", ("edit", 0, "reject", False), True),
        ("do", ("submit", "reject", True), False),
        ("do", ("regenerate", 4, "enqueue"), False),
    ],
}


def _six() -> list[tuple[Any, ...]]:
    """Messages 1-6 on one path: three answered turns."""
    return [("do", ("submit", "reject", False), True)] * 3


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_the_reported_sequences_keep_one_valid_path_and_end_every_turn(
    tree_world: tuple[World, str], name: str
) -> None:
    world, url = tree_world
    play(session_of(world), REPORTED[name](), url)
