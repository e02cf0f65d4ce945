"""The web side's hottest statements awaited on the API's event loop, on connections of its own:
no thread, no SQLAlchemy per execution. PostgreSQL through psycopg only (`for_engine` says None
elsewhere, and the callers go through `reads` and `intake` in a thread instead).

The reads are the statements `reads` runs (compiled once to PostgreSQL's numbered placeholders,
`RawStatement`), their rows turned into the same views by the same code: the two paths cannot
drift apart. The submit is `quick_submit`'s two statements, decided by the same `admission`, or
None: the caller takes the general path.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import psycopg
from sqlalchemy import ARRAY, Engine, Text, any_, bindparam, select

from app.client import admission
from app.client.admission import Read, Repeat, Start
from app.client.store import quick_submit
from app.client.store.event_pages import EVENTS_PAGE, events_page, page_parameters
from app.client.store.new_turns import NewTurn
from app.client.store.reads import TURN_AND_OWNER, call_ids, owned_turn, turn_view, with_answered
from app.client.views import EventPage, TurnView
from app.db import psycopg_driven
from app.errors import DatabaseUnavailable
from app.loop_connections import Connection, LoopConnections
from app.models.raw_statement import RawStatement
from app.models.tables import messages

#: The most connections an API process's loop reads hold at once (a read holds one for its one
#: statement; more readers queue for them, as they queued for the readers' threads before).
LOOP_CONNECTIONS = 8


class LoopStore:
    """The statements one event loop awaits (`LoopConnections`: the connections of one loop at a
    time; the engine's `dispose()` closes them)."""

    def __init__(self, engine: Engine, size: int = LOOP_CONNECTIONS) -> None:
        self.connections = LoopConnections(engine, size)
        self._events_page = RawStatement(EVENTS_PAGE, engine)
        self._turn = RawStatement(TURN_AND_OWNER, engine)
        self._answered = RawStatement(_ANSWERED_ANY, engine)
        self._submit_read = RawStatement(quick_submit.READ, engine)
        self._start = RawStatement(quick_submit.START, engine, quick_submit.JSON_PARAMETERS)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        """A loop connection for a read or a submit; the server gone or unreachable (a restart,
        a network failure) is `DatabaseUnavailable`, as the engine's errors are to the API
        (503), and the next ask opens a new connection."""
        try:
            async with self.connections.connection() as connection:
                yield connection
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise DatabaseUnavailable(f"the database did not answer: {exc}") from exc

    @staticmethod
    def for_engine(engine: Engine) -> LoopStore | None:
        """The loop store of `engine`'s database, or None where its driver has no async side."""
        return LoopStore(engine) if psycopg_driven(engine) else None

    async def events(
        self, conversation_id: uuid.UUID, after: int, limit: int, owner: str | None
    ) -> EventPage:
        """`event_pages.read_events`, awaited (the same statement, the same errors)."""
        parameters = page_parameters(conversation_id, after, limit)
        async with self._connection() as connection:
            rows = await self._events_page.rows_on_loop(connection, parameters)
        return events_page(rows, conversation_id, after, owner)

    async def turn(self, turn_id: uuid.UUID, owner: str | None) -> TurnView:
        """`reads.read_owned_turn`, awaited (the same statements, the same errors)."""
        async with self._connection() as connection:
            return await self._turn_on(connection, turn_id, owner)

    async def submit(
        self,
        conversation_id: uuid.UUID,
        text: str,
        key: str | None,
        on_busy: str,
        *,
        owner: str | None,
        metadata: dict[str, str] | None,
        output_schema: dict[str, Any] | None,
        echo: dict[str, Any] | None,
        trace_context: dict[str, str] | None,
    ) -> tuple[NewTurn, TurnView] | None:
        """A common submit (`quick_submit`: a new turn started, or a repeated key's turn found
        again) with its turn's view; None when the general path must serve it (nothing was
        written). `ConversationNotFound` as the general path's."""
        async with self._connection() as connection:
            parameters = {"conversation_id": conversation_id, "key": key}
            read = quick_submit.seen(
                await self._submit_read.rows_on_loop(connection, parameters),
                conversation_id,
                owner,
            )
            if not read.quick:
                return None
            match admission.admit_submit(Read(read.status, None, read.keyed), text, on_busy):
                case Repeat(turn=seen):
                    turn = NewTurn(
                        seen.turn_id,
                        seen.number,
                        seen.status,
                        seen.message_seq,
                        seen.waits,
                        repeated=True,
                    )
                    return turn, await self._turn_on(connection, turn.id, None)
                case Start():
                    turn, parameters = quick_submit.start_parameters(
                        conversation_id,
                        read,
                        text,
                        key,
                        metadata=metadata,
                        output_schema=output_schema,
                        echo=echo,
                        trace_context=trace_context,
                        now=datetime.now(UTC),
                    )
                    try:
                        rows = await self._start.rows_on_loop(connection, parameters)
                    except psycopg.IntegrityError:  # (a key another submit took meanwhile)
                        return None
                    # No row: the fence did not match (another writer came first).
                    return (turn, turn_view(rows[0])) if rows else None
            return None  # (a refusal, or a turn queued, interrupting, steering: the general path)

    async def _turn_on(
        self, connection: Connection, turn_id: uuid.UUID, owner: str | None
    ) -> TurnView:
        rows = await self._turn.rows_on_loop(connection, {"turn_id": turn_id})
        turn = owned_turn(rows, turn_id, owner)
        if not turn.actions:
            return turn
        parameters = {"conversation_id": turn.conversation_id, "call_ids": call_ids(turn)}
        answered = await self._answered.rows_on_loop(connection, parameters)
        return with_answered(turn, {call_id for (call_id,) in answered})


# `reads.ANSWERED` with the ids as one array value: an expanding IN has a placeholder per id,
# which a statement compiled once cannot have.
_ANSWERED_ANY = select(messages.c.tool_call_id).where(
    messages.c.conversation_id == bindparam("conversation_id"),
    messages.c.role == "tool",
    messages.c.tool_call_id == any_(bindparam("call_ids", type_=ARRAY(Text))),
)


__all__ = ["LOOP_CONNECTIONS", "LoopStore"]
