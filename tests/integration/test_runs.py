"""The runs across owners, as an operator lists them (`client.admin.list_runs`, `chatworker runs`),
on PostgreSQL and SQLite, with the real loop: each filter, the signs of progress of a running
turn, a stuck one, keyset pages; bad filters refused.

    bad filter                                   gets (InvalidRequest)
    -------------------------------------------  ---------------------------------------------
    a status not of the list                     "status must be one of"
    a limit of 0, or over 200                    "limit must be 1 to 200"
    since not before until, a time with no zone  "since must be before until", "time zone"
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.client import ChatClient
from app.client.runs import RunFilter
from app.config import load_settings
from app.errors import InvalidRequest
from app.testing import fakes
from app.worker.lease_runner import Outcome
from app.worker.ports import ModelError
from tests.integration.test_loop import World, make_tools, past_store, run
from tests.integration.test_user_in_the_loop import world_of
from tests.worker_process import REPO


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, make_tools())


def turn_of(world: World, conversation_id: uuid.UUID) -> uuid.UUID:
    current = world.client.current_turn(conversation_id)
    assert current is not None
    return current.id


def test_the_runs_of_every_owner_are_listed_newest_first_and_filtered(world: World) -> None:
    done = world.conversation("hello", tools=[], owner="alice")
    assert (
        run(world.runner(fakes.ScriptedModel(fakes.by_iteration([fakes.text("hi")]))), done)
        is Outcome.IDLE
    )
    failing = world.conversation("fail", tools=[], owner="bob")
    broken = fakes.by_iteration([ModelError("LLM call failed (HTTP 400 BadRequestError): bad")])
    assert run(world.runner(fakes.ScriptedModel(broken)), failing) is Outcome.FAILED
    waiting = world.conversation("later", tools=[], owner="bob")  # queued: nobody ran it
    stuck = world.conversation("stuck", tools=[], owner="carol")
    assert past_store(world, seconds=300).claim(stuck, "w-gone", ttl=30) is not None

    listed = world.client.admin.list_runs()
    ids = [r.turn_id for r in listed]
    assert set(ids) == {turn_of(world, c) for c in (stuck, waiting, failing, done)}
    # newest first ((created_at, id): SQLite's times are to the second, so ties are by id)
    keys = [(r.created_at, str(r.turn_id)) for r in listed]
    assert keys == sorted(keys, reverse=True)
    by_id = {r.turn_id: r for r in listed}
    failed = by_id[turn_of(world, failing)]
    assert (failed.owner, failed.status) == ("bob", "failed") and "bad" in (failed.error or "")
    running = by_id[turn_of(world, stuck)]
    assert running.status == "running" and running.worker == "w-gone"
    assert running.heartbeat_age_s is not None and running.heartbeat_age_s >= 250
    assert by_id[turn_of(world, done)].worker is None  # (at rest: no signs of progress)

    def only(**wanted: Any) -> list[uuid.UUID]:
        return [r.turn_id for r in world.client.admin.list_runs(RunFilter(**wanted))]

    assert only(status="failed") == [turn_of(world, failing)]
    assert set(only(owner="bob")) == {turn_of(world, waiting), turn_of(world, failing)}
    assert only(status="stuck") == [turn_of(world, stuck)]
    assert only(status="stuck", stuck_seconds=3600) == []
    assert only(status="queued", owner="alice") == []
    assert only(since=datetime.now(UTC) + timedelta(hours=1)) == []
    assert only(model="nope") == []
    # keyset pages: each after the previous one's last, none twice
    first = only(limit=2)
    second = only(limit=2, before=first[-1])
    assert first + second == ids and only(limit=2, before=second[-1]) == []
    for going in (stuck, waiting):  # (no live lease: the web side ends them)
        world.client.cancel(going)
        assert world.client.get_turn(turn_of(world, going)).status == "cancelled"


@pytest.mark.parametrize(
    ("wanted", "said"),
    [
        ({"status": "exploded"}, "status must be one of"),
        ({"limit": 0}, "limit must be 1 to 200"),
        ({"limit": 201}, "limit must be 1 to 200"),
        (
            {"since": datetime(2026, 1, 2, tzinfo=UTC), "until": datetime(2026, 1, 1, tzinfo=UTC)},
            "since must be before until",
        ),
        ({"since": datetime(2026, 1, 1)}, "time zone"),
        ({"stuck_seconds": 0}, "above 0"),
    ],
)
def test_a_bad_filter_is_refused(wanted: dict[str, Any], said: str) -> None:
    with pytest.raises(InvalidRequest, match=said):
        RunFilter(**wanted)


def test_runs_list_and_cancel_from_the_command_line(database_url: str) -> None:
    client = ChatClient(load_settings(database_url=database_url), enqueue=lambda _cid: None)
    waiting = client.create_conversation(owner="dana")
    turn = client.submit_message(waiting, "wait").turn_id
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_URL": database_url,
        "PYTHONPATH": str(REPO),
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", "runs", *args],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    listed = cli("list", "--owner", "dana", "--since", "1h", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert (row["turn_id"], row["owner"], row["status"]) == (str(turn), "dana", "queued")
    assert str(turn) in cli("list", "--status", "queued").stdout
    shown = cli("show", str(turn))
    assert shown.returncode == 0 and "queued" in shown.stdout, shown.stderr
    cancelled = cli("cancel", str(turn), "--as", "ana")
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stderr, cancelled.stderr
    (entry,) = client.admin.audit_log()
    assert (entry.operator, entry.action, entry.target) == ("ana", "turn.cancel", str(turn))
    assert entry.detail == {"via": "cli"}
    steps = json.loads(cli("show", str(turn), "--json").stdout)
    assert [step["kind"] for step in steps] == ["queued", "ended"]  # (cancelled unclaimed)
    assert cli("list", "--since", "yesterday").returncode == 2  # a refused argument
    fleet = subprocess.run(
        [sys.executable, "-m", "app.cli", "workers", "--json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert fleet.returncode == 0, fleet.stderr
    assert json.loads(fleet.stdout)["outcomes_last_hour"] == {"cancelled": 1}
    client.close()


def test_a_bulk_retry_from_the_command_line_is_a_dry_run_then_a_confirmed_one(
    database_url: str,
) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_URL": database_url,
        "PYTHONPATH": str(REPO),
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", "runs", "retry", *args],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    for world in world_of(database_url, make_tools()):  # (its invariants checked at the end)
        broken = fakes.by_iteration([ModelError("LLM call failed (HTTP 400 BadRequestError): x")])
        failing = [world.conversation(f"fail {n}", tools=[], owner="gus") for n in range(2)]
        for conversation_id in failing:
            assert run(world.runner(fakes.ScriptedModel(broken)), conversation_id) is Outcome.FAILED
        dry = cli("--status", "failed", "--owner", "gus", "--since", "1h", "--dry-run")
        assert dry.returncode == 0 and "2 runs to retry" in dry.stderr, dry.stderr
        token = dry.stdout.strip()
        assert cli("--confirm", token).returncode == 2  # (who acts is required)
        confirmed = cli("--confirm", token, "--as", "ana", "--batch", "1")
        assert confirmed.returncode == 0, confirmed.stderr
        assert confirmed.stdout.splitlines() == [
            "retried 1, passed over 0, left 1",
            "retried 1, passed over 0, left 0",
        ]
        again = cli("--confirm", token, "--as", "ana")
        assert again.stdout.strip() == "retried 0, passed over 0, left 0"
        entries = world.client.admin.audit_log()
        assert sorted(e.action for e in entries) == ["bulk.retry", "bulk.retry"]
        for conversation_id in failing:  # (their retries wait for a worker: leave them at rest)
            assert world.client.get_conversation(conversation_id).status == "processing"
            world.client.cancel(conversation_id)
