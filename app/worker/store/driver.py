"""How the turn's statements reach the database, chosen once per engine by `make_driver`.

`PsycopgDriver` (PostgreSQL through psycopg 3): each statement compiled once and executed by the
driver on a pooled connection in autocommit. A step is one statement, so SQLAlchemy's
per-execution work (connection object, events, result wrapping) cost as much as the round trip
itself (0.93 ms against 0.64 ms per step, measured); the connections still come from the engine's
pool, with its disconnect check. `CoreDriver` runs the same statements through SQLAlchemy Core on
any other database (SQLite), a step's UPDATE and INSERT inside one transaction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError

from app.db import psycopg_driven
from app.loop_connections import LoopConnections
from app.models.raw_statement import RawStatement
from app.worker import loop_bridge
from app.worker.store.claim_statements import DEFERRED, OWNER_LOCK, TRANSCRIPT
from app.worker.store.composites import CLAIM_COMPOSITE, CLAIM_LIMITED_COMPOSITE, COMPOSITES
from app.worker.store.fence import StepKind, Write
from app.worker.store.journal import JSON_PARAMETERS, Composite

Row = tuple[Any, ...]

# PostgreSQL plans a prepared statement afresh on each of its first five runs on a connection (a
# custom plan) before it may settle on one plan for all: the claim's CTE takes 3.4 ms to plan,
# measured, most of an idle worker's pickup. The sixth run is the first that can use the plan kept.
WARM_RUNS = 6
# The most connections a worker process's steps hold at once on its event loop (a step holds one
# for its one statement; as many as the database threads the rest of the store uses).
LOOP_CONNECTIONS = 8


class StepConflict(Exception):
    """The fence matched but the message's seq or tool-call id is already taken."""


Op = Write | StepKind


class Driver(Protocol):
    def claim(self, claim: Mapping[str, Any], transcript: Mapping[str, Any]) -> ClaimRows | None:
        """The claim with its parts in one transaction; if it granted a lease, TRANSCRIPT read
        after it."""
        ...

    def claim_limited(
        self, claim: Mapping[str, Any], transcript: Mapping[str, Any]
    ) -> ClaimRows | Deferred | None:
        """The claim under the owner's limit (`claim["owner_limit"]`): as `claim`, or
        `DEFERRED_CLAIM` when only the limit stood in the way (its heartbeat touched)."""
        ...

    def run(self, op: Op, parameters: Mapping[str, Any]) -> Row | None:
        """A fenced UPDATE and its parts, atomically: the UPDATE's row, or None if the fence did
        not match (nothing was written). Raises `StepConflict` when the fence matched but a part
        could not be written (a message's seq or tool-call id already taken)."""
        ...

    def transcript(self, transcript: Mapping[str, Any]) -> list[Row]:
        """TRANSCRIPT on its own (a claim's kept transcript turned out stale)."""
        ...

    def warm(
        self,
        claim: Mapping[str, Any],
        transcript: Mapping[str, Any],
        limited: bool,
        connections: int = 1,
    ) -> None:
        """Run the claim's statements (`limited`: under the owner's limit) and TRANSCRIPT
        `WARM_RUNS` times on each of `connections` connections, with parameters that name no
        conversation, so the first doorbell finds them planned (see `PsycopgDriver.warm`)."""
        ...

    @property
    def on_loop(self) -> bool:
        """Whether `run`, called inside `loop_bridge.run`, awaits its statement on the event
        loop (else it blocks there: call it from a thread)."""
        ...

    def close(self) -> None:
        """Close the connections the driver keeps of its own."""
        ...


ClaimRows = tuple[Row, list[Row]]


class Deferred:
    """A claim the owner's limit refused: the conversation waits for one of its owner's turns."""

    def __repr__(self) -> str:
        return "DEFERRED_CLAIM"


DEFERRED_CLAIM = Deferred()


def make_driver(engine: Engine) -> Driver:
    """The fast path on PostgreSQL through psycopg 3, SQLAlchemy Core anywhere else."""
    if psycopg_driven(engine):
        return PsycopgDriver(engine)
    return CoreDriver(engine)


# --- PostgreSQL through psycopg ---------------------------------------------------------------


class PsycopgDriver:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._claim = self._prepare(CLAIM_COMPOSITE)
        self._claim_limited = self._prepare(CLAIM_LIMITED_COMPOSITE)
        self._owner_lock = RawStatement(OWNER_LOCK, engine)
        self._deferred = RawStatement(DEFERRED, engine)
        self._transcript = RawStatement(TRANSCRIPT, engine)
        self._ops = {op: self._prepare(composite) for op, composite in COMPOSITES.items()}
        self.loop_connections = LoopConnections(engine, LOOP_CONNECTIONS)

    def _prepare(self, composite: Composite) -> RawStatement:
        return RawStatement(composite.one_statement(), self.engine, json_parameters=JSON_PARAMETERS)

    def claim(self, claim: Mapping[str, Any], transcript: Mapping[str, Any]) -> ClaimRows | None:
        with autocommit_connection(self.engine) as connection:
            rows = self._claim.rows(connection, claim)
            if not rows:
                return None
            return rows[0], self._transcript.rows(connection, transcript)

    def claim_limited(
        self, claim: Mapping[str, Any], transcript: Mapping[str, Any]
    ) -> ClaimRows | Deferred | None:
        # The owner's lock first, then the claim as a statement of its own: it starts after
        # any other claim of the owner committed, so its count sees that lease.
        with autocommit_connection(self.engine) as connection:
            with connection.transaction():
                self._owner_lock.rows(connection, claim)
                rows = self._claim_limited.rows(connection, claim)
                if not rows:
                    touched = self._deferred.rows(connection, claim)
                    return DEFERRED_CLAIM if touched else None
            return rows[0], self._transcript.rows(connection, transcript)

    def run(self, op: Op, parameters: Mapping[str, Any]) -> Row | None:
        try:
            if loop_bridge.on_loop():  # awaited on the event loop (`loop_bridge.run`)
                rows = loop_bridge.await_(self._run_on_loop(op, parameters))
            else:
                with autocommit_connection(self.engine) as connection:
                    rows = self._ops[op].rows(connection, parameters)
        except psycopg.IntegrityError as exc:
            raise StepConflict(str(exc)) from exc
        return rows[0] if rows else None

    @property
    def on_loop(self) -> bool:
        return True

    async def _run_on_loop(self, op: Op, parameters: Mapping[str, Any]) -> list[Row]:
        async with self.loop_connections.connection() as connection:
            return await self._ops[op].rows_on_loop(connection, parameters)

    def close(self) -> None:
        self.loop_connections.close()

    def warm(
        self,
        claim: Mapping[str, Any],
        transcript: Mapping[str, Any],
        limited: bool,
        connections: int = 1,
    ) -> None:
        """On `connections` pooled connections at once (the pool's, so any may take the next
        claim). The parameters name no conversation: every statement matches no row and writes
        nothing. Not in a transaction rolled back: psycopg forgets the statements it prepared in
        one."""
        claims = (
            [self._owner_lock, self._claim_limited, self._deferred] if limited else [self._claim]
        )
        with contextlib.ExitStack() as held:
            for _ in range(connections):
                connection = held.enter_context(autocommit_connection(self.engine))
                for _ in range(WARM_RUNS):
                    for statement in claims:
                        statement.rows(connection, claim)
                    self._transcript.rows(connection, transcript)

    def transcript(self, transcript: Mapping[str, Any]) -> list[Row]:
        with autocommit_connection(self.engine) as connection:
            return self._transcript.rows(connection, transcript)


@contextlib.contextmanager
def autocommit_connection(engine: Engine) -> Iterator[psycopg.Connection[Any]]:
    """A pooled connection in autocommit; a connection that broke is never pooled again."""
    pooled = engine.raw_connection()
    try:
        connection: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]
        connection.autocommit = True
        try:
            yield connection
        finally:
            if not connection.closed:
                connection.autocommit = False
    except psycopg.OperationalError:
        pooled.invalidate()
        raise
    finally:
        pooled.close()


# --- any other database through SQLAlchemy Core ---------------------------------------------


class CoreDriver:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._claim = Sequenced(CLAIM_COMPOSITE)
        self._claim_limited = Sequenced(CLAIM_LIMITED_COMPOSITE)
        self._ops = {op: Sequenced(composite) for op, composite in COMPOSITES.items()}

    def claim(self, claim: Mapping[str, Any], transcript: Mapping[str, Any]) -> ClaimRows | None:
        with self.engine.begin() as connection:
            found = self._claim.run(connection, claim)
            if found is None:
                return None
            return found, [tuple(m) for m in connection.execute(TRANSCRIPT, dict(transcript))]

    def claim_limited(
        self, claim: Mapping[str, Any], transcript: Mapping[str, Any]
    ) -> ClaimRows | Deferred | None:
        with self.engine.begin() as connection:  # (one writer at a time: the count is exact)
            found = self._claim_limited.run(connection, claim)
            if found is None:
                touched = connection.execute(DEFERRED, dict(claim)).first()
                return DEFERRED_CLAIM if touched is not None else None
            return found, [tuple(m) for m in connection.execute(TRANSCRIPT, dict(transcript))]

    def run(self, op: Op, parameters: Mapping[str, Any]) -> Row | None:
        try:
            with self.engine.begin() as connection:
                return self._ops[op].run(connection, parameters)
        except IntegrityError as exc:
            raise StepConflict(str(exc.orig)) from exc

    def warm(
        self,
        claim: Mapping[str, Any],
        transcript: Mapping[str, Any],
        limited: bool,
        connections: int = 1,
    ) -> None:
        """Nothing: SQLite plans in microseconds."""

    def transcript(self, transcript: Mapping[str, Any]) -> list[Row]:
        with self.engine.connect() as connection:
            return [tuple(m) for m in connection.execute(TRANSCRIPT, dict(transcript))]

    @property
    def on_loop(self) -> bool:
        return False

    def close(self) -> None:
        """Nothing of its own: the engine's pool."""


class Sequenced:
    """A composite as a sequence of statements in the caller's transaction."""

    def __init__(self, composite: Composite) -> None:
        self.head = composite.head
        self.parts = composite.bound_parts()

    def run(self, connection: Connection, parameters: Mapping[str, Any]) -> Row | None:
        found = connection.execute(self.head, dict(parameters)).one_or_none()
        if found is None:
            return None
        row = {f"f_{key}": value for key, value in found._mapping.items()}
        for part in self.parts:
            connection.execute(part, {**parameters, **row})
        return tuple(found)


__all__ = [
    "DEFERRED_CLAIM",
    "LOOP_CONNECTIONS",
    "WARM_RUNS",
    "CoreDriver",
    "Deferred",
    "Driver",
    "PsycopgDriver",
    "Sequenced",
    "StepConflict",
    "autocommit_connection",
    "make_driver",
]
