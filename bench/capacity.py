"""Capacity under a realistic model: one worker process, a fake LLM answering after 2 s, and a
burst of C conversations; how many it keeps in flight at once, turns/s, CPU and RSS."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.stats import Row, single
from bench.workers import cpu_seconds, dramatiq_child, rig, rss_mb

MODEL_DELAY = 2.0
GOAL_IN_FLIGHT = 200


def peak_overlap(starts: list[float], length: float) -> int:
    """The most [start, start + length) windows open at one instant (a sweep over the events)."""
    events = sorted([(s, 1) for s in starts] + [(s + length, -1) for s in starts])
    open_now = peak = 0
    for _, change in events:
        open_now += change
        peak = max(peak, open_now)
    return peak


def measure_capacity(
    database_url: str, redis_url: str, workdir: Path, conversations: int
) -> tuple[list[Row], dict[str, Any]]:
    with rig(database_url, redis_url, workdir, {"delay": MODEL_DELAY, "text": "ok"}) as bench:
        worker = bench.worker().start()
        try:
            child = dramatiq_child(worker)
            cpu_before = cpu_seconds(child)
            started = time.time()
            ids = bench.submit(conversations)
            finished = bench.wait_idle(ids, timeout=60 + conversations * MODEL_DELAY)
            cpu = cpu_seconds(child) - cpu_before
            rss = rss_mb(child)
        finally:
            worker.stop()
        received = [r["received_at"] for r in bench.llm.requests()]
    # A request is in flight from its arrival until the fake model answers MODEL_DELAY later.
    peak = peak_overlap(received, MODEL_DELAY)
    turns_per_second = conversations / (finished - started)
    rows = [
        single(f"capacity: peak in flight ({conversations} at once, 2 s model)", peak, "turns"),
        single("capacity: turns per second (1 process)", turns_per_second, "turns/s"),
        single("capacity: worker CPU per turn", cpu * 1000 / conversations, "ms"),
        single("capacity: worker RSS after the burst", rss, "MB"),
    ]
    extra = {
        "conversations": conversations,
        "peak_in_flight": peak,
        "goal_in_flight": GOAL_IN_FLIGHT,
        "meets_goal": peak >= min(GOAL_IN_FLIGHT, conversations),
        "turns_per_second": turns_per_second,
        "cpu_seconds": cpu,
        "rss_mb": rss,
        "wall_seconds": finished - started,
    }
    return rows, extra
