"""Ownership under real process faults: a frozen zombie, a poisoned turn, a graceful shutdown."""

from __future__ import annotations

import time
from collections import Counter

from sqlalchemy import text

from tests.deployment import Deployment
from tests.invariants import assert_invariants
from tests.servers.mcp_server import read_ledger


def wait_until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_zombie_worker_s_writes_are_all_rejected(deployment: Deployment) -> None:
    deployment.llm.script(
        [
            {
                "delay": 3,
                "tool_calls": [{"id": "c1", "name": "write_note", "arguments": {"text": "z"}}],
            },
            {"text": "Noted once."},
        ],
        mode="by_iteration",
    )
    zombie = deployment.start_worker("zombie")
    conversation_id = deployment.chat("Write a note", ["write_note"])
    wait_until(deployment.llm.requests, 20, "the zombie's LLM request")
    zombie.pause()  # frozen mid-LLM-call: no heartbeat, its lease runs out
    frozen_at = time.monotonic()
    epoch = _epoch(deployment, conversation_id)
    successor = deployment.start_worker("successor")
    # A frozen process keeps its session, so its liveness token: the successor's dead-worker
    # sweeps (every second) must not take the turn; only the 30 s lease running out may.
    while time.monotonic() - frozen_at < 8:
        assert _epoch(deployment, conversation_id) == epoch, "a frozen worker judged dead"
        time.sleep(0.5)
    view = deployment.wait(conversation_id, timeout=90)
    assert view.status == "idle"
    assert time.monotonic() - frozen_at >= 30  # (the lease's TTL, the default)
    zombie.resume()  # its LLM answer is waiting in the socket: it will try to commit it
    wait_until(
        lambda: "lease" in zombie.log() and "lost" in zombie.log(), 20, "the zombie to notice"
    )
    time.sleep(1)  # give it every chance to write something
    assert [m.role for m in deployment.client.get_conversation(conversation_id).messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert deployment.tool_runs() == Counter({"write_note": 1})  # only the successor ran it
    assert zombie.process is not None and zombie.process.poll() is None  # alive, just fenced out
    assert successor.process is not None and successor.process.poll() is None
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def _epoch(deployment: Deployment, conversation_id: object) -> int:
    with deployment.engine.connect() as connection:
        return int(
            connection.execute(
                text("SELECT lease_epoch FROM conversations WHERE id = :id"),
                {"id": conversation_id},
            ).scalar_one()
        )


def test_a_turn_that_kills_its_worker_every_time_fails_after_bounded_attempts(
    deployment: Deployment,
) -> None:
    """`current_time` is poisoned: running it kills whichever worker runs it (a failpoint).
    A supervisor restarts dead workers, as systemd or Kubernetes would."""
    poison = "what time is it"
    deployment.llm.script(
        [
            {"tool_calls": [{"id": "c1", "name": "current_time", "arguments": {}}]},
            {"text": "never"},
        ],
        match=poison,
        mode="by_iteration",
    )
    deployment.llm.script(
        [
            {"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 1, "b": 1}}]},
            {"text": "2"},
        ],
        mode="by_iteration",
    )
    armed = {"CHATWORKER_FAILPOINT": "tool_ran@current_time"}
    workers = [deployment.start_worker(f"w{i}", armed, ready=False) for i in range(2)]
    for worker in workers:
        worker.wait_until_ready()
    poisoned = deployment.chat(f"{poison}?", ["current_time"])
    healthy = [deployment.chat(f"add one and one, #{i}", ["add"]) for i in range(4)]

    kills = 0
    deadline = time.monotonic() + 120
    while deployment.client.get_conversation(poisoned).is_running and time.monotonic() < deadline:
        for index, worker in enumerate(workers):
            if worker.process is not None and worker.process.poll() is not None:
                kills += 1
                workers[index] = deployment.start_worker(f"w{index}-{kills}", armed, ready=False)
        time.sleep(0.2)
    view = deployment.client.get_conversation(poisoned)
    assert view.status == "failed", f"still {view.status} after {kills} kills"
    assert view.error is not None and view.error.startswith("Gave up after 3 attempts")
    assert 3 <= kills <= 5
    for conversation_id in healthy:
        other = deployment.wait(conversation_id, timeout=60)
        assert other.status == "idle", (other.error, [(m.role, m.content) for m in other.messages])
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))


def test_sigterm_mid_tool_releases_the_turn_so_another_worker_resumes_at_once(
    deployment: Deployment,
) -> None:
    # A long lease: resuming "at once" must not come from the lease running out.
    deployment.env.update(
        CHATWORKER_LEASE_TTL_SECONDS="60",
        CHATWORKER_HEARTBEAT_SECONDS="5",
        CHATWORKER_SHUTDOWN_GRACE_SECONDS="1",
        CHATWORKER_TOOL_TIMEOUT_SECONDS="30",
    )
    deployment.llm.script(
        [
            {"tool_calls": [{"id": "c1", "name": "hang", "arguments": {"seconds": 4}}]},
            {"text": "Waited."},
        ],
        mode="by_iteration",
    )
    staying = deployment.start_worker("staying", ready=False)
    leaving = deployment.start_worker("leaving", ready=False)
    staying.wait_until_ready()
    leaving.wait_until_ready()
    staying.pause()  # so the leaving worker is the one that takes the turn
    conversation_id = deployment.chat("Wait a little", ["hang"])
    wait_until(lambda: read_ledger(deployment.ledger), 20, "the tool to start")
    staying.resume()
    stopped_at = time.monotonic()
    leaving.terminate()
    assert leaving.wait_exit(timeout=30) == 0, leaving.log()
    view = deployment.wait(conversation_id, timeout=30)
    took = time.monotonic() - stopped_at
    assert view.status == "idle"
    assert took < 20, f"took {took:.1f} s: as slow as waiting for the 60 s lease"
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "assistant"]
    runs = read_ledger(deployment.ledger)
    assert [r["tool"] for r in runs] == ["hang", "hang"]  # the call in flight ran again
    assert runs[0]["pid"] != runs[1]["pid"]
    assert staying.process is not None and staying.process.poll() is None
    assert_invariants(deployment.database_url, mcp_marker=str(deployment.tmp_path))
