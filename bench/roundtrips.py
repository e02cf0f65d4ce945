"""Database round trips, counted from libpq's own protocol trace.

A round trip is a run of frontend messages followed by the server's answer: each switch from a
client (`F`) line to a server (`B`) line in the trace. Pipelined statements share one.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import pq
from sqlalchemy import Engine, event

from app.loop_connections import LoopConnections


def count_round_trips(trace: str) -> int:
    trips, sending = 0, False
    for line in trace.splitlines():
        if line.startswith("F\t"):
            sending = True
        elif line.startswith("B\t") and sending:
            trips, sending = trips + 1, False
    return trips


class Tracer:
    """Traces every psycopg connection handed to it, one file each (threads never interleave)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._files: list[IO[str]] = []
        self._traced: list[pq.abc.PGconn] = []

    def trace(self, connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
        handle = open(self.directory / f"trace-{len(self._files)}.txt", "w+")  # noqa: SIM115
        self._files.append(handle)
        connection.pgconn.trace(handle.fileno())
        connection.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        self._traced.append(connection.pgconn)

    def round_trips(self) -> int:
        total = 0
        for handle in self._files:
            handle.flush()
            handle.seek(0)
            total += count_round_trips(handle.read())
        return total

    def close(self) -> None:
        for pgconn in self._traced:
            with contextlib.suppress(Exception):
                pgconn.untrace()
        for handle in self._files:
            handle.close()


@contextlib.contextmanager
def traced_engine(engine: Engine) -> Iterator[Tracer]:
    """Trace the connections `engine` opens from now on (dispose it first to trace them all)."""
    with tempfile.TemporaryDirectory() as directory:
        tracer = Tracer(Path(directory))

        def on_connect(dbapi_connection: Any, _record: object) -> None:
            tracer.trace(dbapi_connection)

        event.listen(engine, "connect", on_connect)
        try:
            yield tracer
        finally:
            event.remove(engine, "connect", on_connect)
            tracer.close()


@contextlib.contextmanager
def traced_loop_connections(connections: LoopConnections | None, tracer: Tracer) -> Iterator[None]:
    """Trace the connections a store opens for its steps on the event loop from now on."""
    if connections is None:
        yield
        return
    connections.opened.append(tracer.trace)
    try:
        yield
    finally:
        connections.opened.remove(tracer.trace)


@contextlib.contextmanager
def traced_connection(connection: psycopg.Connection[Any]) -> Iterator[Tracer]:
    with tempfile.TemporaryDirectory() as directory:
        tracer = Tracer(Path(directory))
        tracer.trace(connection)
        try:
            yield tracer
        finally:
            tracer.close()
