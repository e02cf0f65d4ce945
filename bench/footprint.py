"""Worker footprint: cold start (spawn to the ready log line), RSS at start and after N turns
with an instant fake LLM, and CPU per turn."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.stats import Row, median, p95, single
from bench.workers import cpu_seconds, dramatiq_child, rig, rss_mb

BATCH = 50  # turns submitted at once: a steady load without queueing them all up front
IDLE_SECONDS = 10.0


def measure_footprint(
    database_url: str,
    redis_url: str,
    workdir: Path,
    turns: int,
    cold_starts: int,
    *,
    idle_seconds: float = IDLE_SECONDS,
) -> tuple[list[Row], dict[str, Any]]:
    with rig(database_url, redis_url, workdir, {"text": "ok"}) as bench:
        starts = []
        for n in range(cold_starts):
            worker = bench.worker(f"cold{n}")
            spawned = time.perf_counter()
            worker.start()  # returns once READY_LINE is in the log (polled every 50 ms)
            starts.append(time.perf_counter() - spawned)
            if n < cold_starts - 1:
                worker.stop()
        try:
            child = dramatiq_child(worker)
            rss_start = rss_mb(child)
            time.sleep(1)  # past the start-up work
            idle_before = cpu_seconds(child)
            time.sleep(idle_seconds)
            idle_cpu = (cpu_seconds(child) - idle_before) / idle_seconds
            cpu_before = cpu_seconds(child)
            done = 0
            while done < turns:
                batch = min(BATCH, turns - done)
                bench.wait_idle(bench.submit(batch), timeout=120)
                done += batch
            cpu = cpu_seconds(child) - cpu_before
            rss_end = rss_mb(child)
        finally:
            worker.stop()
    rows = [
        ("worker cold start: spawn -> ready", median(starts), p95(starts), "s"),
        single("worker RSS at start", rss_start, "MB"),
        single(f"worker RSS after {turns} turns", rss_end, "MB"),
        single("worker CPU per turn (instant LLM, 1 call)", cpu * 1000 / turns, "ms"),
        single("worker CPU while idle (polling the queue)", idle_cpu * 100, "% of a core"),
    ]
    extra = {
        "cold_start_seconds": starts,
        "rss_start_mb": rss_start,
        "rss_end_mb": rss_end,
        "turns": turns,
        "cpu_seconds": cpu,
        "idle_cpu_fraction": idle_cpu,
    }
    return rows, extra
