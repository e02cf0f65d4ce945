"""The commands of `AsyncChatClient` on a turn that exists: retry a failed one, answer what one
waits for, cancel one. Each runs in one transaction in the client's `offload`; then the
followers are woken, the worker holding the turn told, a worker rung (`wiring`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from app.client import intake
from app.client.audit import AuditAction
from app.client.checks import check_decisions, check_outputs, parse_conversation_id, parse_turn_id
from app.client.commands import ConversationCommands
from app.client.store import audit as audit_log
from app.client.store import reads
from app.client.store.answers import answer_actions
from app.client.store.cancel import cancel_turn
from app.client.views import Decision, Submitted, TurnView
from app.telemetry import tracing


class TurnCommands(ConversationCommands):
    """What `AsyncChatClient` does to a turn that exists (its base)."""

    async def retry_conversation(
        self,
        conversation_id: uuid.UUID | str,
        *,
        owner: str | None = None,
        audit: AuditAction | None = None,
    ) -> Submitted:
        """A new turn that continues a failed one from its transcript (pending calls first).
        `audit`: an operator's action, recorded in the same transaction (`audit.py`)."""
        wiring = self.wiring

        def retry() -> Submitted:
            found = parse_conversation_id(conversation_id)
            with tracing.submit_span("chat retry") as span, self.engine.begin() as connection:
                reads.check_owner(connection, found, owner)
                turn = intake.retry(connection, found, owner_limit=wiring.owner_limit)
                view = reads.read_turn(connection, turn.id)
                if audit is not None:
                    audit_log.record(connection, audit, selected=1)
                describe(span, found, turn.id)
            wiring.notify(found)
            return wiring.ring(found, turn, view)

        return await self.offload(retry)

    async def answer_actions(
        self,
        turn_id: uuid.UUID | str,
        outputs: Mapping[str, str] | None = None,
        *,
        approvals: Mapping[str, bool | Decision] | None = None,
        owner: str | None = None,
    ) -> TurnView:
        """Answer what a turn waits for (`requires_action`), by call id: a client tool's output
        or the user's answer to the model's question (`outputs`), a call's approval (`approvals`:
        True runs it, False or `Decision(False, reason)` tells the model it was denied). When
        none is left waiting, the turn goes on (a worker is rung). An answer given before is
        skipped (a retry is harmless); `ActionNotFound` for a call the turn never waited on,
        `ActionAlreadyAnswered` for one answered otherwise (or cancelled); a refused answer
        refuses the whole request. The turn as it is after the answers."""
        wiring = self.wiring

        def answer() -> TurnView:
            found = parse_turn_id(turn_id)
            checked = check_outputs(outputs or {}, wiring.limit, allow_empty=bool(approvals))
            decisions = check_decisions(approvals or {}, wiring.limit, allow_empty=bool(checked))
            with self.engine.begin() as connection:
                conversation_id = reads.conversation_of_turn(connection, found, owner)
                answered = answer_actions(
                    connection,
                    conversation_id,
                    found,
                    checked,
                    decisions=decisions,
                    now=datetime.now(UTC),
                )
                turn = reads.read_turn(connection, found)
            if answered.written:
                wiring.notify(conversation_id)
            if answered.resumes:
                wiring.resume(conversation_id)
            return turn

        return await self.offload(answer)

    async def cancel(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> TurnView | None:
        """Stop the conversation's current turn; the turn as it is after the request (None when
        the conversation never had one).

        With a worker on it, the request is committed and the worker is told at once: the turn
        is returned `running` with `cancel_requested_at` set, and ends `cancelled` within
        moments (follow the events for `turn.cancelled`). Queued, or left by a dead worker, it
        is `cancelled` here. A finished turn comes back unchanged; asking twice is harmless."""

        def cancel() -> TurnView | None:
            found = parse_conversation_id(conversation_id)
            with self.engine.connect() as connection:
                reads.check_owner(connection, found, owner)
            return self._cancel(found, None)

        return await self.offload(cancel)

    async def cancel_turn(
        self,
        turn_id: uuid.UUID | str,
        *,
        owner: str | None = None,
        audit: AuditAction | None = None,
    ) -> TurnView:
        """`cancel` for one turn by id: the running one, or one waiting behind it (its request
        is honoured when its time comes, before any model call); `TurnNotFound`. `audit`: an
        operator's action, recorded in the same transaction (`audit.py`)."""

        def cancel() -> TurnView:
            found = parse_turn_id(turn_id)
            with self.engine.connect() as connection:
                conversation_id = reads.conversation_of_turn(connection, found, owner)
            cancelled = self._cancel(conversation_id, found, audit)
            assert cancelled is not None
            return cancelled

        return await self.offload(cancel)

    def _cancel(
        self,
        conversation_id: uuid.UUID,
        turn_id: uuid.UUID | None,
        audit: AuditAction | None = None,
    ) -> TurnView | None:
        with self.engine.begin() as connection:
            outcome = cancel_turn(connection, conversation_id, turn_id, now=datetime.now(UTC))
            if audit is not None:
                audit_log.record(connection, audit, selected=int(outcome.turn_id is not None))
            if outcome.turn_id is None:
                return None
            # As the command left it: the worker told next may end it a moment later.
            turn = reads.read_turn(connection, outcome.turn_id)
        self.wiring.notify(conversation_id)
        if outcome.announce:
            self.wiring.announce_cancel(conversation_id)
        if outcome.ring:
            self.wiring.resume(conversation_id)
        return turn


def describe(span: Any, conversation_id: uuid.UUID, turn_id: uuid.UUID) -> None:
    """Name the conversation and the turn on a command's span."""
    if span.is_recording():
        span.set_attribute("chatworker.conversation_id", str(conversation_id))
        span.set_attribute("chatworker.turn_id", str(turn_id))


__all__ = ["TurnCommands", "describe"]
