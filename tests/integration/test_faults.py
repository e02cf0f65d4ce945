"""Faults of the outside systems, through a real worker process (`chatworker worker`), a real
PostgreSQL and Redis, the fake LLM over HTTP and the MCP test server with its ledger.

Every fault ends in a documented state, loses nothing and hangs no longer than its timeout; after
each test every conversation is at rest and `tests/invariants.py` finds no violation.

| fault                                      | outcome                                            |
|--------------------------------------------|----------------------------------------------------|
| the worker's Postgres backends terminated  | `idle`, full transcript; the tool ran once         |
|   while it waits on the model (twice)      |   (ledger), each model step was asked once         |
| Redis restarted while turns run (queued    | running turns end `idle`; the worker process lives |
|   doorbells lost, consumer disconnected)   |   on, its dramatiq consumer reconnects by itself   |
| a message submitted while Redis is down    | `enqueued=False`, message stored; a recovery round |
|                                            |   starts it once the worker sees Redis back (or a  |
|                                            |   few seconds on): `idle`, nobody retries          |
| Redis stopped while a reply streams        | the turn still completes and commits; a follower   |
|                                            |   reading the live channel falls back to the       |
|                                            |   committed log: every event once, the answer      |
| LLM 429, then OK                           | one 3 s wait, 2 requests, `idle`                   |
| LLM 500 "Overloaded", then OK              | one 3 s wait, 2 requests, `idle`                   |
| LLM plain 500                              | `failed` at once, 1 request, "LLM call failed      |
|                                            |   (HTTP 500 ...): <the provider's message>"        |
| LLM 503 three times                        | `failed` after 3 requests 3 s then 6 s apart, "LLM |
|                                            |   call failed after 3 attempts (HTTP 503 ...)"     |
| LLM request hangs past its timeout (4 s)   | `failed` "LLM request timed out after 4 s", 1 call |
| MCP server process exits during a call     | error result "... the tool server 'tools' stopped  |
|                                            |   (...)", fed back; restarted for the next call    |
| MCP tool hangs past the tool timeout (1 s) | error result "Tool hang timed out after 1 s"       |
|                                            |   within timeout + slack; server kept              |
| MCP server writes non-UTF-8 bytes on stdout| bytes become U+FFFD; result "ok"; server kept      |
| MCP tool output 200 000 chars, kept cap    | 100 000 chars + "[... output truncated: 100000 of  |
|   100 000, context cap 1000                |   200000 characters shown]" kept whole; the model  |
|                                            |   reads the first 1000 and how to read on          |

Each MCP fault is followed by `add` on the same server and the model's final answer: the turn
goes on to `idle`.

To stay fast, the tests share one worker process (with the tool timeout, output caps and LLM
timeout above) on a database, a `redis-server` of their own and the session's fake LLM; each test
uses its own conversations, LLM scripts (matched by a marker in the user message) and slice of
the ledger and the worker's log.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from sqlalchemy.engine import make_url

from app.client import ConversationView, Delta, EventView, MessageView
from app.testing import services
from app.testing.fake_llm import FakeLLMServer
from app.testing.services import libpq_dsn, wait_until
from tests.deployment import Deployment
from tests.invariants import violations
from tests.servers.mcp_server import EXTRA_TOOLS_ENV, huge_text, read_ledger
from tests.worker_process import REPO, WorkerProcess

REDIS_SERVER = "/usr/bin/redis-server"
TOOL_TIMEOUT_S = 1
MAX_TOOL_OUTPUT = 100_000  # the most of one output kept at all
TOOL_CONTEXT = 1000  # the most of one output the model's context holds
LLM_TIMEOUT_S = 4
SLACK_S = 5  # "no longer than the timeout", measured loosely on a shared machine


# --- a redis-server of our own ------------------------------------------------------------------


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

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

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


# --- the shared deployment ----------------------------------------------------------------------


@dataclass
class Faults:
    deployment: Deployment
    worker: WorkerProcess
    redis: OwnRedis

    @property
    def llm(self) -> FakeLLMServer:
        return self.deployment.llm

    def submit(self, text: str, tools: list[str] | None = None) -> uuid.UUID:
        return self.deployment.chat(text, tools)

    def wait(self, conversation_id: uuid.UUID, timeout: float = 60) -> ConversationView:
        return self.deployment.wait(conversation_id, timeout)

    def ledger(self) -> list[dict[str, Any]]:
        return read_ledger(self.deployment.ledger)

    def log(self) -> str:
        return self.worker.log_path.read_text(errors="replace")

    def assert_at_rest(self) -> None:
        problems = violations(
            self.deployment.database_url, at_rest=True, mcp_marker=str(self.deployment.ledger)
        )
        assert problems == []


def mcp_servers_with_extra_tools(env: dict[str, str]) -> str:
    """The deployment's MCP config, with the opt-in `emit_invalid_utf8` tool registered."""
    config = json.loads(env["CHATWORKER_MCP_SERVERS"])
    config["mcpServers"]["tools"]["env"][EXTRA_TOOLS_ENV] = "emit_invalid_utf8"
    return json.dumps(config)


@pytest.fixture(scope="module")
def shared(
    postgres_server: str,
    migrated_template: str,
    fake_llm_server: FakeLLMServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Faults]:
    fake_llm_server.reset()
    workdir = tmp_path_factory.mktemp("faults")
    name = services.unique_name("db")
    database_url = services.create_database(postgres_server, name, template=migrated_template)
    own_redis = OwnRedis(workdir)
    own_redis.start()
    deployment = Deployment(database_url, own_redis.url, workdir, fake_llm_server)
    deployment.env.update(
        CHATWORKER_TOOL_TIMEOUT_SECONDS=str(TOOL_TIMEOUT_S),
        CHATWORKER_MAX_TOOL_OUTPUT_CHARS=str(MAX_TOOL_OUTPUT),
        CHATWORKER_TOOL_CONTEXT_CHARS=str(TOOL_CONTEXT),
        CHATWORKER_LLM_TIMEOUT_SECONDS=str(LLM_TIMEOUT_S),
        CHATWORKER_MCP_SERVERS=mcp_servers_with_extra_tools(deployment.env),
    )
    worker = WorkerProcess(deployment.env, workdir / "worker.log")
    deployment.workers.append(worker)  # stopped below even if it never gets ready
    try:
        worker.start()
        yield Faults(deployment, worker, own_redis)
    finally:
        deployment.close()  # the worker drains and stops its MCP server
        problems = violations(database_url, at_rest=True, mcp_marker=str(deployment.ledger))
        own_redis.stop()
        services.drop_database(postgres_server, name)
    assert problems == []


# --- helpers ------------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    assert wait_until(predicate, timeout), f"timed out after {timeout} s waiting for {what}"


def roles(messages: list[MessageView]) -> list[str]:
    return [m.role for m in messages]


def tool_results(messages: list[MessageView]) -> dict[str, MessageView]:
    return {m.tool_call_id or "": m for m in messages if m.role == "tool"}


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


def gaps(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(times)]


# --- PostgreSQL ---------------------------------------------------------------------------------


def test_terminated_postgres_backends_mid_turn_the_turn_still_ends_idle_with_each_tool_run_once(
    shared: Faults,
) -> None:
    marker = "pg-terminate"
    shared.llm.script(
        [
            {
                "delay": 2,
                "tool_calls": [
                    {"id": "c_note", "name": "write_note", "arguments": {"text": marker}}
                ],
            },
            {"delay": 2, "text": "Noted, despite the database."},
        ],
        match=marker,
        mode="by_iteration",
    )
    ledger_before = len(shared.ledger())
    conversation_id = shared.submit(f"{marker}: write a note", ["write_note"])
    database_url = shared.deployment.database_url

    def kill_backends_while_the_model_thinks(requests: int) -> int:
        wait_for(lambda: len(shared.llm.requests(marker)) == requests, 20, f"request {requests}")
        shared.deployment.engine.dispose()  # the test's own pool: what is left is the worker's
        time.sleep(0.5)  # inside the 2 s wait, between heartbeats (every 1 s)
        return terminate_backends(database_url)

    killed = [kill_backends_while_the_model_thinks(1), kill_backends_while_the_model_thinks(2)]

    view = shared.wait(conversation_id)
    assert all(killed), f"some terminations hit no worker backend: {killed}"
    assert (view.status, view.error) == ("idle", None)
    assert roles(view.messages) == ["user", "assistant", "tool", "assistant"]
    assert tool_results(view.messages)["c_note"].content == f"Note saved: {marker}"
    assert view.messages[-1].content == "Noted, despite the database."
    assert [run["tool"] for run in shared.ledger()[ledger_before:]] == ["write_note"]
    assert len(shared.llm.requests(marker)) == 2  # no step was lost and asked again
    shared.assert_at_rest()


# --- Redis --------------------------------------------------------------------------------------


def test_a_redis_restart_mid_run_loses_no_turn_and_the_worker_reconnects_by_itself(
    shared: Faults,
) -> None:
    marker = "redis-restart"
    shared.llm.script(
        [
            {
                "delay": 1.5,
                "tool_calls": [{"id": "", "name": "add", "arguments": {"a": 1, "b": 2}}],
            },
            {"delay": 1.5, "text": "done"},
        ],
        match=marker,
        mode="by_iteration",
    )
    log_before = len(shared.log())
    ledger_before = len(shared.ledger())
    client = shared.deployment.client
    running = [shared.submit(f"{marker} {i}: add 1 and 2", ["add"]) for i in range(3)]
    wait_for(lambda: len(shared.llm.requests(marker)) >= 3, 20, "three turns in flight")

    shared.redis.stop()  # no persistence: every queued message is gone with it
    try:
        late = client.create_conversation(tools=["add"])
        submitted = client.submit_message(late, f"{marker} late: submitted while Redis is down")
        assert not submitted.enqueued
        assert "queue unreachable" in (submitted.detail or "")
        stored = client.get_conversation(late)
        assert stored.status == "processing"
        assert [m.role for m in stored.messages] == ["user"]  # the message is kept
        time.sleep(2)  # down for a while: the consumer's fetches fail
    finally:
        shared.redis.start()

    for conversation_id in [*running, late]:
        view = shared.wait(conversation_id)
        assert (view.status, view.error) == ("idle", None), conversation_id
        assert roles(view.messages) == ["user", "assistant", "tool", "assistant"]
        assert view.messages[2].content == "3.0"
    runs = shared.ledger()[ledger_before:]
    assert [run["tool"] for run in runs] == ["add"] * 4  # one per turn: none ran twice
    assert shared.worker.process is not None and shared.worker.process.poll() is None

    # The consumer reconnected by itself: a doorbell sent through the restarted Redis is consumed.
    started = time.monotonic()
    view = shared.wait(shared.submit(f"{marker} after: add 1 and 2", ["add"]), timeout=30)
    assert view.status == "idle"
    assert time.monotonic() - started < 15
    log = shared.log()[log_before:]
    assert "Consumer encountered a connection error" in log, log
    assert "Restarting consumer" in log
    # how the late message's turn started: the worker noticed Redis back, and a recovery round
    # (of the queued turns, or of the silent ones at these short leases) rang it
    assert "the queue lost its doorbells (Redis back" in log
    assert re.search(r"(recovery sweep: re-enqueued|lost doorbell sweep: rang) \d", log), log
    shared.assert_at_rest()


def test_redis_down_during_a_stream_the_turn_commits_and_followers_fall_back_to_the_log(
    shared: Faults,
) -> None:
    marker = "redis-down-stream"
    answer = "Every word of this answer is committed even though the live channel went away."
    shared.llm.script(
        [{"text": answer, "stream": True, "chunks": 30, "chunk_delay": 0.1}], match=marker
    )
    client = shared.deployment.client
    conversation_id = client.create_conversation()
    following = client.follow(conversation_id, timeout=60, poll_interval=0.2)
    client.submit_message(conversation_id, f"{marker}: tell me")
    items: list[Any] = []
    try:
        for item in following:
            items.append(item)
            if isinstance(item, Delta) and shared.redis.running():
                shared.redis.stop()  # mid-reply: the preview and the notices are gone
    finally:
        if not shared.redis.running():
            shared.redis.start()

    assert any(isinstance(item, Delta) for item in items)  # it was streaming when Redis went
    events = [item for item in items if isinstance(item, EventView)]
    assert [e.seq for e in events] == list(range(1, events[-1].seq + 1))
    assert events[-1].type == "status.changed" and events[-1].status == "idle"
    committed = [e.message.content for e in events if e.message and e.message.role == "assistant"]
    assert committed == [answer]
    shared.assert_at_rest()


# --- the LLM ------------------------------------------------------------------------------------


def test_llm_errors_retry_only_transient_ones_with_3_s_then_6_s_waits(shared: Faults) -> None:
    server_error = "The server had an error while processing your request"
    scripts: dict[str, list[dict[str, Any]]] = {
        "llm-429": [{"error": 429, "message": "Rate limit reached for requests"}, {"text": "A"}],
        "llm-overloaded": [{"error": 500, "message": "Overloaded"}, {"text": "B"}],
        "llm-500": [{"error": 500, "message": server_error}, {"text": "never"}],
        "llm-503": [{"error": 503, "message": "Service unavailable"}] * 3 + [{"text": "never"}],
        "llm-hang": [{"hang": 30}, {"text": "never"}],
    }
    for marker, steps in scripts.items():
        shared.llm.script(steps, match=marker)
    ids = {marker: shared.submit(f"{marker}: say something") for marker in scripts}
    views = {marker: shared.wait(conversation_id) for marker, conversation_id in ids.items()}

    def times(marker: str) -> list[float]:
        return [request["received_at"] for request in shared.llm.requests(marker)]

    # 429, then OK: one 3 s wait
    assert (views["llm-429"].status, views["llm-429"].messages[-1].content) == ("idle", "A")
    assert len(times("llm-429")) == 2
    assert 2.8 <= gaps(times("llm-429"))[0] < 3 + SLACK_S
    # 500 whose message says "Overloaded", then OK: transient by its text, one 3 s wait
    overloaded = views["llm-overloaded"]
    assert (overloaded.status, overloaded.messages[-1].content) == ("idle", "B")
    assert len(times("llm-overloaded")) == 2
    assert 2.8 <= gaps(times("llm-overloaded"))[0] < 3 + SLACK_S
    # plain 500: not transient, fails at once with the provider's words
    failed = views["llm-500"]
    assert failed.status == "failed"
    assert len(times("llm-500")) == 1
    assert failed.error is not None and failed.error.startswith("LLM call failed (HTTP 500 ")
    assert server_error in failed.error and "attempts" not in failed.error
    assert failed.updated_at.timestamp() - times("llm-500")[0] < 2.5
    # three 503s: gives up after 3 requests, 3 s then 6 s apart
    exhausted = views["llm-503"]
    assert exhausted.status == "failed"
    assert len(times("llm-503")) == 3
    first_wait, second_wait = gaps(times("llm-503"))
    assert 2.8 <= first_wait < 3 + SLACK_S and 5.8 <= second_wait < 6 + SLACK_S
    assert exhausted.error is not None
    assert exhausted.error.startswith("LLM call failed after 3 attempts (HTTP 503 ")
    assert "Service unavailable" in exhausted.error
    # a request that hangs: the LLM timeout ends it, and a timeout is not retried
    hung = views["llm-hang"]
    assert (hung.status, hung.error) == ("failed", f"LLM request timed out after {LLM_TIMEOUT_S} s")
    assert len(times("llm-hang")) == 1
    assert hung.updated_at.timestamp() - times("llm-hang")[0] < LLM_TIMEOUT_S + SLACK_S
    shared.assert_at_rest()


# --- MCP ----------------------------------------------------------------------------------------

Check = Callable[[MessageView, list[dict[str, Any]]], None]


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


def kept_huge_output() -> str:
    """What the session tool cache keeps of `huge_output(200_000)`: cut at the kept cap."""
    cut = f"\n[... output truncated: {MAX_TOOL_OUTPUT} of 200000 characters shown]"
    return huge_text(200_000)[:MAX_TOOL_OUTPUT] + cut


def _check_huge(result: MessageView, runs: list[dict[str, Any]]) -> None:
    kept = kept_huge_output()
    marker = (
        f"\n[... 1,000 of {len(kept):,} characters shown. The whole output is kept: call "
        'session_cache_get with {"id": "c_fault", "offset": 1000} to read on.]'
    )
    assert not result.is_error
    assert result.content == kept[:TOOL_CONTEXT] + marker


# fault -> (the tool call that causes it, the check of its result and of its ledger entries)
MCP_FAULTS: dict[str, tuple[dict[str, Any], Check]] = {
    "server_crashes": ({"name": "exit_process", "arguments": {"code": 3}}, _check_crash),
    "tool_hangs_past_timeout": ({"name": "hang", "arguments": {"seconds": 30}}, _check_hang),
    "invalid_utf8_on_stdout": ({"name": "emit_invalid_utf8", "arguments": {}}, _check_invalid_utf8),
    "huge_output_truncated": ({"name": "huge_output", "arguments": {"size": 200_000}}, _check_huge),
}


def test_mcp_faults_become_results_fed_back_and_each_turn_ends_idle_within_the_tool_timeout(
    shared: Faults,
) -> None:
    """One conversation per fault, one after the other: the fault's call, then `add` on the same
    server (restarted if it died), then the model's answer."""
    for fault, (call, _) in MCP_FAULTS.items():
        calls = [
            {"id": "c_fault", **call},
            {"id": "c_after", "name": "add", "arguments": {"a": 2, "b": 2}},
        ]
        steps = [{"tool_calls": calls}, {"text": f"{fault}: the tool misbehaved, 2 + 2 = 4."}]
        shared.llm.script(steps, match=f"mcp-{fault}", mode="by_iteration")

    failures = {}
    for fault, (call, _) in MCP_FAULTS.items():
        ledger_before = len(shared.ledger())
        view = shared.wait(shared.submit(f"mcp-{fault}: misbehave", [call["name"], "add"]))
        runs = shared.ledger()[ledger_before:]
        try:
            _check_mcp_fault(shared, fault, view, runs)
        except AssertionError as exc:  # every fault is checked; all failures are reported
            failures[fault] = f"{exc}\n  messages: {view.messages}\n  ledger: {runs}"
    assert failures == {}, "\n".join(f"{fault}: {why}" for fault, why in failures.items())
    shared.assert_at_rest()


def _check_mcp_fault(
    shared: Faults, fault: str, view: ConversationView, runs: list[dict[str, Any]]
) -> None:
    call, check = MCP_FAULTS[fault]
    assert (view.status, view.error) == ("idle", None)
    assert roles(view.messages) == ["user", "assistant", "tool", "tool", "assistant"]
    assert [r["tool"] for r in runs] == [call["name"], "add"]
    results = tool_results(view.messages)
    check(results["c_fault"], runs)
    assert (results["c_after"].content, results["c_after"].is_error) == ("4.0", False)
    # both results were fed back to the model
    second = shared.llm.requests(f"mcp-{fault}")[-1]["body"]["messages"]
    fed_back = {m["tool_call_id"]: m["content"] for m in second if m["role"] == "tool"}
    assert set(fed_back) == {"c_fault", "c_after"}
    assert results["c_fault"].content in fed_back["c_fault"]
    # no call took longer than its timeout: from the tool's start (ledger) to its committed result
    took = (results["c_fault"].created_at - datetime.fromisoformat(runs[0]["time"])).total_seconds()
    assert took < TOOL_TIMEOUT_S + SLACK_S, f"took {took:.1f} s"
    assert view.messages[-1].content == f"{fault}: the tool misbehaved, 2 + 2 = 4."


def test_a_huge_output_is_kept_whole_and_the_model_pages_through_it(shared: Faults) -> None:
    """Through the real worker, MCP server and litellm: the model reads the end of an output
    its context only holds the start of, and lists what is kept, without calling the tool
    again; the kept copy is the output as the server sent it, up to the kept cap."""
    kept = kept_huge_output()
    offset = len(kept) - 300
    steps = [
        {"tool_calls": [{"id": "c_big", "name": "huge_output", "arguments": {"size": 200_000}}]},
        {
            "tool_calls": [
                {
                    "id": "c_end",
                    "name": "session_cache_get",
                    "arguments": {"id": "c_big", "offset": offset},
                },
                {"id": "c_ls", "name": "session_cache_list", "arguments": {}},
            ]
        },
        {"text": "I read it all."},
    ]
    shared.llm.script(steps, match="cache-pages", mode="by_iteration")
    ledger_before = len(shared.ledger())
    view = shared.wait(shared.submit("cache-pages: read the whole thing", ["huge_output"]))
    assert (view.status, view.error) == ("idle", None)
    assert [r["tool"] for r in shared.ledger()[ledger_before:]] == ["huge_output"]  # once
    results = tool_results(view.messages)
    assert results["c_big"].content.startswith(kept[:TOOL_CONTEXT] + "\n[... 1,000 of ")
    total = f"{len(kept):,}"
    assert results["c_end"].content == (
        f"[output of huge_output, id c_big: characters {offset:,}-{total} of {total}]\n"
        f"{kept[offset:]}\n[end of output]"
    )
    listed = json.loads(results["c_ls"].content)["outputs"]
    assert [(e["id"], e["tool"], e["characters"]) for e in listed] == [
        ("c_big", "huge_output", len(kept))
    ]
    with psycopg.connect(libpq_dsn(shared.deployment.database_url)) as conn:
        row = conn.execute(
            "SELECT content, chars, arguments FROM tool_outputs"
            " WHERE conversation_id = %s AND call_id = 'c_big'",
            (view.id,),
        ).fetchone()
    assert row == (kept, len(kept), {"size": 200_000})
    shared.assert_at_rest()


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
