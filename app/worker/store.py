"""All SQL of the worker: claim, fenced step commits, heartbeat, release, recovery, janitor.

Every write of a running worker is fenced by the lease epoch taken at claim time: zero rows updated
means another worker claimed the conversation since, and `LeaseLost` is raised before anything is
written. Each method is one short transaction; none is held open across an LLM or tool call.

On PostgreSQL a step is a single autocommit statement (the fenced UPDATE feeding the INSERT through
a data-modifying CTE): one round trip, still one atomic transaction. SQLite runs the same two
statements inside an explicit transaction.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, cast

import psycopg
from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    delete,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError

from app.errors import ChatWorkerError
from app.models import FAILED, IDLE, RUNNING_STATUSES, CatalogTool, Conversation, Message
from app.worker import fastpath
from app.worker import statements as sql
from app.worker.fastpath import DriverStatement
from app.worker.plan import Entry, ToolCall
from app.worker.ports import ToolDefinition, Usage
from app.worker.transcript import Transcript

conversations = cast(Table, Conversation.__table__)
messages = cast(Table, Message.__table__)
catalog = cast(Table, CatalogTool.__table__)

Clock = Callable[[], datetime]

# Serializes recovery sweeps across the worker processes of one Postgres database.
_SWEEP_LOCK_KEY = 0x636877  # "chw"

#: How long a transaction that holds a lock other workers need (the sweep lock, the catalogue
#: table) may sit idle before the server ends its session. A worker frozen inside one (SIGSTOP,
#: a paused VM, a half-open connection) would otherwise stop every worker's recovery sweep, or
#: every worker's start, until it woke up: hours, for a connection nobody closes.
LOCK_HOLDER_IDLE_LIMIT_S = 10.0


def utc_now() -> datetime:
    return datetime.now(UTC)


class LeaseLost(ChatWorkerError):
    """Another worker claimed the conversation: this one must stop without writing."""


@dataclass(frozen=True)
class Claim:
    """Proof of ownership: every fenced write names the epoch it was granted."""

    conversation_id: uuid.UUID
    owner: str
    epoch: int


@dataclass(frozen=True)
class Snapshot:
    """What a worker knows after a claim: the conversation's settings and its whole transcript
    (built here, on the database thread, ready for the turn that owns it from now on)."""

    claim: Claim
    status: str
    model: str
    instructions: str | None
    allowed_tools: tuple[str, ...]
    tool_choice: str
    iterations: int
    attempts: int
    transcript: Transcript

    @property
    def last_seq(self) -> int:
        return self.transcript[-1].seq if self.transcript else 0


@dataclass(frozen=True)
class StaleConversation:
    id: uuid.UUID
    status: str
    heartbeat_at: datetime


class Store:
    """The worker's database port. Synchronous: the async loop calls it from a thread pool."""

    def __init__(self, engine: Engine, clock: Clock = utc_now) -> None:
        self.engine = engine
        self.clock = clock
        self.lock_holder_idle_limit = LOCK_HOLDER_IDLE_LIMIT_S
        # A single-statement write needs no BEGIN/COMMIT round trips: it is its own transaction.
        self._autocommit = engine.execution_options(
            isolation_level="AUTOCOMMIT", skip_autocommit_rollback=True
        )
        self._driver = fastpath.supported(engine)
        if self._driver:
            self._claim_sql = DriverStatement(sql.CLAIM, engine)
            self._transcript_sql = DriverStatement(sql.TRANSCRIPT, engine)
            self._step_sql = {
                kind: DriverStatement(statement, engine, json_parameters=("m_tool_calls",))
                for kind, statement in sql.ONE_STATEMENT_STEP.items()
            }

    # --- ownership ----------------------------------------------------------------------------

    def claim(self, conversation_id: uuid.UUID, owner: str, ttl: float) -> Snapshot | None:
        """Take the lease if the conversation is running and nobody holds a live lease.

        Returns None when there is nothing to do or another worker owns it.
        """
        now = self.clock()
        parameters = {
            "claim_id": conversation_id,
            "owner": owner,
            "now": now,
            "expires": now + timedelta(seconds=ttl),
        }
        # Two autocommit statements: the transcript is read after the claim committed, so every
        # step an earlier owner committed before losing the lease is in it.
        which = {"transcript_id": conversation_id}
        if self._driver:
            with fastpath.autocommit_connection(self.engine) as connection:
                rows = self._claim_sql.run(connection, parameters)
                if not rows:
                    return None
                row = _ClaimRow(*rows[0])
                transcript = self._transcript_sql.run(connection, which)
        else:
            with self._autocommit.connect() as connection:
                found = connection.execute(sql.CLAIM, parameters).one_or_none()
                if found is None:
                    return None
                row = _ClaimRow(*found)
                transcript = [tuple(m) for m in connection.execute(sql.TRANSCRIPT, which)]
        return Snapshot(
            claim=Claim(conversation_id, owner, row.lease_epoch),
            status=row.status,
            model=row.model,
            instructions=row.instructions,
            allowed_tools=tuple(row.allowed_tools or ()),
            tool_choice=row.tool_choice,
            iterations=row.iterations,
            attempts=row.attempts,
            transcript=Transcript(row.instructions, map(_entry, transcript)),
        )

    def heartbeat(self, claim: Claim, ttl: float) -> None:
        """Renew the lease; raise `LeaseLost` if it was taken over."""
        now = self.clock()
        self._update(claim, lease_expires_at=now + timedelta(seconds=ttl))

    def release(self, claim: Claim) -> None:
        """Give the lease up (graceful shutdown) so another worker may claim at once."""
        self._update(claim, lease_owner=None, lease_expires_at=None)

    # --- step commits -------------------------------------------------------------------------

    def record_tool_calls(
        self,
        claim: Claim,
        *,
        seq: int,
        content: str | None,
        calls: Sequence[ToolCall],
        usage: Usage,
        ttl: float,
        finish_reason: str | None = None,
    ) -> Entry:
        """The assistant's tool calls and status `tool_loop`, in one transaction."""
        entry = Entry(seq, "assistant", content, tuple(calls), finish_reason=finish_reason)
        self._step(sql.StepKind.TOOL_CALLS, claim, entry, ttl=ttl, usage=usage)
        return entry

    def record_tool_result(
        self, claim: Claim, *, seq: int, call: ToolCall, content: str, is_error: bool, ttl: float
    ) -> Entry:
        """One tool result, in its own transaction."""
        entry = Entry(
            seq, "tool", content, tool_call_id=call.id, tool_name=call.name, is_error=is_error
        )
        self._step(sql.StepKind.TOOL_RESULT, claim, entry, ttl=ttl)
        return entry

    def record_answer(
        self, claim: Claim, seq: int, content: str, usage: Usage, finish_reason: str | None = None
    ) -> Entry:
        """The final text and status `idle` (lease released), in one transaction."""
        entry = Entry(seq, "assistant", content, finish_reason=finish_reason)
        self._step(sql.StepKind.ANSWER, claim, entry, usage=usage)
        return entry

    def finish(self, claim: Claim) -> None:
        """Mark the turn done when its final text is already committed."""
        self._update(claim, status=IDLE, **_released())

    def fail(self, claim: Claim, error: str, usage: Usage | None = None) -> None:
        """Status `failed` with a readable error (lease released)."""
        counted = _tokens(usage) if usage else {}
        self._update(claim, status=FAILED, error=error, **_released(), **counted)

    def _update(self, claim: Claim, ttl: float | None = None, **values: Any) -> None:
        """A fenced UPDATE on its own: one statement, one transaction."""
        with self._autocommit.connect() as connection:
            result = connection.execute(self._fenced(claim, ttl, values))
        if result.rowcount != 1:
            raise _lost(claim)

    def _step(
        self,
        kind: sql.StepKind,
        claim: Claim,
        entry: Entry,
        *,
        ttl: float | None = None,
        usage: Usage | None = None,
    ) -> None:
        """The fenced UPDATE and the entry's INSERT, atomically: both happen, or neither."""
        parameters = sql.step_parameters(
            claim.conversation_id, claim.epoch, entry, now=self.clock(), ttl=ttl, usage=usage
        )
        try:
            if self._driver:
                with fastpath.autocommit_connection(self.engine) as connection:
                    inserted = self._step_sql[kind].run(connection, parameters)
                if len(inserted) != 1:
                    raise _lost(claim)
                return
            with self.engine.begin() as connection:
                if connection.execute(sql.FENCE_UPDATE[kind], parameters).rowcount != 1:
                    raise _lost(claim)
                connection.execute(sql.INSERT_MESSAGE, parameters)
        except (IntegrityError, psycopg.IntegrityError) as exc:
            # The fence passed, so only a writer that bypassed it could have taken this seq.
            raise LeaseLost(
                f"conversation {claim.conversation_id}: seq {entry.seq} already written"
            ) from exc

    def _fenced(self, claim: Claim, ttl: float | None, values: dict[str, Any]) -> Any:
        now = self.clock()
        values.setdefault("heartbeat_at", now)
        values["updated_at"] = now
        if ttl is not None:
            values["lease_expires_at"] = now + timedelta(seconds=ttl)
            values["attempts"] = 0  # a committed step is progress
        return (
            update(conversations)
            .where(
                conversations.c.id == claim.conversation_id,
                conversations.c.lease_epoch == claim.epoch,
            )
            .values(**values)
        )

    # --- recovery, janitor, catalogue ---------------------------------------------------------

    def orphans(self, older_than: float, limit: int = 500) -> list[tuple[uuid.UUID, int]]:
        """Running conversations nobody has touched for `older_than` seconds, with their attempts.

        Covers both a lease that expired (its worker died) and a queued turn whose message the
        queue lost; every write renews `heartbeat_at`, so one indexed condition finds both.
        """
        cutoff = self.clock() - timedelta(seconds=older_than)
        with self.engine.begin() as connection:
            if not _take_sweep_lock(connection, self.lock_holder_idle_limit):
                return []
            rows = connection.execute(
                select(conversations.c.id, conversations.c.attempts)
                .where(_silent_since(cutoff))
                .order_by(conversations.c.heartbeat_at)
                .limit(limit)
            ).all()
        return [(row.id, row.attempts) for row in rows]

    def give_up(self, conversation_id: uuid.UUID, error: str, older_than: float) -> bool:
        """Fail a running conversation that is still silent (fences out any zombie)."""
        cutoff = self.clock() - timedelta(seconds=older_than)
        with self.engine.begin() as connection:
            result = connection.execute(
                _fail_silent(cutoff, error, self.clock()).where(
                    conversations.c.id == conversation_id
                )
            )
        return result.rowcount == 1

    def stale(self, older_than: float, limit: int | None = None) -> list[StaleConversation]:
        """Running conversations whose heartbeat is older than `older_than` seconds."""
        cutoff = self.clock() - timedelta(seconds=older_than)
        statement = (
            select(conversations.c.id, conversations.c.status, conversations.c.heartbeat_at)
            .where(_silent_since(cutoff))
            .order_by(conversations.c.heartbeat_at)
            .limit(limit)
        )
        with self.engine.connect() as connection:
            return [StaleConversation(*row) for row in connection.execute(statement)]

    def fail_stale(self, older_than: float, error: str) -> list[StaleConversation]:
        """Fail every running conversation silent for `older_than` seconds; return what changed."""
        now = self.clock()
        cutoff = now - timedelta(seconds=older_than)
        statement = _fail_silent(cutoff, error, now).returning(
            conversations.c.id, conversations.c.heartbeat_at
        )
        with self.engine.begin() as connection:
            before = {
                row.id: row.status
                for row in connection.execute(
                    select(conversations.c.id, conversations.c.status).where(_silent_since(cutoff))
                )
            }
            changed = connection.execute(statement).all()
        return [
            StaleConversation(row.id, before.get(row.id, "?"), row.heartbeat_at) for row in changed
        ]

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
                _limit_idle(connection, self.lock_holder_idle_limit)
                connection.execute(text(f"LOCK TABLE {catalog.name} IN SHARE ROW EXCLUSIVE MODE"))
            connection.execute(delete(catalog))
            if rows:
                connection.execute(insert(catalog), rows)


class _ClaimRow(NamedTuple):
    lease_epoch: int
    status: str
    model: str
    instructions: str | None
    allowed_tools: list[str] | None
    tool_choice: str
    iterations: int
    attempts: int


def _entry(row: tuple[Any, ...]) -> Entry:
    """An Entry from a TRANSCRIPT row, whose tool_calls is JSON text."""
    seq, role, content, tool_calls, tool_call_id, tool_name, is_error, finish_reason = row
    calls: tuple[ToolCall, ...] = ()
    if tool_calls:  # one history message in four, or fewer: the rest skip the parsing
        calls = tuple(ToolCall.from_json(call) for call in json.loads(tool_calls) or ())
    return Entry(seq, role, content, calls, tool_call_id, tool_name, is_error, finish_reason)


def _lost(claim: Claim) -> LeaseLost:
    return LeaseLost(f"conversation {claim.conversation_id}: lease epoch {claim.epoch} lost")


def _tokens(usage: Usage) -> dict[str, Any]:
    """Add a failed call's usage (the step statements count their own, with the iteration)."""
    return {
        "prompt_tokens": conversations.c.prompt_tokens + usage.prompt_tokens,
        "completion_tokens": conversations.c.completion_tokens + usage.completion_tokens,
    }


def _released() -> dict[str, Any]:
    return {"lease_owner": None, "lease_expires_at": None}


def _silent_since(cutoff: datetime) -> Any:
    """Running, and no sign of life since `cutoff`: what the partial heartbeat index covers."""
    return and_(conversations.c.status.in_(RUNNING_STATUSES), conversations.c.heartbeat_at < cutoff)


def _fail_silent(cutoff: datetime, error: str, now: datetime) -> Any:
    return (
        update(conversations)
        .where(_silent_since(cutoff))
        .values(
            status=FAILED,
            error=error,
            lease_owner=None,
            lease_expires_at=None,
            lease_epoch=conversations.c.lease_epoch + 1,
            updated_at=now,
        )
    )


def _take_sweep_lock(connection: Connection, idle_limit: float) -> bool:
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


def _limit_idle(connection: Connection, idle_limit: float) -> None:
    """The server ends this session if its transaction sits idle for `idle_limit` seconds."""
    connection.execute(
        text("SELECT set_config('idle_in_transaction_session_timeout', :limit, true)"),
        {"limit": _milliseconds(idle_limit)},
    )


def _milliseconds(seconds: float) -> str:
    return str(max(1, round(seconds * 1000)))


__all__ = ["Claim", "LeaseLost", "Snapshot", "StaleConversation", "Store", "utc_now"]
