"""Two owners, one flooding: does the other keep its pickup latency?

A real worker process (20 turns in flight) on Redis and PostgreSQL, the fake LLM answering
alice's turns after `FLOOD_DELAY` seconds. Bob submits one turn at a time and we time each from
its submit to his model request reaching the fake LLM: first alone (the floor), then while alice
floods: she keeps `FLOOD_OUTSTANDING` turns submitted and unfinished at all times (five times
what the worker runs at once), submitting a new one as each ends. Without a limit her turns
take every slot and bob waits behind her backlog; with `CHATWORKER_OWNER_MAX_RUNNING_TURNS` her
extra claims are deferred in a few milliseconds each and bob's turn gets a slot at once. Each
setting runs in a fresh database.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from app.models import RUNNING_STATUSES
from app.worker.store.upkeep import conversations
from bench.stats import Row, median, p95
from bench.workers import Rig, rig

FLOOD = "flood-of-alice"
FLOOD_DELAY = 1.0  # seconds each of alice's turns waits on the model
FLOOD_OUTSTANDING = 100  # alice's turns submitted and not finished, at all times
IN_FLIGHT = "20"
LIMIT = "4"


def measure_fairness(
    database: Any,
    probes: int,
    settings: tuple[tuple[str, dict[str, str]], ...] | None = None,
    flood: int = FLOOD_OUTSTANDING,
) -> tuple[list[Row], dict[str, Any]]:
    """`database()` gives a fresh (url, redis, workdir) for each setting; alice keeps `flood`
    turns outstanding."""
    settings = settings or (
        ("no limit", {}),
        (f"owner limit {LIMIT}", {"CHATWORKER_OWNER_MAX_RUNNING_TURNS": LIMIT}),
    )
    rows: list[Row] = []
    figures: dict[str, Any] = {}
    for label, env in settings:
        with database() as (url, redis_db, workdir):
            alone, flooded, submitted = _phase(url, redis_db, workdir, env, probes, flood=flood)
        figures[label] = {"alone_ms": alone, "flooded_ms": flooded, "flood_turns": submitted}
        rows.append((f"fairness, {label}: bob alone", median(alone), p95(alone), "ms pickup"))
        rows.append(
            (f"fairness, {label}: bob while alice floods", median(flooded), p95(flooded), "ms")
        )
    return rows, figures


def _phase(
    url: str, redis_db: str, workdir: Path, env: dict[str, str], probes: int, *, flood: int
) -> tuple[list[float], list[float], int]:
    with rig(url, redis_db, workdir, {"text": "ok"}) as bench:
        bench.llm.script([], match=FLOOD, default={"delay": FLOOD_DELAY, "text": "ok"})
        worker = bench.worker("fairness", CHATWORKER_MAX_IN_FLIGHT=IN_FLIGHT, **env).start()
        try:
            _probe(bench, "[bob warm-up]")
            alone = [_probe(bench, f"[bob alone {n:03d}]") for n in range(probes)]
            stop = threading.Event()
            submitted = [0]
            flooder = threading.Thread(
                target=_flood, args=(bench, stop, submitted, flood), daemon=True
            )
            flooder.start()
            time.sleep(2.0)  # the backlog builds
            try:
                flooded = [_probe(bench, f"[bob flooded {n:03d}]") for n in range(probes)]
            finally:
                stop.set()
                flooder.join()
        finally:
            worker.stop(timeout=5)  # alice's backlog is left: the database is dropped
    return alone, flooded, submitted[0]


def _flood(bench: Rig, stop: threading.Event, submitted: list[int], flood: int) -> None:
    outstanding = (
        select(func.count())
        .select_from(conversations)
        .where(conversations.c.owner == "alice", conversations.c.status.in_(RUNNING_STATUSES))
    )
    while not stop.is_set():
        with bench.client.engine.connect() as connection:
            running = connection.execute(outstanding).scalar_one()
        for _ in range(flood - running):
            conversation_id = bench.client.create_conversation(owner="alice")
            bench.client.submit_message(conversation_id, f"{FLOOD} {submitted[0]}")
            submitted[0] += 1
        time.sleep(0.05)


def _probe(bench: Rig, text: str, timeout: float = 120) -> float:
    time.sleep(0.3)
    conversation_id = bench.client.create_conversation(owner="bob")
    bench.client.submit_message(conversation_id, text)
    # (t0 is the doorbell's, as `pickup`'s: a clock read after the submit returned could come
    # after the worker's request, the submitting thread descheduled on a busy machine)
    submitted = bench.rung[conversation_id]
    deadline = time.monotonic() + timeout
    while not (requests := bench.llm.requests(text)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no model request for {text!r}")
        time.sleep(0.005)
    return (requests[0]["received_at"] - submitted) * 1000
