"""Storage: bytes written per 10-iteration conversation through the real loop, as relation
growth (messages + conversations, with indexes and TOAST; the event log and the turns apart, beside
the messages) and as WAL bytes per turn."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.testing import fakes
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.store import TurnStore
from bench.overhead import _echo, _model, _prepare
from bench.stats import Row, median, p95, single

SIZE = "SELECT pg_total_relation_size('messages') + pg_total_relation_size('conversations')"
TABLES = ("messages", "events", "turns")

ECHO_READS = {"echo": fakes.READ_ONLY}  # a pure function: it may simply run again


def measure_storage(database_url: str, conversations: int) -> tuple[list[Row], dict[str, Any]]:
    engine = make_engine(database_url)
    tools = fakes.InMemoryTools({"echo": _echo}, annotations=ECHO_READS)
    settings = load_settings(database_url=database_url)
    client = ChatClient(settings, engine=engine, enqueue=lambda _: None)
    runner = TurnRunner(
        TurnStore(engine),
        model=fakes.ScriptedModel(_model),
        tools=tools,
        settings=settings,
        owner="bench",
    )
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = _scalar(conn, SIZE)
        tables_before = {t: _scalar(conn, "SELECT pg_total_relation_size(%s)", t) for t in TABLES}
        ids = _prepare(client, conversations)  # create + submit count as the conversation's
        wal: list[float] = []

        async def run_all() -> None:
            for conversation_id in ids:
                # WAL is cluster-wide: other databases' writes land in a sample now and then,
                # which is why the median, not the total, is reported.
                start = _scalar(conn, "SELECT pg_current_wal_lsn()::text")
                outcome = await runner.run(conversation_id)
                assert outcome is Outcome.IDLE, outcome
                wal.append(_scalar(conn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", start))

        asyncio.run(run_all())
        after = _scalar(conn, SIZE)
        tables = {
            t: (_scalar(conn, "SELECT pg_total_relation_size(%s)", t) - tables_before[t])
            / conversations
            for t in TABLES
        }
        events_per_turn = _scalar(conn, "SELECT count(*) FROM events") / conversations
    engine.dispose()
    per_conversation = (after - before) / conversations
    rows = [
        single("storage: table+index bytes / conversation", per_conversation, "bytes"),
        single("storage: message bytes / 10-iteration turn", tables["messages"], "bytes"),
        single("storage: event-log bytes / 10-iteration turn", tables["events"], "bytes"),
        single("storage: events / 10-iteration turn", events_per_turn, "events"),
        single("storage: turn row bytes / turn", tables["turns"], "bytes"),
        ("storage: WAL bytes / 10-iteration turn", median(wal), p95(wal), "bytes"),
    ]
    extra = {
        "conversations": conversations,
        "relation_bytes_before": before,
        "relation_bytes_after": after,
        "table_bytes_per_turn": tables,
        "events_per_turn": events_per_turn,
        "wal_bytes_per_turn": wal,
    }
    return rows, extra


def _scalar(conn: psycopg.Connection, query: str, *params: Any) -> Any:
    row = conn.execute(query, params or None).fetchone()
    assert row is not None
    return float(row[0]) if not isinstance(row[0], str) else row[0]
