"""`McpToolProvider` against the real test MCP server: stdio subprocesses, and streamable HTTP
served in-process by uvicorn.

Every scenario runs on its own event loop (`asyncio.run`) and closes its provider, so no server
outlives a test; the ledger (one JSON line per tool run, with the server's pid) is the witness.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import shlex
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvicorn
from mcp import Client
from mcp.types import Tool
from starlette.types import Receive, Scope, Send

from app.config import McpServerConfig
from app.worker.mcp import McpToolProvider, expose_tools
from app.worker.ports import CallRef, ToolResult
from tests.servers.mcp_server import (
    CHART_PNG,
    EXTRA_TOOLS_ENV,
    LEDGER_ENV,
    REPO_ROOT,
    REPORT_PDF,
    SERVER_MODULE,
    huge_text,
    read_ledger,
    stdio_params,
)
from tests.servers.mcp_server import server as test_server

T = TypeVar("T")

SCENARIO_TIMEOUT_S = 60.0
# A cancelled call must end at once for the caller; the server hears of it just as fast, but gets
# slack for a loaded machine.
CANCEL_RETURNS_WITHIN_S = 2.0
SERVER_STOPS_WITHIN_S = 5.0
# A server started while the machine runs the rest of the suite may take this long to answer.
SERVER_STARTS_WITHIN_S = 60.0
# A bound on a wait that has a slow alternative sits halfway to it, so a loaded machine cannot
# fail it falsely: a timed-out call against the 60 s it would hang for, 20 concurrent 0.5 s calls
# against the 10 s they would take one after another.
HANG_SECONDS = 60
HALFWAY_TO_A_HANG_S = HANG_SECONDS / 2
TOOL_NAMES = {
    "search_docs",
    "calculate",
    "add",
    "current_time",
    "write_note",
    "env_keys",
    "fail",
    "raise_unexpected",
    "hang",
    "exit_process",
    "huge_output",
    "slow",
}


def stdio_server(name: str, ledger: Path, **overrides: Any) -> McpServerConfig:
    fields: dict[str, Any] = {
        "name": name,
        "command": sys.executable,
        "args": ("-m", SERVER_MODULE),
        "env": {LEDGER_ENV: str(ledger)},
        "cwd": str(REPO_ROOT),
    }
    return McpServerConfig(**(fields | overrides))


def counted_server(name: str, ledger: Path, starts: Path, **overrides: Any) -> McpServerConfig:
    """`stdio_server`, started through a shell that first notes each start in `starts`."""
    plain = stdio_server(name, ledger, **overrides)
    script = f'echo start >> "{starts}"; exec {shlex.join([plain.command, *plain.args])}'
    return stdio_server(
        name, ledger, **(overrides | {"command": "/bin/sh", "args": ("-c", script)})
    )


def count_starts(starts: Path) -> int:
    return len(starts.read_text().splitlines()) if starts.exists() else 0


def with_provider(
    servers: list[McpServerConfig],
    scenario: Callable[[McpToolProvider], Awaitable[T]],
    **options: Any,
) -> T:
    """Run `scenario` against a fresh provider on a fresh event loop, then close the provider."""

    async def main() -> T:
        provider = McpToolProvider(servers, **({"call_timeout": 10.0} | options))
        try:
            return await asyncio.wait_for(scenario(provider), SCENARIO_TIMEOUT_S)
        finally:
            await provider.close()

    return asyncio.run(main())


def pids(ledger: Path) -> list[int]:
    return [entry["pid"] for entry in read_ledger(ledger)]


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def wait_for_ledger(
    ledger: Path, tool: str, count: int = 1, timeout: float = SERVER_STARTS_WITHIN_S
) -> list[dict[str, Any]]:
    """The ledger's entries for `tool`, once there are at least `count` of them (by default as
    long as a server may take to start on a loaded machine: a wait for a signal, not a bound)."""
    deadline = time.monotonic() + timeout
    while len(found := [e for e in read_ledger(ledger) if e["tool"] == tool]) < count:
        assert time.monotonic() < deadline, f"{tool!r} not in the ledger {count}x after {timeout} s"
        await asyncio.sleep(0.02)
    return found


async def cancel_and_wait(task: asyncio.Task[Any]) -> float:
    """Cancel `task`, check it ends cancelled, and return how long that took."""
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    return time.monotonic() - started


def ok(content: str) -> ToolResult:
    return ToolResult(content=content, is_error=False)


def error(content: str) -> ToolResult:
    return ToolResult(content=content, is_error=True)


# --- definitions --------------------------------------------------------------------------------


def test_definitions_list_every_tool_with_its_schema_in_function_format(tmp_path: Path) -> None:
    async def scenario(tools: McpToolProvider) -> dict[str, Any]:
        return {definition.name: definition for definition in await tools.definitions()}

    definitions = with_provider([stdio_server("tools", tmp_path / "ledger")], scenario)

    assert set(definitions) == TOOL_NAMES
    add = definitions["add"]
    assert (add.server, add.original_name) == ("tools", "add")
    assert add.as_function_tool() == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers and return the sum.",
            "parameters": add.input_schema,
        },
    }
    assert add.input_schema["type"] == "object"
    assert sorted(add.input_schema["required"]) == ["a", "b"]
    assert definitions["calculate"].input_schema["properties"]["expression"]["type"] == "string"


def test_definitions_are_cached_and_a_server_killed_while_idle_restarts_on_a_later_call(
    tmp_path: Path,
) -> None:
    ledger, starts = tmp_path / "ledger", tmp_path / "starts"

    async def scenario(tools: McpToolProvider) -> tuple[list[Any], list[Any], int, list[Any]]:
        first = await tools.definitions()
        await tools.execute("add", {"a": 1, "b": 1})
        os.kill(pids(ledger)[0], signal.SIGKILL)  # a listing that hit the server would fail
        cached = await tools.definitions()
        started = count_starts(starts)
        # The death is only seen by the next call (it cannot know whether the request ran).
        after = [await tools.execute("add", {"a": 1, "b": 2}) for _ in range(2)]
        return first, cached, started, after

    first, cached, started, after = with_provider(
        [counted_server("tools", ledger, starts)], scenario
    )

    assert cached == first
    assert started == 1  # the cached listing neither asked the dead server nor started another
    assert count_starts(starts) == 2  # the call after the one that saw the death did
    assert after == [
        error("Tool add failed: the tool server 'tools' stopped (Connection closed)"),
        ok("3.0"),
    ]
    assert len(set(pids(ledger))) == 2


def test_a_tool_offered_by_several_servers_is_prefixed_with_each_server_name(
    tmp_path: Path,
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"

    async def scenario(tools: McpToolProvider) -> tuple[set[str], list[ToolResult]]:
        names = {definition.name for definition in await tools.definitions()}
        results = [
            await tools.execute("one__add", {"a": 1, "b": 2}),
            await tools.execute("two__calculate", {"expression": "6*7"}),
            await tools.execute("add", {"a": 1, "b": 2}),
        ]
        return names, results

    names, results = with_provider([stdio_server("one", one), stdio_server("two", two)], scenario)

    assert names == {f"{server}__{tool}" for server in ("one", "two") for tool in TOOL_NAMES}
    assert results == [ok("3.0"), ok("42"), error("Unknown tool: add")]
    assert [r.kind for r in results] == ["ok", "ok", "unavailable"]  # (the metrics' outcome)
    assert [entry["tool"] for entry in read_ledger(one)] == ["add"]
    assert [entry["tool"] for entry in read_ledger(two)] == ["calculate"]


def test_exposed_names_stay_unique_and_valid_for_any_tool_names() -> None:
    def tool(name: str) -> Tool:
        return Tool(name=name, input_schema={"type": "object"})

    long = "x" * 70
    catalog = expose_tools(
        [
            ("a", [tool("only_here"), tool("shared"), tool("has.dot"), tool(long)]),
            ("b", [tool("shared"), tool("has_dot"), tool(long + "y")]),
            ("c.d", [tool("shared")]),
        ]
    )

    assert {name: (d.server, d.original_name) for name, d in catalog.items()} == {
        "only_here": ("a", "only_here"),
        "a__shared": ("a", "shared"),
        "b__shared": ("b", "shared"),
        "c_d__shared": ("c.d", "shared"),
        "has_dot": ("b", "has_dot"),  # already valid: keeps its name
        "has_dot_2": ("a", "has.dot"),  # sanitized into a taken name: suffixed
        "x" * 64: ("a", long),
        "x" * 62 + "_2": ("b", long + "y"),
    }


# --- execute ------------------------------------------------------------------------------------


def test_execute_returns_the_text_of_successful_calls(tmp_path: Path) -> None:
    async def scenario(tools: McpToolProvider) -> list[ToolResult]:
        # No definitions() first: a resumed turn may execute pending calls straight away.
        return [
            await tools.execute("add", {"a": 2, "b": 0.5}),
            await tools.execute("calculate", {"expression": "2*(3+4)"}),
            await tools.execute("search_docs", {"query": "redis appendfsync AOF", "limit": 1}),
        ]

    add, calculate, search = with_provider([stdio_server("tools", tmp_path / "l")], scenario)

    assert add == ok("2.5")
    assert calculate == ok("14")
    assert not search.is_error
    assert search.content.startswith("1. redis-persistence.md ")


def test_tool_errors_and_unknown_tools_are_error_results(tmp_path: Path) -> None:
    async def scenario(tools: McpToolProvider) -> list[ToolResult]:
        return [
            await tools.execute("fail", {"message": "disk on fire"}),
            await tools.execute("raise_unexpected", {}),
            await tools.execute("add", {"a": "x", "b": 1}),
            await tools.execute("no_such_tool", {}),
        ]

    fail, unexpected, invalid, unknown = with_provider(
        [stdio_server("tools", tmp_path / "l")], scenario
    )

    assert fail == error("Error executing tool fail: disk on fire")
    assert unexpected == error("Error executing tool raise_unexpected")
    assert invalid.is_error
    assert "validation error" in invalid.content
    assert unknown == error("Unknown tool: no_such_tool")


def test_a_hanging_tool_times_out_and_the_same_server_keeps_serving(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"

    async def scenario(tools: McpToolProvider) -> tuple[ToolResult, float, ToolResult]:
        await tools.start()
        started = time.monotonic()
        hung = await tools.execute("hang", {"seconds": HANG_SECONDS})
        elapsed = time.monotonic() - started
        return hung, elapsed, await tools.execute("add", {"a": 1, "b": 1})

    # (3 s: the quick call after it must not time out on a loaded machine)
    hung, elapsed, after = with_provider(
        [stdio_server("tools", ledger)], scenario, call_timeout=3.0
    )

    assert hung == error("Tool hang timed out after 3 s") and hung.kind == "timeout"
    assert 3 <= elapsed < HALFWAY_TO_A_HANG_S  # the timeout cut it, the server did not
    assert after == ok("2.0")
    assert len(set(pids(ledger))) == 1


def test_a_crashed_server_is_an_error_result_and_restarts_on_the_next_call(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"

    async def scenario(tools: McpToolProvider) -> list[ToolResult]:
        return [
            await tools.execute("add", {"a": 1, "b": 2}),
            await tools.execute("exit_process", {"code": 3}),
            await tools.execute("calculate", {"expression": "6*7"}),
        ]

    results = with_provider([stdio_server("tools", ledger)], scenario)

    assert results == [
        ok("3.0"),
        error("Tool exit_process failed: the tool server 'tools' stopped (Connection closed)"),
        ok("42"),
    ]
    assert results[1].kind == "unavailable"
    entries = read_ledger(ledger)
    assert [entry["tool"] for entry in entries] == ["add", "exit_process", "calculate"]
    assert entries[0]["pid"] == entries[1]["pid"] != entries[2]["pid"]
    assert not is_running(entries[0]["pid"])


def test_concurrent_callers_share_one_server_and_a_restart_happens_once(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"

    async def scenario(tools: McpToolProvider) -> tuple[list[ToolResult], float, list[ToolResult]]:
        sums = await asyncio.gather(*(tools.execute("add", {"a": i, "b": 1}) for i in range(50)))
        started = time.monotonic()
        await asyncio.gather(*(tools.execute("hang", {"seconds": 2}) for _ in range(20)))
        elapsed = time.monotonic() - started
        await tools.execute("exit_process", {})
        after = await asyncio.gather(*(tools.execute("add", {"a": i, "b": 0}) for i in range(10)))
        return sums, elapsed, after

    sums, elapsed, after = with_provider([stdio_server("tools", ledger)], scenario)

    assert sums == [ok(f"{i + 1}.0") for i in range(50)]
    assert elapsed < 20 * 2 / 2  # concurrent: 20 x 2 s one after the other would be 40 s
    assert after == [ok(f"{i}.0") for i in range(10)]
    assert len(set(pids(ledger))) == 2  # the first server, and exactly one restart


def test_huge_output_is_truncated_with_a_visible_marker(tmp_path: Path) -> None:
    async def scenario(tools: McpToolProvider) -> list[ToolResult]:
        return [
            await tools.execute("huge_output", {"size": 5000}),
            await tools.execute("huge_output", {"size": 1000}),
        ]

    clipped, exact = with_provider(
        [stdio_server("tools", tmp_path / "l")], scenario, max_output_chars=1000
    )

    marker = "\n[... output truncated: 1000 of 5000 characters shown]"
    assert clipped == ok(huge_text(5000)[:1000] + marker)
    assert exact == ok(huge_text(1000))


def test_a_server_sees_only_its_configured_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CANARY_SECRET", "do-not-leak")
    config = stdio_server(
        "tools", tmp_path / "l", env={LEDGER_ENV: str(tmp_path / "l"), "CHATWORKER_EXTRA": "1"}
    )

    async def scenario(tools: McpToolProvider) -> ToolResult:
        return await tools.execute("env_keys", {})

    result = with_provider([config], scenario)

    assert not result.is_error
    assert "CANARY_SECRET" not in result.content
    assert {"CHATWORKER_EXTRA", LEDGER_ENV, "PATH"} <= set(result.content.split("\n"))


RAW_SERVER = r"""
import json, sys

def reply(request_id, result):
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()

for line in sys.stdin.buffer:
    message = json.loads(line)
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        continue
    if method == "initialize":
        version = message["params"]["protocolVersion"]
        info = {"name": "raw", "version": "0"}
        out = reply(request_id, {"protocolVersion": version, "capabilities": {"tools": {}},
                                 "serverInfo": info})
    elif method == "tools/list":
        out = reply(request_id, {"tools": [{"name": "latin1", "inputSchema": {"type": "object"}}]})
    elif method == "tools/call":
        out = reply(request_id, {"content": [{"type": "text", "text": "caf@"}]})
        out = out.replace(b"@", b"\xe9")  # latin-1, not UTF-8
    else:
        out = json.dumps({"jsonrpc": "2.0", "id": request_id,
                          "error": {"code": -32601, "message": "Method not found"}}).encode()
    sys.stdout.buffer.write(out + b"\n")
    sys.stdout.buffer.flush()
"""


def test_text_that_is_not_utf8_is_replaced_and_the_session_survives(tmp_path: Path) -> None:
    # A hand-written legacy stdio server: the SDK's own servers only ever write valid UTF-8.
    script = tmp_path / "raw_server.py"
    script.write_text(RAW_SERVER)
    config = McpServerConfig(name="raw", command=sys.executable, args=(str(script),))

    async def scenario(tools: McpToolProvider) -> list[ToolResult]:
        return [await tools.execute("latin1", {}) for _ in range(2)]

    results = with_provider([config], scenario)

    assert results == [ok("caf\ufffd")] * 2


# --- servers that cannot start ------------------------------------------------------------------


def test_a_server_that_cannot_start_leaves_the_others_working(tmp_path: Path) -> None:
    attempts = tmp_path / "attempts"
    broken = counted_server("broken", tmp_path / "b", attempts, command=str(tmp_path / "no-such"))

    async def scenario(tools: McpToolProvider) -> tuple[set[str], int, list[ToolResult]]:
        names = {definition.name for definition in await tools.definitions()}
        for _ in range(20):  # a hot loop, backing off: no new spawn attempt per call
            await tools.definitions()
        spawned = count_starts(attempts)
        results = [
            await tools.execute("broken__add", {"a": 1, "b": 2}),
            await tools.execute("add", {"a": 1, "b": 2}),
        ]
        return names, spawned, results

    names, spawned, results = with_provider(
        [broken, stdio_server("good", tmp_path / "l")], scenario
    )

    assert names == TOOL_NAMES  # only the good server's tools: no collision, plain names
    # One attempt, and at most one more if the loop outlived the first back-off (1 s).
    assert 1 <= spawned <= 2
    assert results == [error("Unknown tool: broken__add"), ok("3.0")]


def test_a_failed_server_is_retried_after_a_back_off_and_then_serves(tmp_path: Path) -> None:
    attempts, fixed = tmp_path / "attempts", tmp_path / "fixed"
    script = (
        f'echo start >> "{attempts}"; '
        f'[ -e "{fixed}" ] && exec "{sys.executable}" -m {SERVER_MODULE}; exit 1'
    )
    config = stdio_server("flaky", tmp_path / "l", command="/bin/sh", args=("-c", script))

    def starts() -> int:
        return len(attempts.read_text().splitlines())

    async def scenario(tools: McpToolProvider) -> tuple[int, int, set[str], int]:
        await tools.definitions()
        await tools.definitions()  # within the back-off: no new attempt
        early = starts()
        fixed.touch()
        await asyncio.sleep(1.1)  # the first back-off is 1 s
        waiting = len(await tools.definitions())  # starts the retry in the background
        deadline = time.monotonic() + 10
        while not (names := {d.name for d in await tools.definitions()}):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        return early, waiting, names, starts()

    early, waiting, names, final = with_provider([config], scenario)

    assert (early, waiting) == (1, 0)
    assert names == TOOL_NAMES
    assert final == 2


def test_a_server_that_cannot_restart_is_an_error_result_and_is_not_respawned_at_once(
    tmp_path: Path,
) -> None:
    ledger, workdir = tmp_path / "ledger", tmp_path / "workdir"
    workdir.mkdir()
    config = stdio_server(
        "tools",
        ledger,
        cwd=str(workdir),
        env={LEDGER_ENV: str(ledger), "PYTHONPATH": str(REPO_ROOT)},
    )

    async def scenario(tools: McpToolProvider) -> list[ToolResult]:
        await tools.execute("exit_process", {})
        workdir.rmdir()  # the next spawn fails: its working directory is gone
        failed = await tools.execute("add", {"a": 1, "b": 2})
        again = await tools.execute("add", {"a": 1, "b": 2})
        return [failed, again]

    failed, again = with_provider([config], scenario)

    assert failed.is_error
    assert failed.content.startswith(
        "Tool add failed: the tool server 'tools' is unavailable (FileNotFoundError: "
    )
    assert again.is_error
    # (only a call refused within the back-off says so; a new attempt would fail afresh)
    assert "next start attempt in" in again.content
    assert [entry["tool"] for entry in read_ledger(ledger)] == ["exit_process"]


# --- lifecycle ----------------------------------------------------------------------------------


def test_close_stops_every_server_and_is_idempotent(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"

    async def scenario() -> ToolResult:
        tools = McpToolProvider(
            [stdio_server("one", one), stdio_server("two", two)], call_timeout=10.0
        )
        await tools.start()
        await asyncio.gather(
            tools.execute("one__add", {"a": 1, "b": 2}),
            tools.execute("two__add", {"a": 1, "b": 2}),
        )
        await tools.close()
        await tools.close()
        return await tools.execute("one__add", {"a": 1, "b": 2})

    after_close = asyncio.run(scenario())

    server_pids = pids(one) + pids(two)
    assert len(set(server_pids)) == 2
    assert not any(is_running(pid) for pid in server_pids)
    assert after_close == error("Tool one__add failed: the tool provider is closed")


# --- cancellation -------------------------------------------------------------------------------
# Cancelling the task awaiting `execute` is enough: mcp's dispatcher sends the server
# `notifications/cancelled` for the request (a "courtesy cancel"), and the server cancels the tool.


def test_cancelling_the_calling_task_sends_notifications_cancelled_and_the_server_stops_the_tool(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = tmp_path / "ledger"
    caplog.set_level(logging.WARNING)

    async def scenario(tools: McpToolProvider) -> tuple[float, float, ToolResult]:
        task = asyncio.create_task(tools.execute("slow", {"seconds": 30}))
        await wait_for_ledger(ledger, "slow")
        started = time.monotonic()
        returned = await cancel_and_wait(task)
        await wait_for_ledger(ledger, "slow:cancelled", timeout=SERVER_STOPS_WITHIN_S)
        stopped = time.monotonic() - started
        return returned, stopped, await tools.execute("add", {"a": 1, "b": 2})

    returned, stopped, after = with_provider([stdio_server("tools", ledger)], scenario)
    gc.collect()  # a task or future left behind would complain now

    assert returned < CANCEL_RETURNS_WITHIN_S
    assert stopped < SERVER_STOPS_WITHIN_S
    assert after == ok("3.0")
    entries = read_ledger(ledger)
    assert [(e["tool"], e["arguments"]) for e in entries] == [
        ("slow", {"seconds": 30, "label": ""}),
        ("slow:cancelled", {"seconds": 30, "label": ""}),
        ("add", {"a": 1, "b": 2}),
    ]
    assert len(set(pids(ledger))) == 1  # the same server process, still serving
    # No "Task was destroyed", "exception was never retrieved" or "courtesy cancel gave up".
    assert [r.getMessage() for r in caplog.records] == []


def test_cancelling_one_of_several_concurrent_calls_leaves_the_others_running(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    labels = ["a", "b", "c"]

    async def scenario(tools: McpToolProvider) -> tuple[list[ToolResult], float]:
        await tools.start()
        started = time.monotonic()
        others = [
            asyncio.create_task(tools.execute("slow", {"seconds": 1.5, "label": label}))
            for label in labels
        ]
        doomed = asyncio.create_task(tools.execute("slow", {"seconds": 30, "label": "doomed"}))
        await wait_for_ledger(ledger, "slow", count=4)
        await cancel_and_wait(doomed)
        await wait_for_ledger(ledger, "slow:cancelled", timeout=SERVER_STOPS_WITHIN_S)
        assert not any(task.done() for task in others)  # still working when the cancel landed
        results = await asyncio.gather(*others)
        return results, time.monotonic() - started

    results, elapsed = with_provider([stdio_server("tools", ledger)], scenario)

    assert results == [ok(f"Worked 1.5 seconds ({label}).") for label in labels]
    # They ran their full time; all four ran at once (the ledger had four starts before the
    # cancel), so the bound above only says none waited for the doomed call's 30 s.
    assert 1.5 <= elapsed < 30 / 2
    cancelled = [e["arguments"] for e in read_ledger(ledger) if e["tool"] == "slow:cancelled"]
    assert cancelled == [{"seconds": 30, "label": "doomed"}]
    assert len(set(pids(ledger))) == 1


RECORDING_SERVER = r"""
import json, sys

record = open(sys.argv[1], "a", encoding="utf-8")

def reply(request_id, result):
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()

for line in sys.stdin.buffer:
    record.write(line.decode().strip() + "\n")
    record.flush()
    message = json.loads(line)
    method, request_id = message.get("method"), message.get("id")
    if request_id is None or method == "tools/call":
        continue  # a call is never answered: only a cancellation ends it
    if method == "initialize":
        version = message["params"]["protocolVersion"]
        out = reply(request_id, {"protocolVersion": version, "capabilities": {"tools": {}},
                                 "serverInfo": {"name": "recording", "version": "0"}})
    elif method == "tools/list":
        out = reply(request_id, {"tools": [{"name": "wait", "inputSchema": {"type": "object"}}]})
    else:
        out = json.dumps({"jsonrpc": "2.0", "id": request_id,
                          "error": {"code": -32601, "message": "Method not found"}}).encode()
    sys.stdout.buffer.write(out + b"\n")
    sys.stdout.buffer.flush()
"""


def test_the_cancellation_on_the_wire_names_the_cancelled_request(tmp_path: Path) -> None:
    # A hand-written server (older protocol, `initialize` handshake) that records every message.
    script, record = tmp_path / "recording_server.py", tmp_path / "received.jsonl"
    script.write_text(RECORDING_SERVER)
    config = McpServerConfig(name="rec", command=sys.executable, args=(str(script), str(record)))

    def received() -> list[dict[str, Any]]:
        text = record.read_text() if record.exists() else ""
        return [json.loads(line) for line in text.splitlines()]

    async def scenario(tools: McpToolProvider) -> list[dict[str, Any]]:
        task = asyncio.create_task(tools.execute("wait", {}))
        deadline = time.monotonic() + SERVER_STOPS_WITHIN_S
        while not any(m.get("method") == "tools/call" for m in received()):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert await cancel_and_wait(task) < CANCEL_RETURNS_WITHIN_S
        while not any(m.get("method") == "notifications/cancelled" for m in received()):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        return received()

    messages = with_provider([config], scenario)

    (call,) = [m for m in messages if m.get("method") == "tools/call"]
    (cancel,) = [m for m in messages if m.get("method") == "notifications/cancelled"]
    assert call["params"]["name"] == "wait"
    assert "id" not in cancel  # a notification
    assert cancel["params"]["requestId"] == call["id"]
    assert isinstance(cancel["params"].get("reason"), str)


# --- request _meta -------------------------------------------------------------------------------


TRACE_CONTEXT_KEYS = frozenset({"traceparent", "tracestate", "baggage"})


def test_a_client_passes_meta_with_a_call_and_the_tool_reads_it_from_its_request_context(
    tmp_path: Path,
) -> None:
    """Not through the provider yet: `Client.call_tool(..., meta=...)` sends `params._meta`, and
    a tool taking a `Context` reads it as `ctx.request_context.meta` (see the server's echo_meta).
    """
    params = stdio_params(tmp_path / "ledger", extra_env={EXTRA_TOOLS_ENV: "echo_meta"})

    async def scenario() -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        async with Client(params, read_timeout_seconds=10.0) as client:
            with_meta = await client.call_tool("echo_meta", {}, meta={"chatworker/call_id": "c1"})
            without = await client.call_tool("echo_meta", {})
            return with_meta.structured_content, without.structured_content

    with_meta, without = asyncio.run(asyncio.wait_for(scenario(), SCENARIO_TIMEOUT_S))

    assert with_meta is not None and without is not None
    assert with_meta["chatworker/call_id"] == "c1"
    # The SDK adds its own reserved keys on a 2026 connection, and the W3C trace context when a
    # tracer provider is installed (an earlier test in the same process may have installed one):
    # look a key up, never compare all.
    assert "chatworker/call_id" not in without
    assert {key for key in with_meta if key != "chatworker/call_id"} == set(without)
    assert all(
        key.startswith("io.modelcontextprotocol/") or key in TRACE_CONTEXT_KEYS for key in without
    )
    assert [entry["arguments"] for entry in read_ledger(tmp_path / "ledger")] == [{}, {}]


def test_the_provider_sends_each_call_s_idempotency_key_in_meta(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    server = stdio_server(
        "tools", ledger, env={LEDGER_ENV: str(ledger), EXTRA_TOOLS_ENV: "echo_meta"}
    )
    conversation_id = uuid.uuid4()

    async def scenario(tools: McpToolProvider) -> tuple[ToolResult, ToolResult]:
        answering = await tools.execute("echo_meta", {}, CallRef(conversation_id, "call_7"))
        alone = await tools.execute("echo_meta", {})
        return answering, alone

    answering, alone = with_provider([server], scenario)

    meta = json.loads(answering.content)
    assert {key: meta[key] for key in meta if key.startswith("chatworker/")} == {
        "chatworker/conversation_id": str(conversation_id),
        "chatworker/tool_call_id": "call_7",
        "chatworker/idempotency_key": f"{conversation_id}:call_7",
    }
    assert not any(key.startswith("chatworker/") for key in json.loads(alone.content))


# --- streamable HTTP ----------------------------------------------------------------------------


class HttpServer:
    """The test MCP server over streamable HTTP on 127.0.0.1, in a thread, recording headers."""

    def __init__(self, port: int = 0) -> None:
        self.headers: list[dict[str, str]] = []
        self._app = test_server.streamable_http_app()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        self.port: int = sock.getsockname()[1]
        config = uvicorn.Config(self._record, interface="asgi3", log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert self._thread.is_alive(), "uvicorn failed to start"
            assert time.monotonic() < deadline, "uvicorn did not start in time"
            time.sleep(0.01)

    async def _record(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self._app(scope, receive, send)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    server = HttpServer()
    yield server
    server.stop()


def test_a_remote_server_is_reached_over_streamable_http_with_its_headers(
    http_server: HttpServer,
) -> None:
    config = McpServerConfig(
        name="remote", url=http_server.url, headers={"Authorization": "Bearer s3cret"}
    )
    restarted: list[HttpServer] = []

    async def scenario(tools: McpToolProvider) -> list[ToolResult]:
        names = {definition.name for definition in await tools.definitions()}
        assert names == TOOL_NAMES
        results = [
            await tools.execute("add", {"a": 1, "b": 2}),
            await tools.execute("hang", {"seconds": 60}),
            await tools.execute("fail", {"message": "nope"}),
        ]
        await asyncio.to_thread(http_server.stop)
        results.append(await tools.execute("add", {"a": 1, "b": 2}))
        restarted.append(await asyncio.to_thread(HttpServer, http_server.port))
        results.append(await tools.execute("add", {"a": 2, "b": 2}))
        return results

    try:
        results = with_provider([config], scenario, call_timeout=3.0)  # (quick calls: slack)
    finally:
        for server in restarted:
            server.stop()

    assert results == [
        ok("3.0"),
        error("Tool hang timed out after 3 s"),
        error("Error executing tool fail: nope"),
        error("Tool add failed: the tool server 'remote' stopped (Connection closed)"),
        ok("4.0"),
    ]
    assert http_server.headers
    assert all(h.get("authorization") == "Bearer s3cret" for h in http_server.headers)
    assert all(h.get("authorization") == "Bearer s3cret" for h in restarted[0].headers)


def test_cancelling_a_call_to_a_remote_server_stops_the_tool_there(
    http_server: HttpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server runs in this process: it reads the ledger's path from this environment.
    ledger = tmp_path / "ledger"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    config = McpServerConfig(name="remote", url=http_server.url)

    async def scenario(tools: McpToolProvider) -> tuple[float, ToolResult]:
        task = asyncio.create_task(tools.execute("slow", {"seconds": 30}))
        await wait_for_ledger(ledger, "slow")
        returned = await cancel_and_wait(task)
        await wait_for_ledger(ledger, "slow:cancelled", timeout=SERVER_STOPS_WITHIN_S)
        return returned, await tools.execute("add", {"a": 1, "b": 2})

    returned, after = with_provider([config], scenario)

    assert returned < CANCEL_RETURNS_WITHIN_S
    assert after == ok("3.0")
    assert [entry["tool"] for entry in read_ledger(ledger)] == ["slow", "slow:cancelled", "add"]


# --- annotations and the approval policy ----------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "needs_approval"),
    [
        ({}, {"erase_notes"}),  # the default: a tool that says destructiveHint
        ({"approval": "never"}, set()),
        ({"approval": "always"}, {"erase_notes", "add", "write_note"}),
        ({"tool_approval": {"erase_notes": "never", "write_note": "always"}}, {"write_note"}),
    ],
)
def test_a_tool_s_annotations_and_its_server_s_policy_decide_what_the_user_approves(
    tmp_path: Path, overrides: dict[str, Any], needs_approval: set[str]
) -> None:
    ledger = tmp_path / "ledger"
    env = {LEDGER_ENV: str(ledger), EXTRA_TOOLS_ENV: "erase_notes"}
    server = stdio_server("tools", ledger, env=env, **overrides)

    async def scenario(tools: McpToolProvider) -> list[Any]:
        return await tools.definitions()

    definitions = {d.name: d for d in with_provider([server], scenario)}
    assert definitions["erase_notes"].annotations == {
        "destructiveHint": True,
        "idempotentHint": True,
    }
    assert definitions["add"].is_read_only  # the demo's tools say they only read
    assert {
        name for name in ("erase_notes", "add", "write_note") if definitions[name].requires_approval
    } == needs_approval


def test_a_tool_s_image_and_blob_are_kept_whole_and_described_in_its_text(tmp_path: Path) -> None:
    """A real MCP server's image, embedded PDF and resource link (server-everything's shapes):
    the image and the PDF come back whole as the result's media, and its text describes each
    (no "[image/png content]"); a larger image than the limit is only described."""
    ledger = tmp_path / "ledger"
    server = stdio_server(
        "tools", ledger, env={LEDGER_ENV: str(ledger), EXTRA_TOOLS_ENV: "render_chart"}
    )

    async def scenario(tools: McpToolProvider) -> ToolResult:
        return await tools.execute("render_chart", {"label": "q3"})

    result = with_provider([server], scenario)
    assert not result.is_error
    assert result.content.splitlines() == [
        "The q3 chart, its report and its data.",
        f"[image image/png, {len(CHART_PNG):,} bytes]",
        f"[application/pdf resource report://q3/report.pdf, {len(REPORT_PDF):,} bytes]",
        "[resource link: data://q3.csv (q3.csv)]",
    ]
    assert [(m.media_type, m.data, m.name) for m in result.media] == [
        ("image/png", CHART_PNG, None),
        ("application/pdf", REPORT_PDF, "report.pdf"),
    ]
    small = with_provider([server], scenario, max_media_bytes=len(REPORT_PDF) - 1)
    assert [m.media_type for m in small.media] == ["image/png"]
