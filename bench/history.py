"""Scaling with history: ms per loop iteration of the real ChatService when the conversation
already holds 10, 100 and 1,000 messages of complete earlier turns (bulk-inserted with psycopg)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import psycopg

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.worker import testing
from app.worker.loop import ChatService, LoopConfig, Outcome
from app.worker.ports import ModelReply, ModelRequest
from app.worker.store import Store
from bench.overhead import ITERATIONS_PER_TURN, _echo
from bench.stats import Row, median, p95

SIZES = (10, 100, 1000)
GOAL_RATIO = 1.2

# Earlier turns as quads (user, assistant tool call, tool result, assistant text); a size not a
# multiple of 4 ends with a user + assistant-text pair, so every earlier turn is complete.
HISTORY = """
INSERT INTO messages (conversation_id, seq, role, content, tool_calls, tool_call_id, tool_name)
SELECT %(id)s, g,
       (ARRAY['user', 'assistant', 'tool', 'assistant'])[p + 1],
       CASE p WHEN 0 THEN 'question ' || g WHEN 2 THEN 'result ' || g
              WHEN 3 THEN 'answer ' || g END,
       CASE p WHEN 1 THEN jsonb_build_array(jsonb_build_object(
              'id', 'h' || g, 'name', 'echo', 'arguments', '{"n": 1}')) END,
       CASE p WHEN 2 THEN 'h' || (g - 1) END,
       CASE p WHEN 2 THEN 'echo' END
FROM (SELECT g, CASE WHEN g <= %(quads)s * 4 THEN (g - 1) %% 4
                     WHEN g = %(quads)s * 4 + 1 THEN 0 ELSE 3 END AS p
      FROM generate_series(1, %(size)s) AS g) AS s
"""


def _model(request: ModelRequest) -> ModelReply:
    # Count only this turn's rounds: the history holds assistant messages of its own.
    last_user = max(i for i, m in enumerate(request.messages) if m["role"] == "user")
    rounds = sum(1 for m in request.messages[last_user:] if m["role"] == "assistant")
    if rounds < ITERATIONS_PER_TURN - 1:
        return testing.calls((f"c{rounds}", "echo", {"n": rounds}))
    return testing.text("done")


def _prepare(client: ChatClient, dsn: str, size: int, count: int) -> list[uuid.UUID]:
    ids = [client.create_conversation(tools=["echo"]) for _ in range(count)]
    with psycopg.connect(dsn) as conn:
        for conversation_id in ids:
            conn.execute(HISTORY, {"id": conversation_id, "quads": size // 4, "size": size})
        conn.execute("ANALYZE messages")
    for conversation_id in ids:
        client.submit_message(conversation_id, "go")
    return ids


def measure_history(database_url: str, conversations: int) -> tuple[list[Row], dict[str, Any]]:
    engine = make_engine(database_url)
    store = Store(engine)
    tools = testing.InMemoryTools({"echo": _echo})
    store.publish_catalog(asyncio.run(tools.definitions()))
    client = ChatClient(
        load_settings(database_url=database_url), engine=engine, enqueue=lambda _: None
    )
    service = ChatService(
        store, model=testing.ScriptedModel(_model), tools=tools, config=LoopConfig(), owner="bench"
    )
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    samples: dict[int, list[float]] = {}
    for size in SIZES:
        ids = _prepare(client, dsn, size, conversations)
        samples[size] = asyncio.run(_run(service, ids))
    engine.dispose()
    ratio = median(samples[SIZES[-1]]) / median(samples[SIZES[0]])
    rows: list[Row] = [
        (f"history {size:>5} msgs: durable loop", median(s), p95(s), "ms/iteration")
        for size, s in samples.items()
    ]
    extra = {"ratio_last_to_first": ratio, "goal_ratio": GOAL_RATIO, "sizes": list(SIZES)}
    return rows, extra


async def _run(service: ChatService, ids: list[uuid.UUID]) -> list[float]:
    samples = []
    for conversation_id in ids:
        started = time.perf_counter()
        outcome = await service.run(conversation_id)
        assert outcome is Outcome.IDLE, outcome
        samples.append((time.perf_counter() - started) * 1000 / ITERATIONS_PER_TURN)
    return samples
