"""A run that raises in the worker's own code (`app/worker/crashes.py`), in process against the
real store: its lease is given back and the turn rung again after a spread, each claim counts
an attempt, the attempts spent fail the turn with the crash's own error, and a cancel ends it
`cancelled` with every open call answered. A claim that raises after it committed is counted and
released the same way. (Real worker processes: `tests/crash/test_poison_runs.py`.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from app.models import CANCELLED_CALL_RESULT
from app.testing import fakes
from app.worker.crashes import CRASHED_ERROR
from app.worker.lease_runner import TurnRunner
from app.worker.outcome import Outcome
from app.worker.ports import CallRef, ToolResult
from app.worker.store import Deferred, Snapshot, TurnStore
from tests.integration.test_loop import CONFIG, World, make_tools
from tests.integration.test_user_in_the_loop import world_of

Rung = list[tuple[uuid.UUID, float]]


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


class UnreadableClaims(TurnStore):
    """A store whose claims commit, then fail to build the turn (as a row it cannot read)."""

    def claim(self, *args: Any, **kwargs: Any) -> Snapshot | Deferred | None:
        super().claim(*args, **kwargs)
        raise ValueError("a row of the transcript cannot be read")


class BrokenTools(fakes.InMemoryTools):
    """Tools whose provider raises instead of answering (the worker's own code crashes);
    `before` runs first."""

    def __init__(self, before: Any) -> None:
        super().__init__({"add": lambda a=0, b=0: a + b})
        self.before = before

    async def execute(
        self, name: str, arguments: dict[str, Any], call: CallRef | None = None
    ) -> ToolResult:
        self.before()
        raise RuntimeError("the tool provider broke")


def runner(world: World, model: fakes.ScriptedModel, rung: Rung, **kwargs: Any) -> TurnRunner:
    return TurnRunner(
        kwargs.pop("store", world.store),
        model=model,
        tools=kwargs.pop("tools", world.tools),
        settings=CONFIG,
        owner="worker-1",
        again=lambda conversation_id, delay: rung.append((conversation_id, delay)),
    )


def test_a_run_that_raises_gives_its_lease_back_and_fails_after_its_attempts(
    world: World,
) -> None:
    model = fakes.ScriptedModel(fakes.by_iteration([RuntimeError("cannot handle this answer")]))
    rung: Rung = []
    conversation_id = world.conversation("Hello?", tools=[])
    worker = runner(world, model, rung)

    for attempt in (1, 2):
        assert asyncio.run(worker.run(conversation_id)) is Outcome.CRASHED
        row = world.row(conversation_id)
        assert row.status == "processing" and row.lease_owner is None  # given back at once
        assert row.attempts == attempt
        assert rung[-1][0] == conversation_id and 0 <= rung[-1][1] <= 2.0 ** (attempt - 1)
    assert asyncio.run(worker.run(conversation_id)) is Outcome.FAILED

    view = world.client.get_conversation(conversation_id)
    assert view.status == "failed"
    assert view.error == CRASHED_ERROR.format(
        attempts=3, why="RuntimeError: cannot handle this answer"
    )
    assert len(model.requests) == 3 and len(rung) == 2


def test_a_run_that_raises_with_a_cancel_requested_ends_cancelled(world: World) -> None:
    model = fakes.ScriptedModel(fakes.by_iteration([fakes.calls(("c1", "add", {"a": 1}))]))
    rung: Rung = []
    conversation_id = world.conversation("Add 1.", tools=["add"])
    # the user's cancel reaches the run (the live notice) just before it crashes
    tools = BrokenTools(lambda: worker.cancel(conversation_id))
    worker = runner(world, model, rung, tools=tools)

    assert asyncio.run(worker.run(conversation_id)) is Outcome.CANCELLED

    view = world.client.get_conversation(conversation_id)
    assert view.status == "idle" and rung == []
    assert [(m.role, m.tool_call_id) for m in view.messages[1:]] == [
        ("assistant", None),
        ("tool", "c1"),
    ]
    assert view.messages[-1].content == CANCELLED_CALL_RESULT
    turn = world.client.current_turn(conversation_id)
    assert turn is not None and turn.status == "cancelled"


def test_a_claim_that_raises_after_committing_is_released_and_fails_after_its_attempts(
    world: World,
) -> None:
    model = fakes.ScriptedModel(fakes.by_iteration([fakes.text("never asked")]))
    rung: Rung = []
    conversation_id = world.conversation("Hello?", tools=[])
    worker = runner(world, model, rung, store=UnreadableClaims(world.engine))

    for attempt in (1, 2):
        assert asyncio.run(worker.run(conversation_id)) is Outcome.CRASHED
        row = world.row(conversation_id)
        assert row.lease_owner is None and row.attempts == attempt
    assert asyncio.run(worker.run(conversation_id)) is Outcome.FAILED

    view = world.client.get_conversation(conversation_id)
    assert view.status == "failed"
    assert view.error == CRASHED_ERROR.format(
        attempts=3, why="ValueError: a row of the transcript cannot be read"
    )
    assert model.requests == [] and len(rung) == 2
