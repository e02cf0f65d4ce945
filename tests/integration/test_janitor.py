"""The janitor: stale running conversations fail with a reason; live ones are left alone."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, text, update

from app.client import ChatClient
from app.config import load_settings
from app.models import Conversation
from app.testing import fakes
from app.worker.janitor import clean_up, stale_error
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.store import LeaseLost, TurnStore, Upkeep
from tests.rows import force_status

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(engine: Engine, database_url: str) -> ChatClient:
    return ChatClient(
        load_settings(database_url=database_url), engine=engine, enqueue=lambda _: None
    )


def running(
    client: ChatClient, engine: Engine, silent_for: float, status: str = "processing"
) -> uuid.UUID:
    conversation_id = client.create_conversation()
    client.submit_message(conversation_id, "hi")
    silent_since = datetime.now(UTC) - timedelta(seconds=silent_for)
    force_status(engine, conversation_id, status, heartbeat_at=silent_since)
    return conversation_id


def test_a_stale_conversation_fails_with_a_reason(client: ChatClient, engine: Engine) -> None:
    stale = running(client, engine, silent_for=600, status="tool_loop")
    fresh = running(client, engine, silent_for=10)
    report = clean_up(Upkeep(engine), older_than=300)
    assert [c.id for c in report.conversations] == [stale]
    assert report.conversations[0].status == "tool_loop"
    view = client.get_conversation(stale)
    assert view.status == "failed"
    assert view.error == stale_error(300)
    assert "No progress for more than 5 min" in (view.error or "")
    assert client.get_conversation(fresh).status == "processing"


def test_resting_conversations_are_never_touched(client: ChatClient, engine: Engine) -> None:
    idle = client.create_conversation()
    with engine.begin() as connection:
        connection.execute(
            update(Conversation).values(heartbeat_at=datetime.now(UTC) - timedelta(days=9))
        )
    assert clean_up(Upkeep(engine), older_than=300).conversations == []
    assert client.get_conversation(idle).status == "idle"


def test_dry_run_changes_nothing_and_running_twice_is_safe(
    client: ChatClient, engine: Engine
) -> None:
    stale = running(client, engine, silent_for=600)
    dry = clean_up(Upkeep(engine), older_than=300, dry_run=True)
    assert [c.id for c in dry.conversations] == [stale] and dry.dry_run
    assert client.get_conversation(stale).status == "processing"
    assert len(clean_up(Upkeep(engine), older_than=300).conversations) == 1
    assert clean_up(Upkeep(engine), older_than=300).conversations == []


def test_failing_a_stale_conversation_fences_out_its_zombie_worker(
    client: ChatClient, engine: Engine
) -> None:
    conversation_id = running(client, engine, silent_for=0)
    store = TurnStore(engine)
    snapshot = store.claim(conversation_id, "zombie", ttl=30)
    assert snapshot is not None
    Upkeep(engine).fail_stale(older_than=-1, error="stale")
    with pytest.raises(LeaseLost):
        store.heartbeat(snapshot.claim, ttl=30)


def test_a_slow_tool_with_a_live_heartbeat_is_not_failed(
    client: ChatClient, engine: Engine
) -> None:
    async def slow_tool() -> str:
        await asyncio.sleep(4)
        return "finally"

    tools = fakes.InMemoryTools({"slow": slow_tool})
    upkeep = Upkeep(engine)
    asyncio.run(_publish(upkeep, tools))
    conversation_id = client.create_conversation(tools=["slow"])
    client.submit_message(conversation_id, "take your time")
    model = fakes.ScriptedModel(
        fakes.by_iteration([fakes.calls(("c1", "slow", {})), fakes.text("done")])
    )
    runner = TurnRunner(
        TurnStore(engine),
        model=model,
        tools=tools,
        settings=load_settings(lease_ttl_seconds=3, heartbeat_seconds=0.2),
        owner="slow-worker",
    )

    async def scenario() -> tuple[Outcome, int]:
        task = asyncio.create_task(runner.run(conversation_id))
        failed = 0
        for _ in range(15):  # a janitor with a 2 s threshold, running every 0.2 s
            await asyncio.sleep(0.2)
            failed += len(await asyncio.to_thread(lambda: clean_up(upkeep, 2).conversations))
        return await task, failed

    outcome, failed = asyncio.run(scenario())
    assert (outcome, failed) == (Outcome.IDLE, 0)
    assert client.get_conversation(conversation_id).status == "idle"


async def _publish(upkeep: Upkeep, tools: fakes.InMemoryTools) -> None:
    upkeep.publish_catalog(await tools.definitions())


@pytest.mark.raw_rows  # 20,000 conversations written by hand, without turns or events
def test_the_janitor_query_uses_the_partial_index(engine: Engine) -> None:
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO conversations (id, model, allowed_tools, status, heartbeat_at) "
                "SELECT gen_random_uuid(), 'm', '[]', "
                "CASE WHEN g % 1000 = 0 THEN 'processing' ELSE 'idle' END, "
                "now() - (g || ' seconds')::interval FROM generate_series(1, 20000) g"
            )
        )
        connection.execute(text("ANALYZE conversations"))
    upkeep = Upkeep(engine)
    with engine.connect() as connection:
        plan = "\n".join(
            row[0]
            for row in connection.execute(
                text(
                    "EXPLAIN SELECT id, status, heartbeat_at FROM conversations "
                    "WHERE status IN ('processing', 'tool_loop') "
                    "AND heartbeat_at < now() - interval '300 seconds'"
                )
            )
        )
    assert "ix_conversations_running_heartbeat" in plan, plan
    assert len(upkeep.stale(300)) == 20  # every 1000th row is running, all silent 1000 s or more


def test_the_cron_script_prints_what_it_changed(
    client: ChatClient, engine: Engine, database_url: str
) -> None:
    stale = running(client, engine, silent_for=120)
    env = {"DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"}
    script = [sys.executable, str(REPO / "scripts" / "cleanup_stale.py")]

    def cron(*args: str) -> str:
        result = subprocess.run(
            [*script, *args], env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert "0 conversation(s) failed; threshold 300 s" in cron()
    dry = cron("--older-than", "60", "--dry-run")
    assert f"would fail {stale}" in dry and "1 conversation(s) would fail" in dry
    assert client.get_conversation(stale).status == "processing"
    assert f"failed {stale} (was processing" in cron("--older-than", "60")
    assert "0 conversation(s) failed" in cron("--older-than", "60")
    assert client.get_conversation(stale).status == "failed"
