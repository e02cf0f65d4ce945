"""Janitor sweep over many conversations of which few are stale: `Store.stale` and `fail_stale`
times, and the stale query's plan, which must use the partial index on running conversations."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from app.db import make_engine
from app.worker.janitor import stale_error
from app.worker.store import Upkeep
from bench.stats import Row, median, p95

STALE_AFTER = 300.0
INDEX = "ix_conversations_running_heartbeat"
GOAL_MS = 100.0

# Stale rows: running, silent for an hour. A few as many fresh running rows sit in the index
# too (live turns), and all the rest are idle, outside the partial index.
GENERATE = """
INSERT INTO conversations (id, status, model, allowed_tools, heartbeat_at)
SELECT gen_random_uuid(),
       CASE WHEN g <= %(stale)s * 2 THEN 'processing' ELSE 'idle' END,
       'bench-model', '[]',
       CASE WHEN g <= %(stale)s THEN now() - interval '1 hour' ELSE now() END
FROM generate_series(1, %(total)s) AS g
"""
RESET = """
UPDATE conversations SET status = 'processing', error = NULL,
       heartbeat_at = now() - interval '1 hour'
WHERE model = 'bench-model' AND status = 'failed'
"""
PLAN = """
EXPLAIN (ANALYZE, BUFFERS)
SELECT id, status, heartbeat_at FROM conversations
WHERE status IN ('processing', 'tool_loop') AND heartbeat_at < now() - interval '300 seconds'
ORDER BY heartbeat_at
"""


def measure_janitor(
    database_url: str, total: int, stale: int, repeats: int
) -> tuple[list[Row], dict[str, Any]]:
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(GENERATE, {"stale": stale, "total": total})
        conn.execute("VACUUM ANALYZE conversations")  # the plan of a table in steady state
        generated = time.perf_counter() - started
    engine = make_engine(database_url)
    upkeep = Upkeep(engine)
    upkeep.stale(STALE_AFTER)  # warm the pool and the statement cache
    stale_ms, fail_ms = [], []
    for _ in range(repeats):
        stale_ms.append(_timed(lambda: _expect(upkeep.stale(STALE_AFTER), stale)))
    error = stale_error(STALE_AFTER)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(repeats):
            fail_ms.append(_timed(lambda: _expect(upkeep.fail_stale(STALE_AFTER, error), stale)))
            conn.execute(RESET)  # fresh stale rows for the next sweep
        plan = [row[0] for row in conn.execute(PLAN)]
    engine.dispose()
    uses_index = any(INDEX in line for line in plan)
    label = f"{total:,} convs, {stale:,} stale"
    rows: list[Row] = [
        (f"janitor: stale() over {label}", median(stale_ms), p95(stale_ms), "ms"),
        (f"janitor: fail_stale() over {label}", median(fail_ms), p95(fail_ms), "ms"),
    ]
    extra = {
        "total": total,
        "stale": stale,
        "generate_seconds": generated,
        "uses_index": uses_index,
        "goal_ms": GOAL_MS,
        "plan": plan,
    }
    return rows, extra


def _timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def _expect(found: list[Any], count: int) -> None:
    assert len(found) == count, f"the sweep found {len(found)} stale conversations, not {count}"
