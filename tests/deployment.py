"""A deployment for tests that run real worker processes: the web app's client, the workers,
the fake LLM server and the MCP test server's side-effect ledger, on one test database.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

from app.client import ChatClient, ConversationView
from app.config import load_settings
from app.db import make_engine
from app.queue import make_broker, ring
from app.testing.fake_llm import FakeLLMServer
from tests.servers.mcp_server import read_ledger
from tests.worker_process import FAKE_MODEL, WorkerProcess, worker_environment


class Deployment:
    """A web app's view (the client) of a running worker deployment."""

    def __init__(self, database_url: str, redis_url: str, tmp_path: Path, llm: FakeLLMServer):
        self.database_url = database_url
        self.ledger = tmp_path / "ledger.jsonl"
        self.llm = llm
        self.env = worker_environment(
            database_url, redis_url, llm.api_base, self.ledger, tmp_path / "notes.txt"
        )
        self.tmp_path = tmp_path
        settings = load_settings(database_url=database_url, redis_url=redis_url, model=FAKE_MODEL)
        broker = make_broker(settings)
        self.engine = make_engine(database_url)
        self.ring = lambda cid: ring(cid, broker)  # a doorbell, as a web app would ring it
        self.client = ChatClient(settings, engine=self.engine, enqueue=self.ring)
        self.workers: list[WorkerProcess] = []

    def start_worker(
        self, name: str = "worker", extra_env: dict[str, str] | None = None, ready: bool = True
    ) -> WorkerProcess:
        """Start a worker; with `ready`, wait until it has published its tools."""
        worker = WorkerProcess({**self.env, **(extra_env or {})}, self.tmp_path / f"{name}.log")
        self.workers.append(worker)  # before starting: one that never gets ready is stopped too
        return worker.start(ready=ready)

    def transcript(self, conversation_id: uuid.UUID) -> list[tuple[object, ...]]:
        """What must be equal between a crash-free run and a crashed one (no ids or times)."""
        return [
            (m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.tool_name, m.is_error)
            for m in self.client.get_conversation(conversation_id).messages
        ]

    def chat(self, text: str, tools: list[str] | None = None) -> uuid.UUID:
        conversation_id = self.client.create_conversation(tools=tools or [])
        assert self.client.submit_message(conversation_id, text).enqueued
        return conversation_id

    def wait(self, conversation_id: uuid.UUID, timeout: float = 60) -> ConversationView:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            view = self.client.get_conversation(conversation_id)
            if not view.is_running:
                return view
            time.sleep(0.1)
        logs = "\n".join(w.log() for w in self.workers)
        raise AssertionError(f"{conversation_id} still {view.status} after {timeout} s\n{logs}")

    def tool_runs(self) -> Counter[str]:
        return Counter(entry["tool"] for entry in read_ledger(self.ledger))

    def close(self) -> None:
        for worker in self.workers:  # all drain at once
            worker.terminate()
        for worker in self.workers:
            worker.stop()
        self.engine.dispose()
