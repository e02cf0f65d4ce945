"""Cancel latency across processes: from `ChatClient.cancel` in this process to the turn being
`cancelled` in the database, while a real worker process holds it waiting on a hanging model.

t0 is taken just before `cancel` (which commits the request and announces it on Redis); t1 is
when the `turn.cancelled` event reaches this process through `follow` (the live channel's commit
notice, then the log). The path measured: the web side's transaction, the pub/sub notice, the
worker aborting the model request, the planner, the cancel statement, the notice back.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from app.client import EventView
from bench.stats import Row, median, p95
from bench.workers import rig

HANG = {"hang": 60, "text": "too late"}


def measure_cancel(
    database_url: str, redis_url: str, workdir: Path, trials: int
) -> tuple[list[Row], dict[str, Any]]:
    samples: list[float] = []
    with rig(database_url, redis_url, workdir, HANG) as bench:
        worker = bench.worker().start()
        try:
            for trial in range(trials + 1):  # the first is a warm-up
                samples.append(_one_cancel(bench, f"[cancel trial {trial:03d}] wait for me"))
        finally:
            worker.stop(timeout=10)
    samples = samples[1:]
    rows: list[Row] = [
        ("cancel latency: API process -> turn cancelled", median(samples), p95(samples), "ms")
    ]
    return rows, {"cancel_ms": samples, "trials": trials}


def _one_cancel(bench: Any, text: str) -> float:
    client = bench.client
    conversation_id = client.create_conversation()
    submitted = client.submit_message(conversation_id, text)
    following = client.follow(conversation_id, until="turn_end", turn_id=submitted.turn_id)
    for item in following:  # reading live before the cancel, as a page would be
        if isinstance(item, EventView) and item.type == "turn.started":
            break
    deadline = time.monotonic() + 10
    while not bench.llm.requests(text):  # the worker holds the turn and waits on the model
        if time.monotonic() > deadline:
            raise TimeoutError("the worker never asked the model")
        time.sleep(0.01)
    started = time.perf_counter()
    client.cancel(conversation_id)
    for item in following:
        if isinstance(item, EventView) and item.type == "turn.cancelled":
            return (time.perf_counter() - started) * 1000
    raise RuntimeError("the turn ended without being cancelled")
