"""All SQL of the worker: claim, fenced step commits, heartbeat, release, recovery, janitor.

Every write of a running worker is fenced by the lease epoch taken at claim time: zero rows updated
means another worker claimed the conversation since, and `LeaseLost` is raised before anything is
written. Each method is one short transaction; none is held open across an LLM or tool call.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Connection, Engine, Table, and_, delete, insert, or_, select, text, update
from sqlalchemy.exc import IntegrityError

from app.errors import ChatWorkerError
from app.models import FAILED, IDLE, RUNNING_STATUSES, TOOL_LOOP, CatalogTool, Conversation, Message
from app.worker.plan import Entry, ToolCall
from app.worker.ports import ToolDefinition, Usage

conversations = cast(Table, Conversation.__table__)
messages = cast(Table, Message.__table__)
catalog = cast(Table, CatalogTool.__table__)

Clock = Callable[[], datetime]

# Serializes recovery sweeps across the worker processes of one Postgres database.
_SWEEP_LOCK_KEY = 0x636877  # "chw"


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
    """What a worker knows after a claim: the conversation's settings and its whole transcript."""

    claim: Claim
    status: str
    model: str
    instructions: str | None
    allowed_tools: tuple[str, ...]
    tool_choice: str
    iterations: int
    attempts: int
    transcript: tuple[Entry, ...]

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

    # --- ownership ----------------------------------------------------------------------------

    def claim(self, conversation_id: uuid.UUID, owner: str, ttl: float) -> Snapshot | None:
        """Take the lease if the conversation is running and nobody holds a live lease.

        Returns None when there is nothing to do or another worker owns it.
        """
        now = self.clock()
        statement = (
            update(conversations)
            .where(
                conversations.c.id == conversation_id,
                conversations.c.status.in_(RUNNING_STATUSES),
                or_(
                    conversations.c.lease_owner.is_(None),
                    conversations.c.lease_expires_at < now,
                ),
            )
            .values(
                lease_owner=owner,
                lease_epoch=conversations.c.lease_epoch + 1,
                lease_expires_at=now + timedelta(seconds=ttl),
                heartbeat_at=now,
                attempts=conversations.c.attempts + 1,
                updated_at=now,
            )
            .returning(
                conversations.c.lease_epoch,
                conversations.c.status,
                conversations.c.model,
                conversations.c.instructions,
                conversations.c.allowed_tools,
                conversations.c.tool_choice,
                conversations.c.iterations,
                conversations.c.attempts,
            )
        )
        with self.engine.begin() as connection:
            row = connection.execute(statement).one_or_none()
            if row is None:
                return None
            transcript = tuple(_load_transcript(connection, conversation_id))
        return Snapshot(
            claim=Claim(conversation_id, owner, row.lease_epoch),
            status=row.status,
            model=row.model,
            instructions=row.instructions,
            allowed_tools=tuple(row.allowed_tools or ()),
            tool_choice=row.tool_choice,
            iterations=row.iterations,
            attempts=row.attempts,
            transcript=transcript,
        )

    def heartbeat(self, claim: Claim, ttl: float) -> None:
        """Renew the lease; raise `LeaseLost` if it was taken over."""
        now = self.clock()
        with self.engine.begin() as connection:
            self._fence(connection, claim, lease_expires_at=now + timedelta(seconds=ttl))

    def release(self, claim: Claim) -> None:
        """Give the lease up (graceful shutdown) so another worker may claim at once."""
        with self.engine.begin() as connection:
            self._fence(connection, claim, lease_owner=None, lease_expires_at=None)

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
        with self.engine.begin() as connection:
            self._fence(connection, claim, ttl=ttl, status=TOOL_LOOP, **_counted(usage))
            _insert(connection, claim.conversation_id, entry)
        return entry

    def record_tool_result(
        self, claim: Claim, *, seq: int, call: ToolCall, content: str, is_error: bool, ttl: float
    ) -> Entry:
        """One tool result, in its own transaction."""
        entry = Entry(
            seq, "tool", content, tool_call_id=call.id, tool_name=call.name, is_error=is_error
        )
        with self.engine.begin() as connection:
            self._fence(connection, claim, ttl=ttl, status=TOOL_LOOP)
            _insert(connection, claim.conversation_id, entry)
        return entry

    def record_answer(
        self, claim: Claim, seq: int, content: str, usage: Usage, finish_reason: str | None = None
    ) -> Entry:
        """The final text and status `idle` (lease released), in one transaction."""
        entry = Entry(seq, "assistant", content, finish_reason=finish_reason)
        with self.engine.begin() as connection:
            self._fence(connection, claim, status=IDLE, **_released(), **_counted(usage))
            _insert(connection, claim.conversation_id, entry)
        return entry

    def finish(self, claim: Claim) -> None:
        """Mark the turn done when its final text is already committed."""
        with self.engine.begin() as connection:
            self._fence(connection, claim, status=IDLE, **_released())

    def fail(self, claim: Claim, error: str, usage: Usage | None = None) -> None:
        """Status `failed` with a readable error (lease released)."""
        counted = _counted(usage, llm_call=False) if usage else {}
        with self.engine.begin() as connection:
            self._fence(connection, claim, status=FAILED, error=error, **_released(), **counted)

    def _fence(
        self, connection: Connection, claim: Claim, ttl: float | None = None, **values: Any
    ) -> None:
        now = self.clock()
        values.setdefault("heartbeat_at", now)
        values["updated_at"] = now
        if ttl is not None:
            values["lease_expires_at"] = now + timedelta(seconds=ttl)
            values["attempts"] = 0  # a committed step is progress
        result = connection.execute(
            update(conversations)
            .where(
                conversations.c.id == claim.conversation_id,
                conversations.c.lease_epoch == claim.epoch,
            )
            .values(**values)
        )
        if result.rowcount != 1:
            raise LeaseLost(f"conversation {claim.conversation_id}: lease epoch {claim.epoch} lost")

    # --- recovery, janitor, catalogue ---------------------------------------------------------

    def orphans(self, older_than: float, limit: int = 500) -> list[tuple[uuid.UUID, int]]:
        """Running conversations nobody has touched for `older_than` seconds, with their attempts.

        Covers both a lease that expired (its worker died) and a queued turn whose message the
        queue lost; every write renews `heartbeat_at`, so one indexed condition finds both.
        """
        cutoff = self.clock() - timedelta(seconds=older_than)
        with self.engine.begin() as connection:
            if not _take_sweep_lock(connection):
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
        """Replace the tool catalogue with what this worker's servers offer."""
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
            connection.execute(delete(catalog))
            if rows:
                connection.execute(insert(catalog), rows)


def _load_transcript(connection: Connection, conversation_id: uuid.UUID) -> Iterable[Entry]:
    rows = connection.execute(
        select(
            messages.c.seq,
            messages.c.role,
            messages.c.content,
            messages.c.tool_calls,
            messages.c.tool_call_id,
            messages.c.tool_name,
            messages.c.is_error,
            messages.c.finish_reason,
        )
        .where(messages.c.conversation_id == conversation_id)
        .order_by(messages.c.seq)
    )
    for row in rows:
        calls = tuple(ToolCall.from_json(c) for c in row.tool_calls or ())
        yield Entry(
            row.seq,
            row.role,
            row.content,
            calls,
            row.tool_call_id,
            row.tool_name,
            row.is_error,
            row.finish_reason,
        )


def _insert(connection: Connection, conversation_id: uuid.UUID, entry: Entry) -> None:
    try:
        connection.execute(
            insert(messages).values(
                conversation_id=conversation_id,
                seq=entry.seq,
                role=entry.role,
                content=entry.content,
                tool_calls=[c.as_json() for c in entry.tool_calls] or None,
                tool_call_id=entry.tool_call_id,
                tool_name=entry.tool_name,
                is_error=entry.is_error,
                finish_reason=entry.finish_reason,
            )
        )
    except IntegrityError as exc:
        # The fence passed, so only a writer that bypassed it could have taken this seq.
        raise LeaseLost(f"conversation {conversation_id}: seq {entry.seq} already written") from exc


def _counted(usage: Usage | None, llm_call: bool = True) -> dict[str, Any]:
    usage = usage or Usage()
    values: dict[str, Any] = {
        "prompt_tokens": conversations.c.prompt_tokens + usage.prompt_tokens,
        "completion_tokens": conversations.c.completion_tokens + usage.completion_tokens,
    }
    if llm_call:
        values["iterations"] = conversations.c.iterations + 1
    return values


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


def _take_sweep_lock(connection: Connection) -> bool:
    if connection.dialect.name != "postgresql":
        return True
    locked = connection.execute(
        text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": _SWEEP_LOCK_KEY}
    )
    return bool(locked.scalar())


__all__ = ["Claim", "LeaseLost", "Snapshot", "StaleConversation", "Store", "utc_now"]
