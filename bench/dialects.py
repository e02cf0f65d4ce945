"""`dialects`: N streams of the other clients' dialects open at once on one API process, the
OpenAI Responses stream (`GET /v1/responses/{id}?stream=true`) and the AI SDK's UI message
stream (`GET /v1/ai-sdk/chat/{id}/stream`), while a worker runs their turns; and, as the floor of
the same run, our own stream (`GET /v1/conversations/{id}/stream`) read the same way.

Each step: N conversations, each with a turn queued but not rung (and the worker frozen, SIGSTOP,
in case its sweep rings one), so every stream is open before its turn starts; then the worker
goes on and the turns are rung at `rate` per second (as `sse` submits them), while the N streams
stay open. What is timed is each commit to the stream's event for
it, on the same machine's clock: the reply's commit (`message.committed`, its `created_at`, the
worker's clock just before the commit) to the event that shows it (`response.output_item.done`
of the message; the AI SDK's `text-end`), and the turn's end (`turn.completed`) to the last
event (`response.completed`; `finish`). Both dialects render a follower of the conversation, as
our own stream is (`bench/api.py` `sse` measures that one, with its floor of events).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from app.client import ChatClient
from app.client.doorbell import QueueRinger
from app.models import MESSAGE_COMMITTED, TURN_COMPLETED
from bench import loadgen
from bench.api import (
    OPENING,
    OWNER,
    SSE_ANSWER,
    SSE_GRACE,
    WARM_UP_TURNS,
    deployment,
    log_warnings,
    threads,
)
from bench.loadgen import SseStream
from bench.stats import Row, median, p95, single
from bench.workers import rss_mb

OPEN_ATTEMPTS = 3


@dataclass(frozen=True)
class Dialect:
    name: str
    reply_shown: str  # the event (or chunk type) that shows the committed reply
    ended: str  # the last one

    def path(self, turn_id: uuid.UUID, conversation_id: uuid.UUID) -> str:
        if self.name == "responses":
            return f"/v1/responses/resp_{turn_id.hex}?stream=true"
        if self.name == "ai-sdk":
            return f"/v1/ai-sdk/chat/{conversation_id}/stream"
        return f"/v1/conversations/{conversation_id}/stream?after=0"

    def kind(self, sse: loadgen.Sse) -> str:
        """The event's type: an SSE event name (Responses; ours, where only the assistant's
        message counts), a chunk's type (the AI SDK)."""
        if self.name == "responses":
            return sse.event
        if self.name == "ai-sdk":
            return "[DONE]" if sse.data == "[DONE]" else str(json.loads(sse.data)["type"])
        if sse.event == MESSAGE_COMMITTED:
            role = json.loads(sse.data).get("message", {}).get("role")
            return MESSAGE_COMMITTED if role == "assistant" else "user message"
        return sse.event


DIALECTS = (
    Dialect("responses", "response.output_item.done", "response.completed"),
    Dialect("ai-sdk", "text-end", "finish"),
    # our own stream, read the same way: the floor of this run
    Dialect("ours", MESSAGE_COMMITTED, TURN_COMPLETED),
)


@dataclass
class Arrivals:
    """When each stream saw the events that are timed."""

    dialect: Dialect
    seen: dict[uuid.UUID, dict[str, float]] = field(default_factory=dict)
    ended: set[uuid.UUID] = field(default_factory=set)
    events: int = 0
    all_ended: asyncio.Event = field(default_factory=asyncio.Event)
    expected: int = 0

    def on_event(self, turn_id: uuid.UUID) -> Any:
        def seen(sse: loadgen.Sse) -> None:
            self.events += 1
            kind = self.dialect.kind(sse)
            if kind in (self.dialect.reply_shown, self.dialect.ended):
                self.seen.setdefault(turn_id, {}).setdefault(kind, sse.received)
            if kind == self.dialect.ended:
                self.ended.add(turn_id)
                if len(self.ended) == self.expected:
                    self.all_ended.set()

        return seen


def measure_dialects(
    database_url: str,
    redis_url: str,
    workdir: Path,
    count: int,
    *,
    idle_seconds: float,
    rate: float,
    warm_up: int = WARM_UP_TURNS,
) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    found: dict[str, Any] = {"streams": count, "idle_seconds": idle_seconds, "rate": rate}
    # The turns wait unrung for their streams: the recovery rounds must not ring them first
    # (a queued turn untouched for the lost-doorbell window, any for a lease's time).
    held = {"CHATWORKER_LEASE_TTL_SECONDS": "600", "CHATWORKER_LOST_DOORBELL_SECONDS": "600"}
    with deployment(
        database_url, redis_url, workdir, SSE_ANSWER, worker=True, worker_env=held
    ) as d:
        ids = d.rig.submit(warm_up)  # the worker's first model calls, its pools
        d.rig.wait_idle(ids, timeout=60)
        for dialect in DIALECTS:
            step = loadgen.run(_step(d, dialect, count, idle_seconds, rate))
            found[dialect.name] = step
            latencies = step["reply_ms"] + step["end_ms"]
            rows += [
                (
                    f"dialects: {count} {dialect.name} streams, commit -> client",
                    median(latencies),
                    p95(latencies),
                    "ms",
                ),
                single(
                    f"dialects: {count} {dialect.name} streams open, API threads",
                    step["api_threads_open"],
                    "threads",
                ),
                single(
                    f"dialects: {count} {dialect.name} streams open, API RSS",
                    step["api_rss_mb_open"],
                    "MB",
                ),
            ]
        found["api_log_warnings"] = log_warnings(d.api.log_path)
        found["load_average"] = os.getloadavg()
    return rows, found


async def _step(
    d: Any, dialect: Dialect, count: int, idle_seconds: float, rate: float
) -> dict[str, Any]:
    client = d.rig.client
    held = ChatClient(client.settings, engine=client.engine, enqueue=lambda _: None)
    assert d.worker is not None
    d.worker.pause()  # every turn waits for its stream to be open
    try:
        turns = await asyncio.to_thread(_queue_turns, held, count)
        arrivals = Arrivals(dialect, expected=count)
        streams: list[SseStream] = []
        refused: Counter[str] = Counter()
        opened = time.perf_counter()
        await loadgen.bounded(
            OPENING,
            [
                _opener(
                    d,
                    dialect,
                    turn_id=t,
                    conversation_id=c,
                    arrivals=arrivals,
                    streams=streams,
                    refused=refused,
                )
                for t, c in turns
            ],
        )
        opened_seconds = time.perf_counter() - opened
        await asyncio.sleep(idle_seconds)
        found: dict[str, Any] = {
            "streams_open": len(streams),
            "open_refusals": dict(refused),
            "opened_per_second": len(streams) / opened_seconds,
            "api_threads_open": threads(d.pid),
            "api_rss_mb_open": rss_mb(d.pid),
        }
    finally:
        d.worker.resume()
    ringer = QueueRinger(client.settings)
    try:
        await asyncio.to_thread(_ring, ringer, [c for _, c in turns], rate)
        await asyncio.wait_for(arrivals.all_ended.wait(), timeout=SSE_GRACE)
    except TimeoutError:
        pass
    finally:
        for stream in streams:
            await stream.close()
        ringer.close()
    committed = await asyncio.to_thread(_committed_at, client, [t for t, _ in turns])
    reply_ms, end_ms = [], []
    for turn_id, seen in arrivals.seen.items():
        reply, end = committed[turn_id]
        if dialect.reply_shown in seen and reply is not None:
            reply_ms.append((seen[dialect.reply_shown] - reply) * 1000)
        if dialect.ended in seen and end is not None:
            end_ms.append((seen[dialect.ended] - end) * 1000)
    if not reply_ms or not end_ms:
        raise RuntimeError(f"no {dialect.name} stream saw its turn: {arrivals.events} events")
    found.update(
        reply_ms=reply_ms,
        end_ms=end_ms,
        events=arrivals.events,
        turns_seen_ending=len(arrivals.ended),
    )
    return found


def _queue_turns(client: Any, count: int) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """(turn, conversation) of `count` new conversations, each with its turn queued."""
    turns = []
    for _ in range(count):
        conversation_id = client.create_conversation(owner=OWNER)
        submitted = client.submit_message(conversation_id, "hello", owner=OWNER)
        turns.append((submitted.turn_id, conversation_id))
    return turns


def _ring(ringer: QueueRinger, conversations: list[uuid.UUID], rate: float) -> None:
    """Each conversation's doorbell, `rate` per second: its turn starts."""
    started = time.perf_counter()
    for n, conversation_id in enumerate(conversations):
        pause = started + n / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        ringer(conversation_id)


def _opener(
    d: Any,
    dialect: Dialect,
    *,
    turn_id: uuid.UUID,
    conversation_id: uuid.UUID,
    arrivals: Arrivals,
    streams: list[SseStream],
    refused: Counter[str],
) -> Any:
    async def attempts() -> None:
        for attempt in range(OPEN_ATTEMPTS):
            stream = SseStream(d.connection(), arrivals.on_event(turn_id))
            try:
                await stream.open(dialect.path(turn_id, conversation_id))
            except loadgen.HttpError as exc:
                await stream.close()
                refused[str(exc)[:80]] += 1
                if attempt < OPEN_ATTEMPTS - 1:
                    await asyncio.sleep(1.0)
                continue
            streams.append(stream)
            return
        refused["given up"] += 1

    return attempts


def _committed_at(
    client: Any, turn_ids: list[uuid.UUID]
) -> dict[uuid.UUID, tuple[float | None, float | None]]:
    """Each turn's reply commit and end, as the worker stamped them (`created_at`)."""
    found: dict[uuid.UUID, tuple[float | None, float | None]] = {}
    for turn_id in turn_ids:
        record = client.turn_record(turn_id, owner=OWNER)
        reply = end = None
        for event in record.events:
            if (
                event.type == MESSAGE_COMMITTED
                and event.message is not None
                and event.message.role == "assistant"
            ):
                reply = _stamp(event.created_at)
            elif event.type == TURN_COMPLETED:
                end = _stamp(event.created_at)
        found[turn_id] = (reply, end)
    return found


def _stamp(created_at: datetime | str) -> float:
    if isinstance(created_at, str):
        created_at = datetime.fromisoformat(created_at)
    return created_at.timestamp()
