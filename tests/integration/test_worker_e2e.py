"""End to end through real processes: a dramatiq worker on Redis, Postgres, the fake LLM over HTTP,
and the MCP test server as the worker's subprocess (its ledger counts every real tool run).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.testing.fake_llm import FakeLLMServer
from app.worker.host import START_FAILED
from tests.deployment import Deployment
from tests.servers.mcp_server import read_ledger
from tests.worker_process import FAKE_KEY, REPO, WorkerProcess, worker_environment


@pytest.fixture
def deployment(
    database_url: str, redis_url: str, tmp_path: Path, fake_llm: FakeLLMServer
) -> Iterator[Deployment]:
    deployment = Deployment(database_url, redis_url, tmp_path, fake_llm)
    yield deployment
    deployment.close()


def test_a_turn_with_two_tool_calls_through_a_real_worker(deployment: Deployment) -> None:
    deployment.llm.script(
        [
            {
                "tool_calls": [
                    {"id": "call_add", "name": "add", "arguments": {"a": 2, "b": 3}},
                    {"id": "call_doc", "name": "search_docs", "arguments": {"query": "refund"}},
                ]
            },
            {"text": "2 + 3 = 5, and refunds take 30 days."},
        ],
        mode="by_iteration",
    )
    deployment.start_worker()
    conversation_id = deployment.chat(
        "Add 2 and 3, then find the refund policy", ["add", "search_docs"]
    )
    view = deployment.wait(conversation_id)
    assert (view.status, view.error, view.iterations) == ("idle", None, 2)
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [m.tool_call_id for m in view.messages[2:4]] == ["call_add", "call_doc"]
    assert view.messages[2].content == "5.0" and not view.messages[2].is_error
    assert "northwind-refund-policy.md" in (view.messages[3].content or "")
    assert view.messages[-1].content == "2 + 3 = 5, and refunds take 30 days."
    assert deployment.tool_runs() == Counter({"add": 1, "search_docs": 1})
    first, second = deployment.llm.requests()
    offered = {t["function"]["name"] for t in first["body"]["tools"]}
    assert offered == {
        "add",
        "search_docs",
        "agent_clarify",
    }  # (the session cache's readers come once an output is cut short)
    assert first["body"]["prompt_cache_key"] == str(conversation_id)  # the prompt cache's key
    assert [m["role"] for m in second["body"]["messages"]][-2:] == ["tool", "tool"]
    headers = {k.lower(): v for k, v in first["headers"].items()}
    assert headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert view.total_tokens > 0


def test_the_simple_path_makes_one_call_without_tools(deployment: Deployment) -> None:
    deployment.llm.script([{"text": "Hello!"}])
    deployment.start_worker()
    view = deployment.wait(deployment.chat("Hi"))
    assert (view.status, [m.role for m in view.messages]) == ("idle", ["user", "assistant"])
    (request,) = deployment.llm.requests()
    assert "tools" not in request["body"]
    assert deployment.tool_runs() == Counter()


def test_the_iteration_cap_through_a_real_worker(deployment: Deployment) -> None:
    always_add = {"tool_calls": [{"id": "", "name": "add", "arguments": {"a": 1, "b": 1}}]}
    deployment.llm.script([], default=always_add)
    deployment.start_worker()
    view = deployment.wait(deployment.chat("Loop forever", ["add"]))
    assert (view.status, view.error, view.iterations) == (
        "failed",
        "Max tool iterations reached",
        20,
    )
    assert len(deployment.llm.requests()) == 20
    assert deployment.tool_runs() == Counter({"add": 20})
    ids = [call["id"] for m in view.messages for call in m.tool_calls]
    assert len(set(ids)) == 20


def test_a_killed_worker_s_turn_is_finished_by_another_without_anyone_retrying(
    deployment: Deployment,
) -> None:
    # The first LLM answer takes 3 s: long enough to SIGKILL the worker while it waits.
    deployment.llm.script(
        [
            {
                "delay": 3,
                "tool_calls": [{"id": "c1", "name": "write_note", "arguments": {"text": "x"}}],
            },
            {"text": "Noted."},
        ],
        mode="by_iteration",
    )
    first = deployment.start_worker("first")
    conversation_id = deployment.chat("Write a note", ["write_note"])
    deadline = time.monotonic() + 20
    while not deployment.llm.requests() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert deployment.llm.requests(), first.log()
    first.kill()
    deployment.start_worker("second")
    view = deployment.wait(conversation_id, timeout=60)
    assert view.status == "idle", view.error
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "assistant"]
    assert deployment.tool_runs() == Counter({"write_note": 1})
    # the dead worker's model call was repeated by the second worker: 2 first-step requests
    steps = [
        json.dumps(r["body"]["messages"]).count('"assistant"') for r in deployment.llm.requests()
    ]
    assert steps.count(0) == 2 and steps.count(1) == 1


def test_tool_failures_are_fed_back_and_the_turn_goes_on(deployment: Deployment) -> None:
    deployment.env["CHATWORKER_TOOL_TIMEOUT_SECONDS"] = "1"
    deployment.llm.script(
        [
            {
                "tool_calls": [
                    {"id": "c_fail", "name": "fail", "arguments": {"message": "disk full"}},
                    {"id": "c_hang", "name": "hang", "arguments": {"seconds": 30}},
                    {"id": "c_exit", "name": "exit_process", "arguments": {}},
                    {"id": "c_bad", "name": "add", "arguments": '{"a": 1,'},
                    {"id": "c_deny", "name": "write_note", "arguments": {"text": "no"}},
                    {"id": "c_add", "name": "add", "arguments": {"a": 1, "b": 1}},
                ]
            },
            {"text": "Some tools failed, but 1 + 1 = 2."},
        ],
        mode="by_iteration",
    )
    deployment.start_worker()
    allowed = ["fail", "hang", "exit_process", "add"]
    view = deployment.wait(deployment.chat("Try everything", allowed))
    assert view.status == "idle", view.error
    results = {m.tool_call_id: m for m in view.messages if m.role == "tool"}
    assert all(results[i].is_error for i in ("c_fail", "c_hang", "c_exit", "c_bad", "c_deny"))
    assert "disk full" in (results["c_fail"].content or "")
    assert "timed out after 1 s" in (results["c_hang"].content or "")
    assert "stopped" in (results["c_exit"].content or "")
    assert "not valid JSON" in (results["c_bad"].content or "")
    assert "not allowed" in (results["c_deny"].content or "")
    assert (results["c_add"].content, results["c_add"].is_error) == ("2.0", False)
    runs = read_ledger(deployment.ledger)
    assert [r["tool"] for r in runs] == ["fail", "hang", "exit_process", "add"]
    assert runs[-1]["pid"] != runs[0]["pid"]  # the crashed server was restarted for `add`
    assert view.messages[-1].content == "Some tools failed, but 1 + 1 = 2."


def test_arguments_the_tool_s_schema_refuses_go_back_to_the_model_and_never_reach_the_tool(
    deployment: Deployment,
) -> None:
    deployment.llm.script(
        [
            {
                "tool_calls": [
                    {"id": "c_type", "name": "add", "arguments": {"a": "one", "b": 2}},
                    {"id": "c_missing", "name": "add", "arguments": {"a": 1}},
                    {"id": "c_good", "name": "add", "arguments": {"a": 1, "b": 2}},
                ]
            },
            {"text": "1 + 2 = 3."},
        ],
        mode="by_iteration",
    )
    deployment.start_worker()
    view = deployment.wait(deployment.chat("Add things", ["add"]))
    assert view.status == "idle", view.error
    results = {m.tool_call_id: m for m in view.messages if m.role == "tool"}
    assert results["c_type"].is_error and results["c_missing"].is_error
    assert "Invalid arguments for add at `a`: 'one' is not of type 'number'" in (
        results["c_type"].content or ""
    )
    assert "'b' is a required property" in (results["c_missing"].content or "")
    assert (results["c_good"].content, results["c_good"].is_error) == ("3.0", False)
    assert deployment.tool_runs() == Counter({"add": 1})  # only the good call reached the server
    second = deployment.llm.requests()[1]["body"]["messages"]
    assert any("'b' is a required property" in str(m.get("content")) for m in second)


def test_two_workers_given_the_same_job_run_it_once(deployment: Deployment) -> None:
    deployment.llm.script(
        [
            {
                "delay": 1,
                "tool_calls": [{"id": "c1", "name": "write_note", "arguments": {"text": "once"}}],
            },
            {"text": "Written once."},
        ],
        mode="by_iteration",
    )
    first = deployment.start_worker("a")
    second = deployment.start_worker("b")
    conversation_id = deployment.chat("Write one note", ["write_note"])
    # The same doorbell delivered again, until each worker has taken one (the queue, not the
    # test, picks the worker): each logs the outcome of its run of the conversation.
    deadline = time.monotonic() + 60
    while not all(ran(worker, conversation_id) for worker in (first, second)):
        assert time.monotonic() < deadline, "a worker never took the doorbell"
        deployment.ring(conversation_id)
        time.sleep(0.5)
    view = deployment.wait(conversation_id)
    assert view.status == "idle"
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "assistant"]
    assert deployment.tool_runs() == Counter({"write_note": 1})


def ran(worker: WorkerProcess, conversation_id: object) -> bool:
    """The worker's host logged the outcome of a run of the conversation (idle, not_claimed)."""
    return f"conversation {conversation_id}: " in worker.log_path.read_text(errors="replace")


def test_the_cli_submits_and_follows_a_turn(deployment: Deployment) -> None:
    import subprocess
    import sys

    deployment.llm.script([{"text": "Hello from the worker."}])
    deployment.start_worker()
    env = {**deployment.env}

    def chatworker(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", *args],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    submitted = chatworker("submit", "Hi there")
    assert submitted.returncode == 0, submitted.stderr
    conversation_id = submitted.stdout.split()[1]
    followed = chatworker("status", conversation_id, "--follow")
    assert followed.returncode == 0, followed.stderr
    assert "  user: Hi there" in followed.stdout
    assert "  assistant: Hello from the worker." in followed.stdout
    assert followed.stdout.rstrip().endswith("[idle]")
    as_json = json.loads(chatworker("status", conversation_id, "--json").stdout)
    assert as_json["status"] == "idle" and len(as_json["messages"]) == 2


def test_the_worker_command_needs_redis(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "worker"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "REDIS_URL is not set" in result.stderr


def test_a_worker_whose_host_cannot_start_exits_instead_of_taking_jobs(
    empty_database_url: str, redis_url: str, tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    """An unmigrated database: publishing the tool catalogue fails, so the host cannot start.
    The process must end with its own exit code (for a supervisor to restart it and an operator
    to see why), not stay up consuming doorbells it cannot answer."""
    env = worker_environment(
        empty_database_url, redis_url, fake_llm.api_base, tmp_path / "l.jsonl", tmp_path / "n"
    )
    worker = WorkerProcess(env, tmp_path / "worker.log").start(ready=False)
    try:
        code = worker.wait_exit(timeout=90)
        assert code == START_FAILED, f"exit code {code}\n{worker.log()}"
        assert "the worker host failed to start" in worker.log()
        assert 'relation "tool_catalog" does not exist' in worker.log()
    finally:
        worker.kill()
