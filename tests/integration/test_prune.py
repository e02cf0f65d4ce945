"""Retention: `chatworker prune` deletes resting conversations untouched since a cutoff, with
everything that is theirs, in short batches, and never one that runs or waits. On PostgreSQL and
SQLite; the command line (and what each bad age gets) at the bottom.

| `--older-than`          | outcome                                                     |
|-------------------------|-------------------------------------------------------------|
| `abc`, `90`, `5w`       | exit 2: "must be an age such as 90d, 12h, 30m or 45s"       |
| `0d`, `=-5d`            | exit 2: "must be a positive age"                            |
| ` -5d` (a separate word) | exit 2: argparse's "expected one argument"                 |
| none, no setting        | exit 2: "say how old: --older-than 90d, or set ..."         |
| `--batch 0`             | exit 2: "--batch must be at least 1"                        |
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from app.models import Conversation, Event, Message, ToolOutput, Turn, WebhookDelivery
from app.testing import fakes
from app.worker.lease_runner import Outcome
from tests.integration.test_loop import World, make_tools, run
from tests.integration.test_user_in_the_loop import world_of
from tests.worker_process import REPO

LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


def age(world: World, conversation_id: uuid.UUID) -> None:
    with world.engine.begin() as connection:
        connection.execute(
            update(Conversation)
            .where(Conversation.id == conversation_id)
            .values(updated_at=LONG_AGO)
        )


def rows(world: World, conversation_id: uuid.UUID) -> dict[str, int]:
    counted = {}
    with world.engine.connect() as connection:
        for model in (Conversation, Turn, Message, Event, ToolOutput):
            column = model.id if model is Conversation else model.conversation_id  # type: ignore[attr-defined]
            counted[model.__tablename__] = connection.execute(
                select(func.count()).select_from(model).where(column == conversation_id)
            ).scalar_one()
    return counted


def test_only_resting_conversations_untouched_since_the_cutoff_go_with_all_that_is_theirs(
    world: World,
) -> None:
    answered = world.conversation("1 + 2?", tools=["add"])
    scripted = fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("c1", "add", {"a": 1, "b": 2})), fakes.text("3")])
    )
    assert run(world.runner(scripted), answered) is Outcome.IDLE
    failed = world.conversation("fail", tools=[])
    boom = fakes.ScriptedModel(fakes.by_iteration([fakes.ModelError("LLM call failed: no")]))
    assert run(world.runner(boom), failed) is Outcome.FAILED
    recent = world.conversation("recent", tools=[])
    assert run(world.runner(fakes.ScriptedModel(lambda _: fakes.text("hi"))), recent) is (
        Outcome.IDLE
    )
    queued = world.conversation("still queued", tools=[])  # processing: never pruned
    waiting = world.conversation("which?", tools=["add"])
    ask = fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("q", "agent_clarify", {"question": "Which?"}))])
    )
    assert (
        run(world.runner(ask), waiting) is Outcome.REQUIRES_ACTION
    )  # idle, but waits for the user
    for conversation_id in (answered, failed, queued, waiting):
        age(world, conversation_id)
    assert rows(world, answered)["tool_outputs"] == 1

    cutoff = datetime.now(UTC) - timedelta(days=1)
    dry = world.upkeep.prune(cutoff, dry_run=True)
    assert dry.conversations == 2 and rows(world, answered)["conversations"] == 1

    pruned = world.upkeep.prune(cutoff, batch=1)
    assert (pruned.conversations, pruned.batches) == (2, 2)
    for gone in (answered, failed):
        assert set(rows(world, gone).values()) == {0}, rows(world, gone)
    for kept in (recent, queued, waiting):
        assert rows(world, kept)["conversations"] == 1
    assert world.upkeep.prune(cutoff).conversations == 0  # nothing left to do
    world.client.cancel(queued)
    world.client.cancel(waiting)


# --- the command line ---------------------------------------------------------------------------


def prune(database_url: str, *arguments: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DATABASE_URL": database_url,
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "prune", *arguments],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def pg_world(database_url: str) -> Iterator[World]:
    yield from world_of(database_url, make_tools())


def test_the_command_prunes_by_its_age_or_the_setting(pg_world: World, database_url: str) -> None:
    world = pg_world
    conversation_id = world.conversation("old", tools=[])
    assert run(world.runner(fakes.ScriptedModel(lambda _: fakes.text("hi"))), conversation_id) is (
        Outcome.IDLE
    )
    age(world, conversation_id)
    dry = prune(database_url, "--older-than", "30d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would delete 1 conversation(s) untouched since ")
    done = prune(database_url, CHATWORKER_RETENTION_DAYS="90")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("deleted 1 conversation(s) untouched since ")
    assert rows(world, conversation_id)["conversations"] == 0


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        (("--older-than", "abc"), "must be an age such as 90d, 12h, 30m or 45s, not 'abc'"),
        (("--older-than", "90"), "must be an age such as 90d"),
        (("--older-than", "5w"), "must be an age such as 90d"),
        (("--older-than", "0d"), "must be a positive age, not '0d'"),
        (("--older-than=-5d",), "must be a positive age"),
        (("--older-than", "-5d"), "argument --older-than: expected one argument"),
        ((), "say how old: --older-than 90d, or set CHATWORKER_RETENTION_DAYS"),
        (("--older-than", "1d", "--batch", "0"), "--batch must be at least 1, not 0"),
    ],
)
def test_a_bad_age_is_refused_and_deletes_nothing(
    database_url: str, arguments: tuple[str, ...], refusal: str
) -> None:
    refused = prune(database_url, *arguments)
    assert refused.returncode == 2
    assert refusal in refused.stderr


def test_finished_webhook_deliveries_go_by_age_and_pending_ones_stay(world: World) -> None:
    webhook = world.client.admin.add_webhook("https://example.com/hooks")
    ids = [world.conversation("hello", tools=[]) for _ in range(3)]
    for conversation_id in ids:
        replies = fakes.ScriptedModel(lambda _: fakes.text("hi"))
        assert run(world.runner(replies), conversation_id) is Outcome.IDLE
    table = WebhookDelivery.__table__
    with world.engine.begin() as connection:
        made = [row.id for row in connection.execute(select(table.c.id).order_by(table.c.id))]  # type: ignore[attr-defined]
        assert len(made) == 3
        for delivery_id, status in zip(made, ("delivered", "failed", "pending"), strict=True):
            connection.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.id == delivery_id)
                .values(status=status, created_at=LONG_AGO)
            )
    dry = world.upkeep.prune(datetime(2021, 1, 1, tzinfo=UTC), dry_run=True)
    assert dry.deliveries == 2
    pruned = world.upkeep.prune(datetime(2021, 1, 1, tzinfo=UTC), batch=1)
    assert (pruned.conversations, pruned.deliveries) == (0, 2)
    with world.engine.connect() as connection:
        left = connection.execute(select(table.c.status)).scalars().all()  # type: ignore[attr-defined]
    assert left == ["pending"]
    # The outbox check after the test would miss the pruned deliveries of these events (it
    # spares only events within a second of the webhook, which a loaded machine passes).
    world.client.admin.remove_webhook(webhook.id)
