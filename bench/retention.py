"""Retention: `Upkeep.prune` over many conversations, half of them resting and untouched for a
year (each with a turn, two messages, two events and a kept tool output, as a tool turn leaves
them), the rest recent. Rows deleted per second and the longest batch: a batch's transaction is
the longest any lock is held."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from app.db import make_engine
from app.worker.store import Upkeep
from bench.stats import Row

# A conversation, its turn, its two messages (a tool call's result among them, with its kept
# output) and two events; `old` of them untouched for a year.
GENERATE = """
WITH made AS (
  INSERT INTO conversations (id, status, model, allowed_tools, turn_number, turn_count,
                             event_seq, updated_at)
  SELECT gen_random_uuid(), 'idle', 'bench-model', '[]', 1, 1, 2,
         CASE WHEN g <= %(old)s THEN now() - interval '365 days' - g * interval '1 second'
              ELSE now() END
  FROM generate_series(1, %(total)s) AS g
  RETURNING id
), turned AS (
  INSERT INTO turns (id, conversation_id, number, status, kind)
  SELECT gen_random_uuid(), id, 1, 'completed', 'message' FROM made
  RETURNING id, conversation_id
), said AS (
  INSERT INTO messages (conversation_id, seq, parent_seq, role, content, tool_call_id, tool_name,
                        is_error)
  SELECT conversation_id, s, nullif(s - 1, 0), CASE s WHEN 1 THEN 'user' ELSE 'tool' END, 'bench',
         CASE s WHEN 2 THEN 'c1' END, CASE s WHEN 2 THEN 'echo' END, false
  FROM turned, generate_series(1, 2) AS s
  RETURNING conversation_id
), kept AS (
  INSERT INTO tool_outputs (conversation_id, call_id, turn_id, seq, tool, arguments, content,
                            chars)
  SELECT conversation_id, 'c1', id, 2, 'echo', '{}', 'bench output', 12 FROM turned
)
INSERT INTO events (conversation_id, seq, turn_id, type, created_at)
SELECT conversation_id, s, id, 'turn.queued', now() FROM turned, generate_series(1, 2) AS s
"""


def measure_retention(
    database_url: str, total: int, batch: int = 1000
) -> tuple[list[Row], dict[str, Any]]:
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    old = total // 2
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(GENERATE, {"old": old, "total": total})
        conn.execute("VACUUM ANALYZE")
        generated = time.perf_counter() - started
    engine = make_engine(database_url)
    upkeep = Upkeep(engine)
    cutoff = datetime.now(UTC) - timedelta(days=90)
    started = time.perf_counter()
    found = upkeep.prune(cutoff, dry_run=True).conversations
    counted_s = time.perf_counter() - started
    started = time.perf_counter()
    pruned = upkeep.prune(cutoff, batch=batch)
    seconds = time.perf_counter() - started
    engine.dispose()
    assert found == pruned.conversations == old, (found, pruned.conversations, old)
    rows_deleted = old * 7  # the conversation, its turn, 2 messages, 2 events, 1 kept output
    label = f"{old:,} of {total:,} convs, batches of {batch:,}"
    rows: list[Row] = [
        (f"retention: prune {label}", old / seconds, old / seconds, "convs/s"),
        (
            f"retention: rows deleted ({label})",
            rows_deleted / seconds,
            rows_deleted / seconds,
            "rows/s",
        ),
        (
            f"retention: longest batch ({label})",
            pruned.longest_batch_s * 1000,
            pruned.longest_batch_s * 1000,
            "ms",
        ),
        (f"retention: --dry-run count ({label})", counted_s * 1000, counted_s * 1000, "ms"),
    ]
    extra = {
        "total": total,
        "pruned": old,
        "batch": batch,
        "batches": pruned.batches,
        "seconds": seconds,
        "longest_batch_ms": pruned.longest_batch_s * 1000,
        "generate_seconds": generated,
    }
    return rows, extra
