"""The test MCP server driven through the real mcp 2.x client over stdio (a real subprocess).

Cheap checks share one server connection; timeouts, crashes and env isolation get their own.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT, CallToolResult

from tests.servers.mcp_server import (
    LEDGER_ENV,
    NOTES_ENV,
    huge_text,
    read_ledger,
    stdio_params,
)

T = TypeVar("T")

READ_TIMEOUT_S = 10.0
# A dead server must be noticed from the closed pipe, far sooner than the read timeout.
# A dead server is noticed by the pipe's end, not by a timeout (this client has none: it would wait
# for ever); generous, so a loaded machine cannot fail it falsely.
DEAD_SERVER_DETECTION_S = 10.0
HANG_SECONDS = 60
# Inherited by every stdio server (mcp.client.stdio.DEFAULT_INHERITED_ENV_VARS), plus what we
# pass and LC_CTYPE, which Python itself sets when it coerces a C locale.
ALLOWED_ENV = {
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "USER",
    "LC_CTYPE",
    LEDGER_ENV,
    NOTES_ENV,
}

EXPECTED_REQUIRED_PARAMS = {
    "search_docs": ["query"],
    "calculate": ["expression"],
    "add": ["a", "b"],
    "current_time": [],
    "write_note": ["text"],
    "env_keys": [],
    "fail": [],
    "raise_unexpected": [],
    "hang": [],
    "exit_process": [],
    "huge_output": [],
    "slow": [],
}


# --- helpers ------------------------------------------------------------------------------------


def text_of(result: CallToolResult) -> str:
    return "".join(getattr(item, "text", "") for item in result.content)


def with_client(
    scenario: Callable[[Client], Awaitable[T]],
    params: StdioServerParameters,
    read_timeout: float = READ_TIMEOUT_S,
) -> T:
    """Spawn a server, run `scenario` against it on a fresh event loop, and shut it down."""

    async def main() -> T:
        async with Client(params, read_timeout_seconds=read_timeout) as client:
            return await scenario(client)

    return asyncio.run(main())


class SharedServer:
    """One server connection held open by a task on a background event loop.

    anyio requires the client context to be entered and exited by the same task, so a single
    task holds it while tests submit calls to the loop from the test thread.
    """

    def __init__(self, params: StdioServerParameters) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._connected = threading.Event()
        self._stop = asyncio.Event()
        self._client: Client | None = None
        self._holder = asyncio.run_coroutine_threadsafe(self._hold(params), self._loop)
        while not self._connected.wait(0.05):
            if self._holder.done():
                self._holder.result()  # surfaces the spawn/handshake error

    async def _hold(self, params: StdioServerParameters) -> None:
        async with Client(params, read_timeout_seconds=READ_TIMEOUT_S) as client:
            self._client = client
            self._connected.set()
            await self._stop.wait()

    @property
    def client(self) -> Client:
        assert self._client is not None
        return self._client

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(READ_TIMEOUT_S + 5)

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        return self.run(self.client.call_tool(name, arguments or {}))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        try:
            self._holder.result(READ_TIMEOUT_S)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(READ_TIMEOUT_S)
            self._loop.close()


@pytest.fixture(scope="module")
def notes_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("notes") / "notes.txt"


@pytest.fixture(scope="module")
def shared(notes_file: Path) -> Iterator[SharedServer]:
    server = SharedServer(stdio_params(notes_path=notes_file))
    yield server
    server.close()


# --- discovery ----------------------------------------------------------------------------------


def test_list_tools_describes_every_tool_with_a_json_schema(shared: SharedServer) -> None:
    tools = {tool.name: tool for tool in shared.run(shared.client.list_tools()).tools}

    assert set(tools) == set(EXPECTED_REQUIRED_PARAMS)
    for name, required in EXPECTED_REQUIRED_PARAMS.items():
        schema = tools[name].input_schema
        assert tools[name].description, name
        assert schema["type"] == "object", name
        assert sorted(schema.get("required", [])) == required, name
        assert set(required) <= set(schema["properties"]), name
    assert tools["add"].input_schema["properties"]["a"]["type"] == "number"
    assert tools["search_docs"].input_schema["properties"]["limit"]["type"] == "integer"
    assert tools["calculate"].input_schema["properties"]["expression"]["type"] == "string"


# --- useful tools -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected_doc"),
    [
        ("How does Postgres vacuum remove dead tuples?", "postgres-mvcc.md"),
        ("kubernetes readiness probe", "kubernetes-deployments.md"),
        ("redis appendfsync AOF", "redis-persistence.md"),
        ("ETag If-None-Match revalidation", "http-caching.md"),
        ("can I return a used tent for a refund", "northwind-refund-policy.md"),
        ("MCP tools/call JSON-RPC", "mcp-protocol.md"),
        ("congestion window slow start", "tcp-congestion-control.md"),
        ("git rebase reflog", "git-internals.md"),
    ],
)
def test_search_docs_ranks_the_relevant_document_first(
    shared: SharedServer, query: str, expected_doc: str
) -> None:
    result = shared.call("search_docs", {"query": query})

    assert not result.is_error, text_of(result)
    assert text_of(result).startswith(f"1. {expected_doc} ")


def test_search_docs_is_case_insensitive_deterministic_and_limited(shared: SharedServer) -> None:
    lower = text_of(shared.call("search_docs", {"query": "cache snapshot", "limit": 2}))
    upper = text_of(shared.call("search_docs", {"query": "CACHE SNAPSHOT", "limit": 2}))
    again = text_of(shared.call("search_docs", {"query": "cache snapshot", "limit": 2}))

    assert lower == upper == again
    ranked = [line for line in lower.splitlines() if line[:1].isdigit()]
    assert [line.split()[0] for line in ranked] == ["1.", "2."]


def test_search_docs_reports_no_match_as_a_normal_result(shared: SharedServer) -> None:
    result = shared.call("search_docs", {"query": "xylophone zeppelin"})

    assert not result.is_error
    assert "No document matches" in text_of(result)


@pytest.mark.parametrize(
    ("expression", "value"),
    [("2*(3+4)", 14), ("-2**2", -4), ("7/2", 3.5), ("(1+2) * -3", -9), ("2 ** 10 % 1000", 24)],
)
def test_calculate_evaluates_arithmetic(
    shared: SharedServer, expression: str, value: float
) -> None:
    result = shared.call("calculate", {"expression": expression})

    assert not result.is_error, text_of(result)
    assert float(text_of(result)) == value
    assert result.structured_content == {"result": value}


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1/0", "Division by zero"),
        ("2*(", "Invalid expression"),
        ("__import__('os').system('true')", "Unsupported syntax"),
        ("9**9**9", "too large"),
    ],
)
def test_calculate_rejects_bad_input_as_a_tool_error(
    shared: SharedServer, expression: str, message: str
) -> None:
    result = shared.call("calculate", {"expression": expression})

    assert result.is_error
    assert message in text_of(result)


def test_add_returns_the_sum(shared: SharedServer) -> None:
    result = shared.call("add", {"a": 2, "b": 0.5})

    assert not result.is_error
    assert result.structured_content == {"result": 2.5}


def test_current_time_is_iso_8601_in_the_requested_zone(shared: SharedServer) -> None:
    utc = datetime.fromisoformat(text_of(shared.call("current_time")))
    tokyo = datetime.fromisoformat(text_of(shared.call("current_time", {"timezone": "Asia/Tokyo"})))
    unknown = shared.call("current_time", {"timezone": "Mars/Olympus_Mons"})

    assert utc.utcoffset() == timedelta(0)
    assert tokyo.utcoffset() == timedelta(hours=9)
    assert abs(tokyo - utc) < timedelta(seconds=5)
    assert unknown.is_error
    assert "Unknown time zone" in text_of(unknown)


def test_write_note_appends_to_the_notes_file(shared: SharedServer, notes_file: Path) -> None:
    first = shared.call("write_note", {"text": "buy milk"})
    second = shared.call("write_note", {"text": "call the\nplumber"})

    lines = notes_file.read_text().splitlines()
    assert lines[-2:] == ["buy milk", "call the plumber"]
    # The answer is the same however many notes exist (a re-run after a crash reads the same).
    assert text_of(first) == "Note saved: buy milk"
    assert text_of(second) == "Note saved: call the plumber"


def test_huge_output_arrives_complete(shared: SharedServer) -> None:
    result = shared.call("huge_output", {"size": 1_000_000})

    assert not result.is_error
    assert text_of(result) == huge_text(1_000_000)


# --- errors that come back as results -----------------------------------------------------------


def test_tool_error_is_an_error_result_with_the_message(shared: SharedServer) -> None:
    result = shared.call("fail", {"message": "disk on fire"})

    assert result.is_error
    assert text_of(result) == "Error executing tool fail: disk on fire"


def test_unexpected_exception_is_an_error_result_that_hides_the_details(
    shared: SharedServer,
) -> None:
    result = shared.call("raise_unexpected")

    assert result.is_error
    assert text_of(result) == "Error executing tool raise_unexpected"


def test_unknown_tool_is_an_error_result(shared: SharedServer) -> None:
    result = shared.call("no_such_tool", {"x": 1})

    assert result.is_error
    assert text_of(result) == "Unknown tool: no_such_tool"


@pytest.mark.parametrize(
    ("name", "arguments", "bad_param"),
    [
        ("calculate", {}, "expression"),
        ("add", {"a": 1, "b": "not a number"}, "b"),
        ("search_docs", {"query": "redis", "limit": 0}, "limit"),
    ],
)
def test_invalid_arguments_are_an_error_result(
    shared: SharedServer, name: str, arguments: dict[str, Any], bad_param: str
) -> None:
    result = shared.call(name, arguments)

    assert result.is_error
    assert "validation error" in text_of(result)
    assert bad_param in text_of(result)


# --- timeouts, crashes, restarts (own connections) ----------------------------------------------


def test_hanging_tool_times_out_and_the_session_stays_usable() -> None:
    read_timeout = 3.0  # (the quick call after the hang has it too: slack for a loaded machine)

    async def scenario(client: Client) -> tuple[MCPError, float, CallToolResult]:
        started = time.monotonic()
        with pytest.raises(MCPError) as timed_out:
            await client.call_tool("hang", {"seconds": HANG_SECONDS})
        elapsed = time.monotonic() - started
        return timed_out.value, elapsed, await client.call_tool("add", {"a": 1, "b": 1})

    error, elapsed, after = with_client(scenario, stdio_params(), read_timeout=read_timeout)

    assert error.code == REQUEST_TIMEOUT
    assert "timed out" in error.message
    assert read_timeout <= elapsed < HANG_SECONDS / 2  # the read timeout cut it
    assert not after.is_error
    assert after.structured_content == {"result": 2.0}


def test_dead_server_fails_fast_and_a_new_connection_works() -> None:
    async def scenario(client: Client) -> tuple[list[MCPError], float]:
        errors = []
        started = time.monotonic()
        with pytest.raises(MCPError) as died:
            await client.call_tool("exit_process", {"code": 3})
        elapsed = time.monotonic() - started
        errors.append(died.value)
        with pytest.raises(MCPError) as call_after:
            await client.call_tool("add", {"a": 1, "b": 2})
        errors.append(call_after.value)
        with pytest.raises(MCPError) as list_after:
            await client.list_tools()
        errors.append(list_after.value)
        return errors, elapsed

    async def add_once(client: Client) -> CallToolResult:
        return await client.call_tool("add", {"a": 1, "b": 2})

    errors, elapsed = with_client(scenario, stdio_params())
    restarted = with_client(add_once, stdio_params())

    assert [(e.code, e.message) for e in errors] == [(CONNECTION_CLOSED, "Connection closed")] * 3
    assert elapsed < DEAD_SERVER_DETECTION_S
    assert restarted.structured_content == {"result": 3.0}


def test_ledger_records_every_tool_run_including_the_fatal_one(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"

    async def scenario(client: Client) -> None:
        await client.call_tool("add", {"a": 1, "b": 2})
        await client.call_tool("calculate", {"expression": "6*7"})
        await client.call_tool("fail")
        await client.call_tool("raise_unexpected")
        await client.call_tool("search_docs", {"query": "redis"})
        # Never reach a tool body, so they must not be counted as runs.
        await client.call_tool("no_such_tool")
        await client.call_tool("add", {"a": "x", "b": 2})
        with pytest.raises(MCPError):
            await client.call_tool("exit_process", {"code": 0})

    with_client(scenario, stdio_params(ledger_path=ledger))
    entries = read_ledger(ledger)

    assert [entry["tool"] for entry in entries] == [
        "add",
        "calculate",
        "fail",
        "raise_unexpected",
        "search_docs",
        "exit_process",
    ]
    assert entries[0]["arguments"] == {"a": 1.0, "b": 2.0}
    assert entries[4]["arguments"] == {"query": "redis", "limit": 3}
    assert entries[5]["arguments"] == {"code": 0}
    assert len({entry["pid"] for entry in entries}) == 1
    assert entries[0]["pid"] != os.getpid()
    assert all(datetime.fromisoformat(entry["time"]).tzinfo for entry in entries)


def test_read_ledger_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_ledger(tmp_path / "absent.jsonl") == []


def test_server_sees_only_the_environment_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CANARY_SECRET", "do-not-leak")
    params = stdio_params(
        ledger_path=tmp_path / "ledger.jsonl",
        notes_path=tmp_path / "notes.txt",
        extra_env={"CHATWORKER_EXTRA": "1"},
    )

    async def env_keys(client: Client) -> list[str]:
        result = await client.call_tool("env_keys")
        assert result.structured_content is not None
        return list(result.structured_content["result"])

    keys = set(with_client(env_keys, params))

    assert "CANARY_SECRET" not in keys
    assert {LEDGER_ENV, NOTES_ENV, "CHATWORKER_EXTRA", "PATH"} <= keys
    assert (keys & set(os.environ)) - ALLOWED_ENV == set()


def test_server_runs_as_a_file_from_any_directory(tmp_path: Path) -> None:
    # Another cwd proves the docs are found next to the file, not relative to the repo root.
    params = stdio_params(as_file=True).model_copy(update={"cwd": str(tmp_path)})

    async def search(client: Client) -> CallToolResult:
        return await client.call_tool("search_docs", {"query": "postgres vacuum", "limit": 1})

    result = with_client(search, params)

    assert not result.is_error
    assert text_of(result).startswith("1. postgres-mvcc.md ")
