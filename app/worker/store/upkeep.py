"""The worker's housekeeping SQL: finding orphaned, dead and unrung turns (under the sweep lock),
the janitor's stale query and update, and the tool catalogue.

A transaction that holds a lock other workers need (the sweep lock, the catalogue table) ends if it
sits idle for `LOCK_HOLDER_IDLE_LIMIT_S`: a worker frozen inside one (SIGSTOP, a paused VM, a
half-open connection) would otherwise stop every worker's recovery sweep, or every worker's start,
until it woke up: hours, for a connection nobody closes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    delete,
    exists,
    func,
    insert,
    select,
    text,
    tuple_,
    update,
)

from app.db import autocommit_reads
from app.files import store as stored_files
from app.models import (
    FAILED,
    IDLE,
    PENDING,
    REQUIRES_ACTION,
    RUNNING_STATUSES,
)
from app.models.tables import catalog, conversations, deliveries, file_uses, turns
from app.worker.ports import ToolDefinition
from app.worker.store import doorbells, liveness
from app.worker.store.clock import Clock, utc_now
from app.worker.store.composites import COMPOSITES
from app.worker.store.driver import Sequenced
from app.worker.store.fence import Write, fence_parameters
from app.worker.store.journal import usage_parameters

JANITOR = "janitor"  # the lease owner for the moment the janitor fails a turn

# Serializes recovery sweeps across the worker processes of one Postgres database.
_SWEEP_LOCK_KEY = 0x636877  # "chw"
LOCK_HOLDER_IDLE_LIMIT_S = 10.0


@dataclass(frozen=True)
class StaleConversation:
    id: uuid.UUID
    status: str
    heartbeat_at: datetime


@dataclass(frozen=True)
class Unattended:
    """Running conversations to ring again, each with its attempts."""

    dead: list[tuple[uuid.UUID, int]]  # their lease holder died
    queued: list[tuple[uuid.UUID, int]]  # no worker holds them, and none took them in time


@dataclass(frozen=True)
class Pruned:
    conversations: int  # deleted (or, dry, found), with their turns, messages, events, outputs
    batches: int
    longest_batch_s: float  # the longest transaction: what a batch held its locks for
    deliveries: int = 0  # finished webhook deliveries older than the cutoff (or, dry, found)


class Upkeep:
    """Recovery, janitor, retention and catalogue queries, each one short transaction."""

    def __init__(self, engine: Engine, clock: Clock = utc_now) -> None:
        self.engine = engine
        self.reads = autocommit_reads(engine)  # (reads that leave prepared statements be)
        self.clock = clock
        self.lock_holder_idle_limit = LOCK_HOLDER_IDLE_LIMIT_S

    def prune(self, before: datetime, *, batch: int = 1000, dry_run: bool = False) -> Pruned:
        """Delete resting conversations (`idle` or `failed`, no turn waiting behind or for the
        user) last touched before `before`, with everything that is theirs (the foreign keys
        cascade; a file goes with the last conversation that uses it), `batch` at a time, each
        batch its own short transaction. A conversation a submit touches meanwhile is skipped:
        the DELETE checks the conditions again on the row it locks."""
        resting = _resting_before(before)
        finished = and_(deliveries.c.status != PENDING, deliveries.c.created_at < before)
        if dry_run:
            with self.reads.connect() as connection:
                found = connection.execute(
                    select(func.count()).select_from(conversations).where(resting)
                ).scalar_one()
                sent = connection.execute(
                    select(func.count()).select_from(deliveries).where(finished)
                ).scalar_one()
            return Pruned(int(found), 0, 0.0, int(sent))
        total, batches, longest = 0, 0, 0.0
        after: tuple[datetime, uuid.UUID] | None = None  # keyset: past the last batch's rows
        while True:
            started = time.perf_counter()
            where = [resting]
            if after is not None:  # (the index's dead entries of earlier batches are skipped)
                where.append(tuple_(conversations.c.updated_at, conversations.c.id) > after)
            chosen = (
                select(conversations.c.id)
                .where(*where)
                .order_by(conversations.c.updated_at, conversations.c.id)
                .limit(batch)
            )
            with self.engine.begin() as connection:
                # (the files they use: those no other conversation uses go with them)
                candidates = list(
                    connection.execute(
                        select(file_uses.c.file_id)
                        .where(file_uses.c.conversation_id.in_(chosen.scalar_subquery()))
                        .distinct()
                    ).scalars()
                )
                deleted = connection.execute(
                    delete(conversations)
                    .where(conversations.c.id.in_(chosen.scalar_subquery()), resting)
                    .returning(conversations.c.updated_at, conversations.c.id)
                ).all()
                stored_files.forget(connection, candidates)
            longest = max(longest, time.perf_counter() - started)
            if not deleted:
                return Pruned(total, batches, longest, self._prune_deliveries(finished, batch))
            last = max((row.updated_at, row.id) for row in deleted)
            after = (last[0], last[1])
            total, batches = total + len(deleted), batches + 1

    def owner_waiting(self, conversation_id: uuid.UUID, limit: int) -> list[uuid.UUID]:
        """The oldest running conversations of this conversation's owner that no worker holds
        (waiting for one of the owner's turns to end, under a per-owner limit)."""
        owner = (
            select(conversations.c.owner)
            .where(conversations.c.id == conversation_id)
            .scalar_subquery()
        )
        with self.reads.connect() as connection:
            rows = connection.execute(
                select(conversations.c.id)
                .where(
                    conversations.c.owner == owner,
                    conversations.c.status.in_(RUNNING_STATUSES),
                    conversations.c.lease_owner.is_(None),
                    conversations.c.id != conversation_id,
                )
                .order_by(conversations.c.updated_at)
                .limit(limit)
            ).all()
        return [row.id for row in rows]

    def _prune_deliveries(self, finished: Any, batch: int) -> int:
        """Delivered and given-up webhook deliveries past the cutoff (they outlive their
        conversation, so they go by age), `batch` at a time; a pending one is never deleted."""
        total = 0
        while True:
            chosen = select(deliveries.c.id).where(finished).limit(batch)
            with self.engine.begin() as connection:
                deleted = connection.execute(
                    delete(deliveries).where(deliveries.c.id.in_(chosen.scalar_subquery()))
                ).rowcount
            total += deleted
            if deleted < batch:
                return total

    def orphans(self, older_than: float, limit: int = 500) -> list[tuple[uuid.UUID, int]]:
        """Running conversations nobody has touched for `older_than` seconds, with their attempts.

        Covers both a lease that expired (its worker died) and a queued turn whose message the
        queue lost; every write renews `heartbeat_at`, so one indexed condition finds both.
        Empty while another worker's sweep holds the lock.
        """
        cutoff = self.clock() - timedelta(seconds=older_than)
        with self.engine.begin() as connection:
            if not take_sweep_lock(connection, self.lock_holder_idle_limit):
                return []
            rows = connection.execute(
                select(conversations.c.id, conversations.c.attempts)
                .where(_silent_since(cutoff))
                .order_by(conversations.c.heartbeat_at)
                .limit(limit)
            ).all()
        return [(row.id, row.attempts) for row in rows]

    def dead_leases(self, limit: int = 500) -> list[tuple[uuid.UUID, int]]:
        """Running conversations whose lease holder died (its liveness token is no longer held,
        `liveness`), with their attempts. Empty while another worker's sweep holds the lock."""
        if self.engine.dialect.name != "postgresql":
            return []  # (no tokens)
        with self.engine.begin() as connection:
            if not take_sweep_lock(connection, self.lock_holder_idle_limit):
                return []
            return liveness.dead_leases(connection, limit)

    def unattended(self, queued_for: float, limit: int = 500) -> Unattended | None:
        """What the recovery round rings again, under the sweep lock: running conversations
        whose lease holder died (PostgreSQL's liveness tokens), and queued ones nobody touched
        for `queued_for` seconds (`doorbells`). None while another worker's sweep holds the lock.
        """
        cutoff = self.clock() - timedelta(seconds=queued_for)
        with self.engine.begin() as connection:
            if not take_sweep_lock(connection, self.lock_holder_idle_limit):
                return None
            dead = (
                liveness.dead_leases(connection, limit)
                if connection.dialect.name == "postgresql"
                else []
            )
            return Unattended(dead, doorbells.queued_since(connection, cutoff, limit))

    def stale(self, older_than: float, limit: int | None = None) -> list[StaleConversation]:
        """Running conversations whose heartbeat is older than `older_than` seconds."""
        cutoff = self.clock() - timedelta(seconds=older_than)
        statement = (
            select(conversations.c.id, conversations.c.status, conversations.c.heartbeat_at)
            .where(_silent_since(cutoff))
            .order_by(conversations.c.heartbeat_at)
            .limit(limit)
        )
        with self.reads.connect() as connection:
            return [StaleConversation(*row) for row in connection.execute(statement)]

    def fail_stale(self, older_than: float, error: str) -> list[StaleConversation]:
        """Fail the turn of every running conversation silent for `older_than` seconds; return
        what changed. Each is failed like a worker fails a turn (the turn, its events, the next
        waiting turn), in its own transaction, after moving the epoch on: a worker that was only
        frozen can write nothing when it wakes."""
        return [
            failed
            for found in self.stale(older_than)
            if (failed := self._fail_one(found, older_than, error)) is not None
        ]

    def _fail_one(
        self, found: StaleConversation, older_than: float, error: str
    ) -> StaleConversation | None:
        now = self.clock()
        cutoff = now - timedelta(seconds=older_than)
        with self.engine.begin() as connection:
            taken = connection.execute(
                update(conversations)
                .where(conversations.c.id == found.id, _silent_since(cutoff))
                .values(lease_epoch=conversations.c.lease_epoch + 1, lease_owner=JANITOR)
                .returning(conversations.c.lease_epoch, conversations.c.status)
            ).one_or_none()
            if taken is None:
                return None  # it moved, or another janitor got it first
            parameters = {
                **fence_parameters(found.id, taken.lease_epoch, now=now),
                "turn_id": current_turn_id(connection, found.id),
                "old_status": taken.status,
                "error": error,
                **usage_parameters(None),
            }
            Sequenced(COMPOSITES[Write.FAIL]).run(connection, parameters)
        return StaleConversation(found.id, taken.status, found.heartbeat_at)

    def publish_catalog(self, definitions: Iterable[ToolDefinition]) -> None:
        """Replace the tool catalogue with what this worker's servers offer.

        Workers start together, so publications overlap: on PostgreSQL each one first locks the
        table against the others (readers go on), or the second's INSERT would meet the first's
        rows, which its DELETE could not see. SQLite serializes writers by itself."""
        now = self.clock()
        rows = [
            {
                "name": d.name,
                "server": d.server,
                "description": d.description,
                "input_schema": d.input_schema,
                "updated_at": now,
            }
            for d in definitions
        ]
        with self.engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                limit_idle(connection, self.lock_holder_idle_limit)
                connection.execute(text(f"LOCK TABLE {catalog.name} IN SHARE ROW EXCLUSIVE MODE"))
            connection.execute(delete(catalog))
            if rows:
                connection.execute(insert(catalog), rows)


def current_turn_id(connection: Connection, conversation_id: uuid.UUID) -> uuid.UUID | None:
    """The id of the conversation's current turn (by `turn_number`)."""
    return connection.execute(
        select(turns.c.id)
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .where(conversations.c.id == conversation_id)
        .where(turns.c.number == conversations.c.turn_number)
    ).scalar_one_or_none()


def _silent_since(cutoff: datetime) -> Any:
    """Running, and no sign of life since `cutoff`: what the partial heartbeat index covers."""
    return and_(conversations.c.status.in_(RUNNING_STATUSES), conversations.c.heartbeat_at < cutoff)


def take_sweep_lock(connection: Connection, idle_limit: float) -> bool:
    """Try the sweep lock for this transaction, whose session the server ends if it then sits
    idle for `idle_limit` seconds (one round trip for both)."""
    if connection.dialect.name != "postgresql":
        return True
    locked = connection.execute(
        text(
            "SELECT set_config('idle_in_transaction_session_timeout', :limit, true),"
            " pg_try_advisory_xact_lock(:key)"
        ),
        {"limit": _milliseconds(idle_limit), "key": _SWEEP_LOCK_KEY},
    )
    return bool(locked.one()[1])


def limit_idle(connection: Connection, idle_limit: float) -> None:
    """The server ends this session if its transaction sits idle for `idle_limit` seconds."""
    connection.execute(
        text("SELECT set_config('idle_in_transaction_session_timeout', :limit, true)"),
        {"limit": _milliseconds(idle_limit)},
    )


def _milliseconds(seconds: float) -> str:
    return str(max(1, round(seconds * 1000)))


__all__ = [
    "LOCK_HOLDER_IDLE_LIMIT_S",
    "Pruned",
    "StaleConversation",
    "Unattended",
    "Upkeep",
    "limit_idle",
    "take_sweep_lock",
]


def _resting_before(before: datetime) -> Any:
    """At rest since before `before`: idle or failed, untouched since, and no turn of it waiting
    (behind the last one, or for the user's answer)."""
    waiting = exists().where(
        turns.c.conversation_id == conversations.c.id,
        (turns.c.number > conversations.c.turn_number) | (turns.c.status == REQUIRES_ACTION),
    )
    return and_(
        conversations.c.status.in_([IDLE, FAILED]),
        conversations.c.updated_at < before,
        ~waiting,
    )
