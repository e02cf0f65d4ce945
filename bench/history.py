"""Scaling with history: ms per loop iteration of the real TurnRunner when the conversation
already holds 10, 1,000 and 10,000 messages of complete earlier turns (bulk-inserted with
psycopg), the claim included. The runner keeps transcripts between turns as a worker host does
(`history.Histories`): each conversation's first turn in the process reads its whole history
(reported on its own, "first claim"), the turns measured after it read what was committed since.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, NamedTuple

import psycopg
from sqlalchemy import Engine

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.testing import fakes
from app.worker.history import Histories
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.ports import ModelReply, ModelRequest
from app.worker.store import Deferred, Snapshot, TurnStore, Upkeep
from bench.overhead import ITERATIONS_PER_TURN, _echo
from bench.stats import Row, median, p95

SIZES = (10, 1_000, 10_000)
GOAL_RATIO = 1.1

# Earlier turns as quads (user, assistant tool call, tool result, assistant text); a size not a
# multiple of 4 ends with a user + assistant-text pair, so every earlier turn is complete.
HISTORY = """
INSERT INTO messages (conversation_id, seq, parent_seq, role, content, tool_calls, tool_call_id,
                      tool_name)
SELECT %(id)s, g, nullif(g - 1, 0),
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

ECHO_READS = {"echo": fakes.READ_ONLY}  # a pure function: it may simply run again


def _model(request: ModelRequest) -> ModelReply:
    # Count only this turn's rounds (the history holds assistant messages of its own), reading
    # back from the end so the instant model itself costs nothing per history message.
    rounds = 0
    for message in reversed(request.messages):
        if message["role"] == "user":
            break
        rounds += message["role"] == "assistant"
    if rounds < ITERATIONS_PER_TURN - 1:
        return fakes.calls((f"c{rounds}", "echo", {"n": rounds}))
    return fakes.text("done")


def _prepare(client: ChatClient, dsn: str, size: int, count: int) -> list[uuid.UUID]:
    ids = [client.create_conversation(tools=["echo"]) for _ in range(count)]
    with psycopg.connect(dsn) as conn:
        for conversation_id in ids:
            conn.execute(HISTORY, {"id": conversation_id, "quads": size // 4, "size": size})
        conn.execute("ANALYZE messages")
    for conversation_id in ids:
        client.submit_message(conversation_id, "go")
    return ids


class _TimedStore(TurnStore):
    """The real store, noting how long each claim (lease + history read) takes."""

    claims: list[float]

    def claim(
        self,
        conversation_id: uuid.UUID,
        owner: str,
        ttl: float,
        owner_limit: int | None = None,
    ) -> Snapshot | Deferred | None:
        started = time.perf_counter()
        try:
            return super().claim(conversation_id, owner, ttl, owner_limit)
        finally:
            self.claims.append((time.perf_counter() - started) * 1000)


class EchoBench(NamedTuple):
    """A database's engine, a timed store, a client, and a runner of the echo turns."""

    engine: Engine
    store: _TimedStore
    client: ChatClient
    runner: TurnRunner
    dsn: str  # the database for psycopg itself


def echo_bench(database_url: str, histories: Histories | None) -> EchoBench:
    """What a measure of echo turns on `database_url` runs on: the `echo` tool published, the
    instant model, a runner on a timed store (keeping transcripts in `histories`, when given)."""
    engine = make_engine(database_url)
    store = _TimedStore(engine, histories=histories)
    store.claims = []
    tools = fakes.InMemoryTools({"echo": _echo}, annotations=ECHO_READS)
    Upkeep(engine).publish_catalog(asyncio.run(tools.definitions()))
    settings = load_settings(database_url=database_url)
    client = ChatClient(settings, engine=engine, enqueue=lambda _: None)
    model = fakes.ScriptedModel(_model, record=False)
    runner = TurnRunner(store, model=model, tools=tools, settings=settings, owner="bench")
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    return EchoBench(engine, store, client, runner, dsn)


def measure_history(database_url: str, conversations: int) -> tuple[list[Row], dict[str, Any]]:
    engine, store, client, runner, dsn = echo_bench(database_url, Histories(1024))
    prepared = {size: _prepare(client, dsn, size, conversations) for size in SIZES}
    # Interleaved (10, 1000, 10000, 10, ...), so a noisy neighbour slows every size alike.
    order = [(size, prepared[size][i]) for i in range(conversations) for size in SIZES]
    firsts = asyncio.run(_run(runner, [conversation_id for _, conversation_id in order]))
    first_claims = list(store.claims)
    store.claims = []
    for _, conversation_id in order:
        client.submit_message(conversation_id, "again")
    turns = asyncio.run(_run(runner, [conversation_id for _, conversation_id in order]))
    engine.dispose()
    cold: dict[int, list[float]] = {size: [] for size in SIZES}
    for (size, _), turn, claim in zip(order, firsts, first_claims, strict=True):
        cold[size].append(claim)
        del turn
    whole: dict[int, list[float]] = {size: [] for size in SIZES}
    claims: dict[int, list[float]] = {size: [] for size in SIZES}
    steps: dict[int, list[float]] = {size: [] for size in SIZES}
    for (size, _), turn, claim in zip(order, turns, store.claims, strict=True):
        whole[size].append(turn / ITERATIONS_PER_TURN)
        claims[size].append(claim)
        steps[size].append((turn - claim) / ITERATIONS_PER_TURN)
    first, last = SIZES[0], SIZES[-1]
    rows: list[Row] = []
    for size in SIZES:
        rows += [
            (f"history {size:>5} msgs: durable loop", *_spread(whole[size]), "ms/iteration"),
            (f"history {size:>5} msgs: claim (kept transcript)", *_spread(claims[size]), "ms/turn"),
            (f"history {size:>5} msgs: first claim in a process", *_spread(cold[size]), "ms/turn"),
            (
                f"history {size:>5} msgs: steps after the claim",
                *_spread(steps[size]),
                "ms/iteration",
            ),
        ]
    extra = {
        "ratio_last_to_first": median(whole[last]) / median(whole[first]),
        "steps_ratio_last_to_first": median(steps[last]) / median(steps[first]),
        "goal_ratio": GOAL_RATIO,
        "sizes": list(SIZES),
    }
    return rows, extra


def _spread(samples: list[float]) -> tuple[float, float]:
    return median(samples), p95(samples)


async def _run(runner: TurnRunner, ids: list[uuid.UUID]) -> list[float]:
    """Milliseconds per turn."""
    samples = []
    for conversation_id in ids:
        started = time.perf_counter()
        outcome = await runner.run(conversation_id)
        assert outcome is Outcome.IDLE, outcome
        samples.append((time.perf_counter() - started) * 1000)
    return samples
