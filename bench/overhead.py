"""Durable overhead per loop iteration: the real ChatService with an instant in-process model and
tool, beside a raw psycopg loop performing the same commits (plain, and in pipeline mode).

An iteration is one model step (assistant tool call + `tool_loop`, one transaction) and one tool
step (its result, one transaction). Turns are 10 iterations: 9 tool rounds and a final answer.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass

import psycopg
from sqlalchemy import Engine

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.worker import testing
from app.worker.loop import ChatService, LoopConfig, Outcome
from app.worker.ports import ModelReply, ModelRequest
from app.worker.store import Store
from bench.stats import median, p95

ITERATIONS_PER_TURN = 10


@dataclass
class Result:
    name: str
    per_iteration_ms: list[float]

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
        return testing.calls((f"c{rounds}", "echo", {"n": rounds}))
    return testing.text("done")


def _prepare(client: ChatClient, count: int) -> list[uuid.UUID]:
    tools = testing.InMemoryTools({"echo": str})
    Store(client.engine).publish_catalog(asyncio.run(tools.definitions()))
    ids = []
    for _ in range(count):
        conversation_id = client.create_conversation(tools=["echo"])
        client.submit_message(conversation_id, "go")
        ids.append(conversation_id)
    return ids


def measure_loop(database_url: str, conversations: int) -> Result:
    engine = make_engine(database_url)
    tools = testing.InMemoryTools({"echo": _echo})
    store = Store(engine)
    client = ChatClient(
        load_settings(database_url=database_url), engine=engine, enqueue=lambda _: None
    )
    ids = _prepare(client, conversations)
    service = ChatService(
        store, model=testing.ScriptedModel(_model), tools=tools, config=LoopConfig(), owner="bench"
    )
    samples = []

    async def run_all() -> None:
        for conversation_id in ids:
            started = time.perf_counter()
            outcome = await service.run(conversation_id)
            elapsed = time.perf_counter() - started
            assert outcome is Outcome.IDLE, outcome
            samples.append(elapsed * 1000 / ITERATIONS_PER_TURN)

    asyncio.run(run_all())
    engine.dispose()
    return Result("durable loop (ChatService)", samples)


def measure_floor(database_url: str, conversations: int, pipeline: bool) -> Result:
    engine: Engine = make_engine(database_url)
    client = ChatClient(
        load_settings(database_url=database_url), engine=engine, enqueue=lambda _: None
    )
    ids = _prepare(client, conversations)
    engine.dispose()
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    samples = []
    with psycopg.connect(dsn) as conn:
        for conversation_id in ids:
            started = time.perf_counter()
            _floor_turn(conn, conversation_id, pipeline)
            samples.append((time.perf_counter() - started) * 1000 / ITERATIONS_PER_TURN)
    return Result(f"floor: raw psycopg{' pipeline' if pipeline else ''}", samples)


def _floor_turn(conn: psycopg.Connection, conversation_id: uuid.UUID, pipeline: bool) -> None:
    """The same commits as the loop: claim + load, then per iteration a fenced update + insert."""
    claim = (
        "UPDATE conversations SET lease_owner='floor', lease_epoch=lease_epoch+1, "
        "lease_expires_at=now()+interval '30 s', heartbeat_at=now(), attempts=attempts+1 "
        "WHERE id=%s AND status IN ('processing','tool_loop') RETURNING lease_epoch"
    )
    fence = (
        "UPDATE conversations SET status=%s, heartbeat_at=now(), updated_at=now(), "
        "lease_expires_at=now()+interval '30 s', attempts=0, iterations=iterations+%s "
        "WHERE id=%s AND lease_epoch=%s"
    )
    insert = (
        "INSERT INTO messages (conversation_id, seq, role, content, tool_calls, tool_call_id, "
        "tool_name, is_error) VALUES (%s, %s, %s, %s, %s, %s, %s, false)"
    )
    epoch = conn.execute(claim, (conversation_id,)).fetchone()[0]  # type: ignore[index]
    conn.execute(
        "SELECT * FROM messages WHERE conversation_id=%s ORDER BY seq", (conversation_id,)
    ).fetchall()
    conn.commit()
    seq = 1
    for step in range(ITERATIONS_PER_TURN):
        final = step == ITERATIONS_PER_TURN - 1
        if pipeline:
            with conn.pipeline():
                seq = _floor_iteration(
                    conn,
                    fence,
                    insert,
                    conversation_id,
                    epoch=epoch,
                    seq=seq,
                    step=step,
                    final=final,
                )
        else:
            seq = _floor_iteration(
                conn, fence, insert, conversation_id, epoch=epoch, seq=seq, step=step, final=final
            )


def _floor_iteration(
    conn: psycopg.Connection,
    fence: str,
    insert: str,
    conversation_id: uuid.UUID,
    *,
    epoch: int,
    seq: int,
    step: int,
    final: bool,
) -> int:
    status = "idle" if final else "tool_loop"
    calls = None if final else json.dumps([{"id": f"c{step}", "name": "echo", "arguments": "{}"}])
    conn.execute(fence, (status, 1, conversation_id, epoch))
    seq += 1
    conn.execute(
        insert, (conversation_id, seq, "assistant", "done" if final else None, calls, None, None)
    )
    conn.commit()
    if final:
        return seq
    conn.execute(fence, ("tool_loop", 0, conversation_id, epoch))
    seq += 1
    conn.execute(insert, (conversation_id, seq, "tool", str(step), None, f"c{step}", "echo"))
    conn.commit()
    return seq
