"""Enqueue-to-first-LLM-request latency with a real worker process on Redis and an idle queue.

t0 is taken right after `submit_message` commits and enqueues; t1 is when the fake LLM server
received the worker's request. Both clocks are this machine's wall clock.
"""

from __future__ import annotations

import time
from pathlib import Path

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.queue import make_broker, ring
from tests.servers.fake_llm import FakeLLMServer
from tests.worker_process import FAKE_MODEL, WorkerProcess, worker_environment


def measure_pickup(database_url: str, redis_url: str, workdir: Path, trials: int) -> list[float]:
    """Milliseconds from enqueue to the first model request, one trial at a time (idle worker)."""
    with FakeLLMServer() as llm:
        llm.script([], default={"text": "ok"})
        env = worker_environment(
            database_url, redis_url, llm.api_base, workdir / "ledger.jsonl", workdir / "notes.txt"
        )
        worker = WorkerProcess(env, workdir / "worker.log").start()
        settings = load_settings(database_url=database_url, redis_url=redis_url, model=FAKE_MODEL)
        broker = make_broker(settings)
        engine = make_engine(database_url)
        client = ChatClient(settings, engine=engine, enqueue=lambda cid: ring(cid, broker))
        samples = []
        try:
            for _ in range(trials):
                time.sleep(0.3)  # let the consumer go idle again
                conversation_id = client.create_conversation()
                seen = len(llm.requests())
                client.submit_message(conversation_id, "ping")
                enqueued = time.time()
                deadline = time.monotonic() + 10
                while len(requests := llm.requests()) == seen and time.monotonic() < deadline:
                    time.sleep(0.002)
                samples.append((requests[-1]["received_at"] - enqueued) * 1000)
                while client.get_conversation(conversation_id).is_running:
                    time.sleep(0.01)
        finally:
            worker.stop()
            engine.dispose()
        return samples
