"""Durable overhead per loop iteration: the real TurnRunner with an instant in-process model and
tool, beside a raw psycopg loop performing the same commits (plain, and in pipeline mode).

An iteration is one model step (assistant tool call + `tool_loop`, one transaction) and one tool
step (its result, one transaction). Turns are 10 iterations: 9 tool rounds and a final answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import Engine

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.telemetry import metrics
from app.testing import fakes
from app.worker import event_loop
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.ports import ModelReply, ModelRequest
from app.worker.store import TurnStore, Upkeep
from bench.roundtrips import traced_connection, traced_engine, traced_loop_connections
from bench.stats import median, p95

ITERATIONS_PER_TURN = 10

ECHO_READS = {"echo": fakes.READ_ONLY}  # a pure function: it may simply run again


@dataclass
class Result:
    name: str
    per_iteration_ms: list[float]
    round_trips_per_iteration: float = 0.0

    @property
    def median(self) -> float:
        return median(self.per_iteration_ms)

    @property
    def p95(self) -> float:
        return p95(self.per_iteration_ms)


def _echo(n: int) -> str:
    return str(n)


def _model(request: ModelRequest) -> ModelReply:
    rounds = sum(1 for m in request.messages if m["role"] == "assistant")
    if rounds < ITERATIONS_PER_TURN - 1:
        return fakes.calls((f"c{rounds}", "echo", {"n": rounds}))
    return fakes.text("done")


def _prepare(client: ChatClient, count: int) -> list[uuid.UUID]:
    tools = fakes.InMemoryTools({"echo": str}, annotations=ECHO_READS)
    Upkeep(client.engine).publish_catalog(asyncio.run(tools.definitions()))
    ids = []
    for _ in range(count):
        conversation_id = client.create_conversation(tools=["echo"])
        client.submit_message(conversation_id, "go")
        ids.append(conversation_id)
    return ids


TRACED_TURNS = 3  # turns run again under libpq's trace to count round trips
# Untimed turns first: the first variant measured paid for the process's first turns (warm-up of
# prepared statements, pools and caches), making the next variants look cheaper than they are.
WARM_UP_TURNS = 10


LOOP = "durable loop (TurnRunner)"
LOOP_WITHOUT_CACHE = "durable loop, session tool cache off"
LOOP_TRACED = "durable loop, tracing on"
LOOP_WITHOUT_METRICS = "durable loop, metrics off"
LOOP_ON_ASYNCIO = "durable loop, asyncio's event loop"
LOOP_ON_LOOP_IO = "durable loop, steps awaited on the event loop"


def enable_tracing() -> None:
    """Traces from here on in this process, as `OTEL_TRACES_EXPORTER=otlp` would give them (a
    batch processor), to an exporter that drops them: what tracing costs the loop, not a
    collector's network. (Once per process: OpenTelemetry allows one provider.)"""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)


def measure_loop(
    database_url: str,
    conversations: int,
    name: str = LOOP,
    *,
    warm_up: int = WARM_UP_TURNS,
    traced: int = TRACED_TURNS,
    **overrides: Any,
) -> Result:
    """The loop with the default settings, or with `overrides` (a variant's cost, same run)."""
    return measure_loops(database_url, conversations, {name: overrides}, warm_up, traced)[0]


def measure_loops(
    database_url: str,
    conversations: int,
    variants: dict[str, dict[str, Any]],
    warm_up: int = WARM_UP_TURNS,
    traced: int = TRACED_TURNS,
) -> list[Result]:
    """Each variant (its setting overrides) of the loop, measured turn by turn in turns: the
    first turn of each, then the second of each, ..., so the machine's drift over the run
    (another process, a warmer cache) falls on all of them alike."""
    engine = make_engine(database_url)
    tools = fakes.InMemoryTools({"echo": _echo}, annotations=ECHO_READS)
    runs = []
    for overrides in variants.values():
        settings = load_settings(database_url=database_url, **overrides)
        client = ChatClient(settings, engine=engine, enqueue=lambda _: None)
        runner = TurnRunner(
            TurnStore(engine),
            model=fakes.ScriptedModel(_model, record=False),
            tools=tools,
            settings=settings,
            owner="bench",
        )
        runs.append(
            (
                settings,
                runner,
                _prepare(client, warm_up),
                _prepare(client, conversations),
                _prepare(client, traced),
            )
        )
    samples: list[list[float]] = [[] for _ in runs]

    async def one(index: int, conversation_id: uuid.UUID) -> None:
        settings, runner = runs[index][0], runs[index][1]
        metrics.enable(settings.metrics)  # (as a worker host does)
        started = time.perf_counter()
        outcome = await runner.run(conversation_id)
        elapsed = time.perf_counter() - started
        assert outcome is Outcome.IDLE, outcome
        samples[index].append(elapsed * 1000 / ITERATIONS_PER_TURN)

    # The turns on one event loop per kind (`event_loop`: the asyncio variant's apart), kept
    # for all of them as a worker keeps its one loop (and the connections its steps use on it).
    kinds = {run[0].event_loop: event_loop.runner(run[0].event_loop) for run in runs}
    loops = [kinds[run[0].event_loop] for run in runs]

    def interleaved(pick: int) -> None:
        for turn in range(len(runs[0][pick])):
            for index, run in enumerate(runs):
                loops[index].run(one(index, run[pick][turn]))

    interleaved(2)  # caches, prepared statements, pools: not what is measured
    samples = [[] for _ in runs]
    interleaved(3)
    timed = [list(each) for each in samples]
    for runner in kinds.values():
        runner.close()
    engine.dispose()  # (and the stores' connections on the loops: `LoopConnections`)
    results = []
    for index, name in enumerate(variants):
        store = runs[index][1].store
        with (
            traced_engine(engine) as tracer,
            traced_loop_connections(store.loop_connections, tracer),
        ):
            event_loop.run(interleaved_one(runs[index], one, index), runs[index][0].event_loop)
            trips = tracer.round_trips() / (traced * ITERATIONS_PER_TURN)
        engine.dispose()
        results.append(Result(name, timed[index], trips))
    metrics.enable(True)
    return results


async def interleaved_one(run: tuple[Any, ...], one: Any, index: int) -> None:
    for conversation_id in run[4]:
        await one(index, conversation_id)


class Floor(enum.Enum):
    """Ways raw psycopg can make the loop's commits, each a floor for the same work."""

    PLAIN = "raw psycopg"  # BEGIN, UPDATE, INSERT, COMMIT: a round trip each
    PIPELINE = "raw psycopg pipeline"  # the same, pipelined
    ONE_STATEMENT = "raw psycopg one statement"  # the loop's own form: one autocommit CTE per step


def measure_floor(
    database_url: str, conversations: int, floor: Floor, traced: int = TRACED_TURNS
) -> Result:
    engine: Engine = make_engine(database_url)
    client = ChatClient(
        load_settings(database_url=database_url), engine=engine, enqueue=lambda _: None
    )
    ids = _prepare(client, conversations + traced)
    engine.dispose()
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    samples = []
    with psycopg.connect(dsn, autocommit=floor is Floor.ONE_STATEMENT) as conn:
        for conversation_id in ids[traced:]:
            started = time.perf_counter()
            _floor_turn(conn, conversation_id, floor)
            samples.append((time.perf_counter() - started) * 1000 / ITERATIONS_PER_TURN)
        with traced_connection(conn) as tracer:
            for conversation_id in ids[:traced]:
                _floor_turn(conn, conversation_id, floor)
            trips = tracer.round_trips() / (traced * ITERATIONS_PER_TURN)
    return Result(f"floor: {floor.value}", samples, trips)


CLAIM = (
    "UPDATE conversations SET lease_owner='floor', lease_epoch=lease_epoch+1, "
    "lease_expires_at=now()+interval '30 s', heartbeat_at=now(), attempts=attempts+1 "
    "WHERE id=%s AND status IN ('processing','tool_loop') RETURNING lease_epoch"
)
FENCE = (
    "UPDATE conversations SET status=%s, heartbeat_at=now(), updated_at=now(), "
    "lease_expires_at=now()+interval '30 s', attempts=0, iterations=iterations+%s "
    "WHERE id=%s AND lease_epoch=%s"
)
INSERT = (
    "INSERT INTO messages (conversation_id, seq, parent_seq, role, content, tool_calls, "
    "tool_call_id, tool_name, is_error) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, false)"
)
ONE_STATEMENT = (
    "WITH fenced AS (UPDATE conversations SET status=%s, heartbeat_at=now(), updated_at=now(), "
    "lease_expires_at=now()+interval '30 s', attempts=0, iterations=iterations+%s "
    "WHERE id=%s AND lease_epoch=%s RETURNING id) "
    "INSERT INTO messages (conversation_id, seq, parent_seq, role, content, tool_calls, "
    "tool_call_id, tool_name, is_error) SELECT fenced.id, %s, %s, %s, %s, %s::jsonb, %s, %s, "
    "false FROM fenced RETURNING seq"
)


def _floor_turn(conn: psycopg.Connection, conversation_id: uuid.UUID, floor: Floor) -> None:
    """The same commits as the loop: claim + load, then per iteration two fenced steps."""
    epoch = conn.execute(CLAIM, (conversation_id,)).fetchone()[0]  # type: ignore[index]
    conn.execute(
        "SELECT * FROM messages WHERE conversation_id=%s ORDER BY seq", (conversation_id,)
    ).fetchall()
    conn.commit()
    seq = 1
    for step in range(ITERATIONS_PER_TURN):
        final = step == ITERATIONS_PER_TURN - 1
        calls = json.dumps([{"id": f"c{step}", "name": "echo", "arguments": "{}"}])
        seq += 1
        if final:
            message = (seq, seq - 1, "assistant", "done", None, None, None)
        else:
            message = (seq, seq - 1, "assistant", None, calls, None, None)
        _floor_step(
            conn, floor, ("idle" if final else "tool_loop", 1, conversation_id, epoch), message
        )
        if final:
            return
        seq += 1
        message = (seq, seq - 1, "tool", str(step), None, f"c{step}", "echo")
        _floor_step(conn, floor, ("tool_loop", 0, conversation_id, epoch), message)


def _floor_step(
    conn: psycopg.Connection, floor: Floor, fence: tuple[Any, ...], message: tuple[Any, ...]
) -> None:
    if floor is Floor.ONE_STATEMENT:
        assert len(conn.execute(ONE_STATEMENT, (*fence, *message)).fetchall()) == 1
        return
    with conn.pipeline() if floor is Floor.PIPELINE else contextlib.nullcontext():
        conn.execute(FENCE, fence)
        conn.execute(INSERT, (fence[2], *message))
        conn.commit()
