"""Shared plumbing of the process benchmarks: a fake LLM, real workers (with the demo's MCP
server), a client, and /proc.

Capacity, recovery and footprint all need the same setup; reading /proc keeps psutil out.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.demo.mcp_server import server_config
from app.models import RUNNING_STATUSES
from app.queue import make_broker, ring
from app.testing.fake_llm import FakeLLMServer
from app.testing.worker_process import FAKE_MODEL, WorkerProcess, worker_environment
from app.worker.store.upkeep import conversations

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Rig:
    llm: FakeLLMServer
    client: ChatClient
    env: dict[str, str]
    workdir: Path
    rung: dict[uuid.UUID, float]  # each conversation's last doorbell: the wall clock as it went

    def worker(self, name: str = "worker", **extra: str) -> WorkerProcess:
        """A worker process (not started) logging to its own file."""
        return WorkerProcess({**self.env, **extra}, self.workdir / f"{name}.log")

    def submit(
        self, count: int, text: str = "ping", tools: tuple[str, ...] = ()
    ) -> list[uuid.UUID]:
        """Create `count` conversations first, then submit them back to back (a burst)."""
        ids = [self.client.create_conversation(tools=list(tools)) for _ in range(count)]
        for conversation_id in ids:
            self.client.submit_message(conversation_id, text)
        return ids

    def wait_idle(self, ids: list[uuid.UUID], timeout: float) -> float:
        """Poll (one query every 20 ms) until no conversation of `ids` runs; the wall-clock time
        it happened."""
        deadline = time.monotonic() + timeout
        running = (
            select(func.count())
            .select_from(conversations)
            .where(conversations.c.id.in_(ids), conversations.c.status.in_(RUNNING_STATUSES))
        )
        while True:
            with self.client.engine.connect() as connection:
                left = connection.execute(running).scalar_one()
            if not left:
                return time.time()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{left} conversations still running")
            time.sleep(0.02)


@contextlib.contextmanager
def rig(database_url: str, redis_url: str, workdir: Path, default: dict[str, Any]) -> Iterator[Rig]:
    """A fake LLM answering every request with `default`, and a client enqueuing on Redis."""
    with FakeLLMServer() as llm:
        llm.script([], default=default)
        tools = json.dumps({"mcpServers": {"tools": server_config()}})
        env = worker_environment(database_url, redis_url, llm.api_base, tools)
        # A measure that ends with turns in flight leaves them (its database is dropped): its
        # workers release them at once instead of waiting the 10 s grace for them to end.
        env["CHATWORKER_SHUTDOWN_GRACE_SECONDS"] = "0"
        settings = load_settings(database_url=database_url, redis_url=redis_url, model=FAKE_MODEL)
        broker = make_broker(settings)
        engine = make_engine(database_url)
        rung: dict[uuid.UUID, float] = {}

        def enqueue(conversation_id: uuid.UUID) -> None:
            rung[conversation_id] = time.time()
            ring(conversation_id, broker)

        client = ChatClient(settings, engine=engine, enqueue=enqueue)
        try:
            yield Rig(llm, client, env, workdir, rung)
        finally:
            engine.dispose()


def dramatiq_child(worker: WorkerProcess) -> int:
    """The pid of the worker's dramatiq child process (where the engine and its turns run)."""
    assert worker.process is not None
    main = worker.process.pid
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == main:  # dramatiq's main process has no other children
                return int(entry)
    raise RuntimeError(f"no dramatiq child of {main}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")
