"""The AI SDK's own chat (`tests/aisdk/driver.mjs`: `AbstractChat` and `DefaultChatTransport` from
the `ai` package, installed from the npm registry by `scripts/dev test`), run by Node and driven
from a test: what it reads from `/v1/ai-sdk/chat` is what a `useChat` page would hold."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.worker_process import REPO

FOLDER = REPO / "tests" / "aisdk"
DRIVER = FOLDER / "driver.mjs"
Report = dict[str, Any]


def require_node() -> str:
    node = shutil.which("node")
    if node is None or not (FOLDER / "node_modules" / "ai").is_dir():
        pytest.skip(
            "the AI SDK client needs node and tests/aisdk/node_modules (scripts/dev test "
            "installs them: npm ci --prefix tests/aisdk)"
        )
    assert node is not None
    return node


class AiSdkChat:
    """One chat page: commands in, reports out (a thread reads them as they come)."""

    def __init__(self, url: str, key: str, chat_id: str, setup: dict[str, Any] | None = None):
        command = [require_node(), str(DRIVER), url, key, chat_id]
        if setup is not None:
            command.append(json.dumps(setup))
        self.chat_id = chat_id
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=FOLDER,
        )
        self.reports: queue.Queue[Report | None] = queue.Queue()
        self.seen: list[Report] = []
        self._ids = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.reports.put(json.loads(line))
        self.reports.put(None)

    def send(self, op: str, **fields: Any) -> int:
        self._ids += 1
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, "id": self._ids, **fields}) + "\n")
        self.process.stdin.flush()
        return self._ids

    def wait_for(self, matches: Callable[[Report], bool], timeout: float = 90) -> Report:
        deadline = time.monotonic() + timeout
        while True:
            try:
                report = self.reports.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no such report within {timeout} s: {self.seen[-5:]}"
                ) from None
            if report is None:
                assert self.process.stderr is not None
                raise AssertionError(f"the driver exited: {self.process.stderr.read()}")
            self.seen.append(report)
            if report["op"] == "error":
                raise AssertionError(f"the driver failed: {report['error']}")
            if matches(report):
                return report

    def call(self, op: str, timeout: float = 90, **fields: Any) -> Report:
        """A command, and its reply ("done", or "stopped")."""
        sent = self.send(op, **fields)
        return self.wait_for(
            lambda r: r.get("id") == sent and r["op"] in ("done", "stopped"), timeout
        )

    def chunks(self, since: int = 0) -> list[Any]:
        """The chunks read so far (after the first `since` reports)."""
        return [r["chunk"] for r in self.seen[since:] if r["op"] == "chunk"]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def assistant(done: Report) -> dict[str, Any]:
    """The chat's last message, which must be the assistant's."""
    message: dict[str, Any] = done["messages"][-1]
    assert message["role"] == "assistant", done["messages"]
    return message


def shown_text(message: dict[str, Any]) -> str:
    """The message's text as a page shows it: parts our stream discarded left out."""
    return "".join(
        part["text"]
        for part in message["parts"]
        if part["type"] == "text"
        and not (part.get("providerMetadata") or {}).get("chatworker", {}).get("discarded")
    )
