"""A canary secret in the worker's environment never leaks.

The worker runs with canaries: the configured model key `CHATWORKER_LLM_API_KEY=sk-canary-llm-…`,
unrelated secrets (`ANTHROPIC_API_KEY`, `AWS_SECRET_ACCESS_KEY`, `DATABASE_PASSWORD_CANARY`, and
`OPENAI_API_KEY`, which litellm would read if no key were configured) and a password inside
`DATABASE_URL` (the test server trusts local connections, so any password connects). The worker
runs as `chatworker -v worker`: every logger at DEBUG, the most it can log.

| where                           | what must hold                                                |
|---------------------------------|---------------------------------------------------------------|
| (a) every row of every table    | no canary                                                     |
| (b) the worker's log (+ MCP     | no canary, though provider errors echoing them were logged    |
|     server's stderr)            |                                                               |
| (c) a failed turn's error       | readable ("HTTP 401 ... Incorrect API key provided"), no key  |
| (d) requests the LLM received   | bodies: no canary; headers: the configured key only, and only |
|                                 | as `Authorization: Bearer <key>`                              |
| (e) the MCP server's process    | variable names: its configured `env` + the SDK's defaults     |
|                                 | only; values: no canary                                       |
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from app.client import ConversationView
from app.testing.api_process import free_port
from app.testing.fake_llm import FakeLLMServer
from app.testing.services import libpq_dsn
from tests.deployment import Deployment
from tests.integration.test_tracing import Receiver
from tests.invariants import violations
from tests.servers.mcp_server import LEDGER_ENV, NOTES_ENV, read_ledger
from tests.worker_process import REPO, WorkerProcess, mcp_servers_json

TOKEN = secrets.token_hex(8)
LLM_KEY = f"sk-canary-llm-{TOKEN}"
UNRELATED = {
    "ANTHROPIC_API_KEY": f"sk-ant-canary-{TOKEN}",
    "AWS_SECRET_ACCESS_KEY": f"canary-aws-{TOKEN}",
    "DATABASE_PASSWORD_CANARY": f"canary-dbpw-{TOKEN}",
    "OPENAI_API_KEY": f"sk-canary-openai-{TOKEN}",
}
DB_PASSWORD = f"canary-pgpass-{TOKEN}"
CANARIES = {"CHATWORKER_LLM_API_KEY": LLM_KEY, **UNRELATED, "DATABASE_URL password": DB_PASSWORD}
# What the mcp SDK copies into every stdio server it spawns (DEFAULT_INHERITED_ENV_VARS), and
# LC_CTYPE, which Python sets in its own environment when it coerces the C locale.
SDK_DEFAULT_ENV = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}
PYTHON_ENV = {"LC_CTYPE"}
CONFIGURED_MCP_ENV = {LEDGER_ENV, NOTES_ENV}


# `chatworker -v worker`: the worker command with every logger at DEBUG (it passes `--verbose`
# on to dramatiq).
CHATWORKER_VERBOSE = (
    sys.executable, "-m", "app.cli", "-v", "worker", "--processes", "1", "--threads", "2",
)  # fmt: skip


@dataclass
class CommandWorker(WorkerProcess):
    """A worker process started by `command` instead of the plain `chatworker worker`."""

    command: tuple[str, ...] = CHATWORKER_VERBOSE

    def start(self, ready: bool = True, timeout: float = 60) -> CommandWorker:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        if ready:
            self.wait_until_ready(timeout)
        return self


@pytest.fixture
def deployment(
    database_url: str, redis_url: str, tmp_path: Path, fake_llm: FakeLLMServer
) -> Iterator[Deployment]:
    """A deployment whose worker (started by the test) holds every canary."""
    with_password = make_url(database_url).set(password=DB_PASSWORD)
    deployment = Deployment(
        with_password.render_as_string(hide_password=False), redis_url, tmp_path, fake_llm
    )
    deployment.env.update({"CHATWORKER_LLM_API_KEY": LLM_KEY, **UNRELATED})
    # A new interpreter for the MCP server, not a warm fork: /proc shows a forked process the
    # environment it was forked from, and (e) reads the server's environment there.
    notes = tmp_path / "notes.txt"
    deployment.env["CHATWORKER_MCP_SERVERS"] = mcp_servers_json(
        deployment.ledger, notes, warm=False
    )
    yield deployment
    deployment.close()
    assert violations(database_url, at_rest=True, mcp_marker=str(deployment.ledger)) == []


def start_verbose_worker(deployment: Deployment, **extra: str) -> WorkerProcess:
    log_path = deployment.tmp_path / f"worker-{len(deployment.workers)}.log"
    env = {**deployment.env, "CHATWORKER_METRICS_PORT": str(free_port()), **extra}
    worker = CommandWorker(env, log_path)
    deployment.workers.append(worker)  # stopped by the fixture even if it never gets ready
    return worker.start()


# --- where a canary could end up ----------------------------------------------------------------


def leaks(text: str) -> list[str]:
    """The names of the canaries found in `text`."""
    return [name for name, value in CANARIES.items() if value in text]


def database_dump(database_url: str) -> str:
    """Every row of every table of the schema, as text."""
    with psycopg.connect(libpq_dsn(database_url), autocommit=True) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        ).fetchall()
        rows = [
            f"{table}: {row}"
            for (table,) in tables
            for (row,) in conn.execute(f'SELECT t::text FROM "{table}" t').fetchall()  # type: ignore[arg-type]
        ]
    return "\n".join(rows)


def assert_no_canary_in_database_log_or_llm_requests(deployment: Deployment) -> None:
    # (a) the database
    dump = database_dump(deployment.database_url)
    assert "conversations:" in dump and "messages:" in dump  # the dump is not vacuous
    assert leaks(dump) == [], dump
    # (b) the worker's log, the MCP server's stderr included
    log = "".join(w.log_path.read_text(errors="replace") for w in deployment.workers)
    at_debug = "[DEBUG]" in log or '"level": "DEBUG"' in log  # (text or JSON lines)
    assert at_debug, "`chatworker -v worker` must log at DEBUG, the most there is"
    assert leaks(log) == [], [line for line in log.splitlines() if leaks(line)]
    # (c) the metrics every worker serves (its processes', dramatiq's queue metrics)
    for worker in deployment.workers:
        scraped = httpx.get(f"http://127.0.0.1:{worker.env['CHATWORKER_METRICS_PORT']}/metrics")
        assert "chatworker_turns_started_total" in scraped.text  # not vacuous
        assert leaks(scraped.text) == [], scraped.text
    # (d) what the LLM received: the key only in the Authorization header
    requests = deployment.llm.requests()
    assert requests
    for request in requests:
        assert leaks(json.dumps(request["body"])) == []
        for name, value in request["headers"].items():
            if name.lower() == "authorization":
                assert value == f"Bearer {LLM_KEY}"
            else:
                assert leaks(f"{name}: {value}") == [], name


def process_environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}


# --- scenarios ----------------------------------------------------------------------------------


def test_a_tool_turn_leaks_no_canary_and_the_mcp_server_gets_only_its_configured_environment(
    deployment: Deployment,
) -> None:
    deployment.llm.script(
        [
            {
                "tool_calls": [
                    {"id": "c_env", "name": "env_keys", "arguments": {}},
                    {"id": "c_add", "name": "add", "arguments": {"a": 20, "b": 22}},
                ]
            },
            {"text": "The server sees a few variables, and 20 + 22 = 42."},
        ],
        mode="by_iteration",
    )
    receiver = Receiver()  # the worker's traces, over OTLP
    traced = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    worker = start_verbose_worker(deployment, **traced)
    view = deployment.wait(deployment.chat("List the env and add 20 and 22", ["env_keys", "add"]))
    assert (view.status, view.error) == ("idle", None)
    results = {m.tool_call_id: m for m in view.messages if m.role == "tool"}
    assert (results["c_add"].content, results["c_env"].is_error) == ("42.0", False)

    # (e) the MCP server: its names (as the tool reports them) and its values (from /proc)
    names = set((results["c_env"].content or "").splitlines())
    assert names >= CONFIGURED_MCP_ENV
    assert names - CONFIGURED_MCP_ENV - SDK_DEFAULT_ENV - PYTHON_ENV == set(), names
    assert not names & {*UNRELATED, "CHATWORKER_LLM_API_KEY", "DATABASE_URL", "REDIS_URL"}
    (env_run,) = [run for run in read_ledger(deployment.ledger) if run["tool"] == "env_keys"]
    assert worker.process is not None and worker.process.poll() is None  # its server still runs
    environment = process_environment(env_run["pid"])
    assert set(environment) == names - PYTHON_ENV  # /proc shows the environment it was given
    assert leaks("\n".join(environment.values())) == []
    assert_no_canary_in_database_log_or_llm_requests(deployment)
    # (f) the spans it exported (its own and the MCP SDK's), once it has stopped
    worker.stop()
    receiver.close()
    exported = b"".join(receiver.bodies).decode("latin-1")
    assert "execute_tool add" in exported  # not vacuous
    assert leaks(exported) == []


def test_provider_errors_echoing_the_key_fail_the_turn_with_a_readable_error_that_hides_it(
    deployment: Deployment,
) -> None:
    # A 429 that echoes the key and two unrelated secrets (logged before the retry), then the
    # 401 OpenAI sends for a bad key, which quotes the key back.
    echoed = f"{LLM_KEY}, {UNRELATED['ANTHROPIC_API_KEY']}, {UNRELATED['AWS_SECRET_ACCESS_KEY']}"
    deployment.llm.script(
        [
            {"error": 429, "message": f"Rate limit reached for keys {echoed}"},
            {
                "error": 401,
                "message": f"Incorrect API key provided: {LLM_KEY}. You can find your API key "
                "at https://platform.openai.com/account/api-keys.",
            },
        ]
    )
    start_verbose_worker(deployment)
    view: ConversationView = deployment.wait(deployment.chat("Hello?"))

    # (c) the error: readable, and without any canary
    assert view.status == "failed"
    error = view.error or ""
    assert error.startswith("LLM call failed after 2 attempts (HTTP 401 "), error
    assert "Incorrect API key provided: [REDACTED]" in error
    assert leaks(error) == [] and "sk-canary" not in error
    assert len(deployment.llm.requests()) == 2
    log = deployment.workers[0].log_path.read_text(errors="replace")
    assert "LLM call attempt 1 of 3 failed" in log  # the echoing 429 did reach the log
    assert_no_canary_in_database_log_or_llm_requests(deployment)


def test_json_logs_name_the_turn_on_every_line_of_it_and_hold_no_canary(
    deployment: Deployment,
) -> None:
    """`CHATWORKER_LOG_FORMAT=json`: dramatiq's main process, its worker process and the fork
    serving the metrics all write JSON lines; a rate limit that echoes the key is logged (as a
    warning of the turn, with its conversation, turn and worker ids) without it."""
    echoed = f"{LLM_KEY}, {UNRELATED['AWS_SECRET_ACCESS_KEY']}"
    deployment.llm.script(
        [
            {"error": 429, "message": f"Rate limit reached for keys {echoed}"},
            {"tool_calls": [{"id": "c_add", "name": "add", "arguments": {"a": 1, "b": 2}}]},
            {"text": "3"},
        ]
    )
    worker = start_verbose_worker(deployment, CHATWORKER_LOG_FORMAT="json")
    conversation_id = deployment.chat("1 + 2?", ["add"])
    view = deployment.wait(conversation_id)
    assert (view.status, view.error) == ("idle", None)
    turn = deployment.client.current_turn(conversation_id)
    assert turn is not None

    text = worker.log_path.read_text(errors="replace")
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    others = [line for line in text.splitlines() if line and not line.startswith("{")]
    assert all(set(line) >= {"time", "level", "logger", "message"} for line in lines)
    messages = [line["message"] for line in lines]
    assert any("is booting up" in m for m in messages)  # dramatiq's main process
    assert any("Worker process is ready for action" in m for m in messages)  # its child
    assert any("metrics and liveness on" in m for m in messages)  # the fork process
    (retry,) = [line for line in lines if "LLM call attempt 1 of 3 failed" in line["message"]]
    assert retry["level"] == "WARNING"
    assert (retry["conversation_id"], retry["turn_id"]) == (str(conversation_id), str(turn.id))
    assert retry["worker_id"]  # the lease owner
    ran = [line for line in lines if line.get("turn_id") == str(turn.id)]
    assert len(ran) >= 3 and {line["conversation_id"] for line in ran} == {str(conversation_id)}
    # what is not JSON is the MCP test server's own stderr, passed through as it is
    assert all("mcp" in line.lower() or "tools" in line.lower() for line in others), others
    assert_no_canary_in_database_log_or_llm_requests(deployment)
