"""Faults of the outside systems, through real worker processes (`chatworker worker`), a real
PostgreSQL and Redis, the fake LLM over HTTP and the MCP test server with its ledger.

Every fault ends in a documented state, loses nothing and hangs no longer than its timeout; after
each test every conversation is at rest and `tests/invariants.py` finds no violation.

| fault                                      | outcome                                            |
|--------------------------------------------|----------------------------------------------------|
| the worker's Postgres backends terminated  | `idle`, full transcript; each tool ran once        |
|   while the model and a tool are slow      |   (ledger), each model step was asked once         |
| Redis restarted while turns run (queued    | running turns end `idle`; the worker process lives |
|   doorbells lost, consumer disconnected)   |   on, its dramatiq consumer reconnects by itself   |
| a message submitted while Redis is down    | `enqueued=False`, message stored; the recovery     |
|                                            |   sweep starts it: `idle`, nobody retries          |
| LLM 429, then OK                           | one 3 s wait, 2 requests, `idle`                   |
| LLM 500 "Overloaded", then OK              | one 3 s wait, 2 requests, `idle`                   |
| LLM plain 500                              | `failed` at once, 1 request, "LLM call failed      |
|                                            |   (HTTP 500 ...): <the provider's message>"        |
| LLM 503 three times                        | `failed` after 3 requests 3 s then 6 s apart, "LLM |
|                                            |   call failed after 3 attempts (HTTP 503 ...)"     |
| LLM request hangs past its timeout (2 s)   | `failed` "LLM request timed out after 2 s", 1 call |
| MCP server process exits during a call     | error result "... the tool server 'tools' stopped  |
|                                            |   (...)", fed back; restarted for the next call    |
| MCP tool hangs past the tool timeout (1 s) | error result "Tool hang timed out after 1 s"       |
|                                            |   within timeout + slack; server kept              |
| MCP server writes non-UTF-8 bytes on stdout| bytes become U+FFFD; result "ok"; server kept      |
| MCP tool output 200 000 chars, cap 1000    | first 1000 chars + "[... output truncated: 1000 of |
|                                            |   200000 characters shown]"                        |

Each MCP fault is followed by `add` on the same server and the model's final answer: the turn
goes on to `idle`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from sqlalchemy.engine import make_url

from app.client import ConversationView, MessageView
from tests.deployment import Deployment
from tests.invariants import violations
from tests.servers.fake_llm import FakeLLMServer
from tests.servers.mcp_server import EXTRA_TOOLS_ENV, huge_text, read_ledger
from tests.services import libpq_dsn, wait_until
from tests.worker_process import REPO

REDIS_SERVER = "/usr/bin/redis-server"
TOOL_TIMEOUT_S = 1
MAX_TOOL_OUTPUT = 1000
SLACK_S = 5  # "no longer than the timeout", measured loosely on a shared machine


# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture
def deployment(
    database_url: str, redis_url: str, tmp_path: Path, fake_llm: FakeLLMServer
) -> Iterator[Deployment]:
    deployment = Deployment(database_url, redis_url, tmp_path, fake_llm)
    yield deployment
    deployment.close()


def assert_at_rest(deployment: Deployment) -> None:
    """Stop the workers (SIGTERM, drained), then every invariant must hold at rest."""
    for worker in deployment.workers:
        worker.stop()
    assert (
        violations(deployment.database_url, at_rest=True, mcp_marker=str(deployment.ledger)) == []
    )


def submit(deployment: Deployment, text: str, tools: list[str] | None = None) -> uuid.UUID:
    return deployment.chat(text, tools)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    assert wait_until(predicate, timeout), f"timed out after {timeout} s waiting for {what}"


def roles(messages: list[MessageView]) -> list[str]:
    return [m.role for m in messages]


def tool_results(messages: list[MessageView]) -> dict[str, MessageView]:
    return {m.tool_call_id or "": m for m in messages if m.role == "tool"}


def mcp_servers_with_extra_tools(deployment: Deployment) -> str:
    """The deployment's MCP config, with the opt-in `emit_invalid_utf8` tool registered."""
    config = json.loads(deployment.env["CHATWORKER_MCP_SERVERS"])
    config["mcpServers"]["tools"]["env"][EXTRA_TOOLS_ENV] = "emit_invalid_utf8"
    return json.dumps(config)


def terminate_backends(database_url: str) -> int:
    """pg_terminate_backend every other session of this test's own database; how many."""
    name = make_url(database_url).database
    with psycopg.connect(libpq_dsn(database_url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return sum(1 for (terminated,) in rows if terminated)


def request_times(llm: FakeLLMServer, match: str) -> list[float]:
    return [r["received_at"] for r in llm.requests(match)]


def gaps(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(times)]


# --- PostgreSQL ---------------------------------------------------------------------------------


def test_terminated_postgres_backends_mid_turn_the_turn_still_ends_idle_with_each_tool_run_once(
    deployment: Deployment,
) -> None:
    deployment.llm.script(
        [
            {
                "delay": 2,
                "tool_calls": [
                    {"id": "c_note", "name": "write_note", "arguments": {"text": "once"}},
                    {"id": "c_slow", "name": "hang", "arguments": {"seconds": 2}},
                ],
            },
            {"delay": 2, "text": "Noted, after a slow tool."},
        ],
        mode="by_iteration",
    )
    deployment.start_worker()
    conversation_id = submit(deployment, "Write a note, then wait", ["write_note", "hang"])
    database_url = deployment.database_url

    def kill_backends_now() -> int:
        deployment.engine.dispose()  # the test's own pool: what is left belongs to the worker
        time.sleep(0.5)  # well inside the wait, between two heartbeats' queries
        return terminate_backends(database_url)

    killed = []
    # 1. while the worker waits on the first (slow) model answer
    wait_for(lambda: len(deployment.llm.requests()) == 1, 20, "the first LLM request")
    killed.append(kill_backends_now())
    # 2. while the slow tool runs
    wait_for(lambda: deployment.tool_runs()["hang"] == 1, 20, "the slow tool to start")
    killed.append(kill_backends_now())
    # 3. while the worker waits on the final (slow) model answer
    wait_for(lambda: len(deployment.llm.requests()) == 2, 20, "the second LLM request")
    killed.append(kill_backends_now())

    view = deployment.wait(conversation_id, timeout=60)
    assert all(killed), f"some terminations hit no worker backend: {killed}"
    assert (view.status, view.error) == ("idle", None)
    assert roles(view.messages) == ["user", "assistant", "tool", "tool", "assistant"]
    results = tool_results(view.messages)
    assert results["c_note"].content == "Note saved: once"
    assert results["c_slow"].content == "Slept 2.0 seconds."
    assert view.messages[-1].content == "Noted, after a slow tool."
    assert deployment.tool_runs() == Counter({"write_note": 1, "hang": 1})
    assert len(deployment.llm.requests()) == 2  # no step was lost and asked again
    assert_at_rest(deployment)


# --- Redis --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class OwnRedis:
    """A private `redis-server` (no persistence) on a free port, which a test may restart."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.workdir / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_for(self.answers, 10, f"redis-server on port {self.port}")

    def answers(self) -> bool:
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def test_a_redis_restart_mid_run_loses_no_turn_and_the_worker_reconnects_by_itself(
    database_url: str, own_redis: OwnRedis, tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    deployment = Deployment(database_url, own_redis.url, tmp_path, fake_llm)
    try:
        _redis_restart_scenario(deployment, own_redis)
    finally:
        deployment.close()


def _redis_restart_scenario(deployment: Deployment, own_redis: OwnRedis) -> None:
    deployment.llm.script(
        [
            {
                "delay": 1.5,
                "tool_calls": [{"id": "", "name": "add", "arguments": {"a": 1, "b": 2}}],
            },
            {"delay": 1.5, "text": "done"},
        ],
        mode="by_iteration",
    )
    worker = deployment.start_worker()
    running = [submit(deployment, f"Turn {i}: add 1 and 2", ["add"]) for i in range(3)]
    wait_for(lambda: len(deployment.llm.requests()) >= 3, 20, "three turns in flight")

    own_redis.stop()  # no persistence: every queued message is gone with it
    down_at = time.monotonic()
    late = deployment.client.create_conversation(tools=["add"])
    submitted = deployment.client.submit_message(late, "Submitted while Redis is down")
    assert not submitted.enqueued
    assert "queue unreachable" in (submitted.detail or "")
    stored = deployment.client.get_conversation(late)
    assert stored.status == "processing"
    assert [m.content for m in stored.messages] == ["Submitted while Redis is down"]
    time.sleep(2)  # down for a while: the consumer's next fetch fails
    own_redis.start()
    down_for = time.monotonic() - down_at

    for conversation_id in [*running, late]:
        view = deployment.wait(conversation_id, timeout=60)
        assert (view.status, view.error) == ("idle", None), conversation_id
        assert roles(view.messages) == ["user", "assistant", "tool", "assistant"]
        assert view.messages[2].content == "3.0"
    assert deployment.tool_runs() == Counter({"add": 4})  # one per turn: none ran twice
    assert worker.process is not None and worker.process.poll() is None, worker.log()

    # The consumer reconnected by itself: a doorbell sent through the restarted Redis is consumed.
    started = time.monotonic()
    after = submit(deployment, "After the restart", ["add"])
    view = deployment.wait(after, timeout=30)
    assert view.status == "idle"
    assert time.monotonic() - started < 15
    log = worker.log_path.read_text(errors="replace")
    assert "Consumer encountered a connection error" in log, log[-3000:]
    assert "Restarting consumer" in log
    print(f"Redis down for {down_for:.1f} s; worker log:\n{log[-3000:]}")
    assert_at_rest(deployment)


# --- the LLM ------------------------------------------------------------------------------------


def test_llm_errors_retry_only_transient_ones_with_3_s_then_6_s_waits(
    deployment: Deployment,
) -> None:
    deployment.env["CHATWORKER_LLM_TIMEOUT_SECONDS"] = "2"
    server_error = "The server had an error while processing your request"
    scripts: dict[str, list[dict[str, Any]]] = {
        "case-429": [{"error": 429, "message": "Rate limit reached for requests"}, {"text": "A"}],
        "case-overloaded": [{"error": 500, "message": "Overloaded"}, {"text": "B"}],
        "case-500": [{"error": 500, "message": server_error}, {"text": "never"}],
        "case-503": [{"error": 503, "message": "Service unavailable"}] * 3 + [{"text": "never"}],
        "case-hang": [{"hang": 30}, {"text": "never"}],
    }
    for marker, steps in scripts.items():
        deployment.llm.script(steps, match=marker)
    deployment.start_worker()
    ids = {marker: submit(deployment, f"{marker}: say something") for marker in scripts}
    views = {marker: deployment.wait(cid, timeout=60) for marker, cid in ids.items()}

    def times(marker: str) -> list[float]:
        return request_times(deployment.llm, marker)

    # 429, then OK: one 3 s wait
    assert (views["case-429"].status, views["case-429"].messages[-1].content) == ("idle", "A")
    assert len(times("case-429")) == 2
    assert 2.8 <= gaps(times("case-429"))[0] < 3 + SLACK_S
    # 500 whose message says "Overloaded", then OK: transient by its text, one 3 s wait
    assert (views["case-overloaded"].status, views["case-overloaded"].messages[-1].content) == (
        "idle",
        "B",
    )
    assert len(times("case-overloaded")) == 2
    assert 2.8 <= gaps(times("case-overloaded"))[0] < 3 + SLACK_S
    # plain 500: not transient, fails at once with the provider's words
    failed = views["case-500"]
    assert failed.status == "failed"
    assert len(times("case-500")) == 1
    assert failed.error is not None and failed.error.startswith("LLM call failed (HTTP 500 ")
    assert server_error in failed.error and "attempts" not in failed.error
    assert failed.updated_at.timestamp() - times("case-500")[0] < 2.5
    # three 503s: gives up after 3 requests, 3 s then 6 s apart
    exhausted = views["case-503"]
    assert exhausted.status == "failed"
    assert len(times("case-503")) == 3
    first_wait, second_wait = gaps(times("case-503"))
    assert 2.8 <= first_wait < 3 + SLACK_S and 5.8 <= second_wait < 6 + SLACK_S
    assert exhausted.error is not None
    assert exhausted.error.startswith("LLM call failed after 3 attempts (HTTP 503 ")
    assert "Service unavailable" in exhausted.error
    # a request that hangs: the LLM timeout (2 s) ends it, and a timeout is not retried
    hung = views["case-hang"]
    assert (hung.status, hung.error) == ("failed", "LLM request timed out after 2 s")
    assert len(times("case-hang")) == 1
    assert hung.updated_at.timestamp() - times("case-hang")[0] < 2 + SLACK_S
    assert all(roles(view.messages)[0] == "user" for view in views.values())
    assert_at_rest(deployment)


# --- MCP ----------------------------------------------------------------------------------------


def _check_crash(result: MessageView, runs: list[dict[str, Any]]) -> None:
    assert result.is_error
    assert (result.content or "").startswith(
        "Tool exit_process failed: the tool server 'tools' stopped ("
    )
    assert runs[1]["pid"] != runs[0]["pid"], "the crashed server was restarted for `add`"


def _check_hang(result: MessageView, runs: list[dict[str, Any]]) -> None:
    assert result.is_error
    assert result.content == f"Tool hang timed out after {TOOL_TIMEOUT_S} s"
    assert runs[1]["pid"] == runs[0]["pid"], "a timed-out call does not restart the server"


def _check_invalid_utf8(result: MessageView, runs: list[dict[str, Any]]) -> None:
    assert (result.content, result.is_error) == ("ok", False)
    assert runs[1]["pid"] == runs[0]["pid"], "bad bytes on stdout do not kill the connection"


def _check_huge(result: MessageView, runs: list[dict[str, Any]]) -> None:
    marker = f"\n[... output truncated: {MAX_TOOL_OUTPUT} of 200000 characters shown]"
    assert not result.is_error
    assert result.content == huge_text(200_000)[:MAX_TOOL_OUTPUT] + marker


# fault -> (the tool call that causes it, the check of its result and its ledger entries)
MCP_FAULTS: dict[
    str, tuple[dict[str, Any], Callable[[MessageView, list[dict[str, Any]]], None]]
] = {
    "server_crashes": ({"name": "exit_process", "arguments": {"code": 3}}, _check_crash),
    "tool_hangs_past_timeout": ({"name": "hang", "arguments": {"seconds": 30}}, _check_hang),
    "invalid_utf8_on_stdout": ({"name": "emit_invalid_utf8", "arguments": {}}, _check_invalid_utf8),
    "huge_output_truncated": ({"name": "huge_output", "arguments": {"size": 200_000}}, _check_huge),
}


def test_mcp_faults_become_results_fed_back_and_each_turn_ends_idle_within_the_tool_timeout(
    deployment: Deployment,
) -> None:
    """One worker, one conversation per fault, one after the other: the fault's call, then
    `add` on the same server (restarted if it died), then the model's answer."""
    deployment.env["CHATWORKER_TOOL_TIMEOUT_SECONDS"] = str(TOOL_TIMEOUT_S)
    deployment.env["CHATWORKER_MAX_TOOL_OUTPUT_CHARS"] = str(MAX_TOOL_OUTPUT)
    deployment.env["CHATWORKER_MCP_SERVERS"] = mcp_servers_with_extra_tools(deployment)
    for fault, (call, _) in MCP_FAULTS.items():
        calls = [
            {"id": "c_fault", **call},
            {"id": "c_after", "name": "add", "arguments": {"a": 2, "b": 2}},
        ]
        steps = [{"tool_calls": calls}, {"text": f"{fault}: the tool misbehaved, 2 + 2 = 4."}]
        deployment.llm.script(steps, match=f"Fault {fault}", mode="by_iteration")
    deployment.start_worker()

    failures = {}
    for fault, (call, _) in MCP_FAULTS.items():
        ledger_before = len(read_ledger(deployment.ledger))
        view = deployment.wait(submit(deployment, f"Fault {fault}", [call["name"], "add"]))
        runs = read_ledger(deployment.ledger)[ledger_before:]
        try:
            _check_mcp_fault(deployment, fault, view, runs)
        except AssertionError as exc:  # every fault is checked; all failures are reported
            failures[fault] = f"{exc}\n  messages: {view.messages}\n  ledger: {runs}"
    assert failures == {}, "\n".join(f"{fault}: {why}" for fault, why in failures.items())
    assert_at_rest(deployment)


def _check_mcp_fault(
    deployment: Deployment, fault: str, view: ConversationView, runs: list[dict[str, Any]]
) -> None:
    call, check = MCP_FAULTS[fault]
    assert (view.status, view.error) == ("idle", None)
    assert roles(view.messages) == ["user", "assistant", "tool", "tool", "assistant"]
    assert [r["tool"] for r in runs] == [call["name"], "add"]
    results = tool_results(view.messages)
    check(results["c_fault"], runs)
    assert (results["c_after"].content, results["c_after"].is_error) == ("4.0", False)
    # both results were fed back to the model
    second = deployment.llm.requests(f"Fault {fault}")[-1]["body"]["messages"]
    fed_back = {m["tool_call_id"]: m["content"] for m in second if m["role"] == "tool"}
    assert set(fed_back) == {"c_fault", "c_after"}
    assert results["c_fault"].content in fed_back["c_fault"]
    # no call took longer than its timeout: from the tool's start (ledger) to its committed result
    took = (results["c_fault"].created_at - datetime.fromisoformat(runs[0]["time"])).total_seconds()
    assert took < TOOL_TIMEOUT_S + SLACK_S, f"took {took:.1f} s"
    assert view.messages[-1].content == f"{fault}: the tool misbehaved, 2 + 2 = 4."


def test_the_opt_in_tool_is_registered_only_when_named_in_its_variable() -> None:
    """`emit_invalid_utf8` is registered only through MCP_EXTRA_TOOLS: other suites pin the
    default tool set."""
    from tests.servers.mcp_server import server

    default = {tool.name for tool in asyncio.run(server.list_tools())}
    probe = (
        "import asyncio, json, tests.servers.mcp_server as m;"
        "print(json.dumps(sorted(t.name for t in asyncio.run(m.server.list_tools()))))"
    )
    env = {"PATH": "/usr/bin:/bin", EXTRA_TOOLS_ENV: "emit_invalid_utf8"}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "emit_invalid_utf8" not in default
    assert set(json.loads(out)) == default | {"emit_invalid_utf8"}
