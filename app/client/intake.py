"""A submit or a retry in its transaction: the store reads under the locks, `admission` decides,
then the store writes what was decided, or the refusal is raised and nothing is written.

Locks are taken in the order every writer takes them: the owner's limit lock (policy `reject`),
then the conversation's row.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection

from app import errors
from app.budgets import store as budgets
from app.client import admission
from app.client.admission import (
    Answer,
    Busy,
    Enqueue,
    Interrupt,
    KeyReused,
    NotRetryable,
    NotSteerable,
    OverBudget,
    OverOwnerLimit,
    Read,
    Repeat,
    Rollback,
    Start,
    Steer,
)
from app.client.store import new_turns, owners
from app.client.store.answers import answer_actions, open_clarifications, waiting_turn
from app.client.store.cancel import cancel_current, cancel_waiting, waiting_turns
from app.client.store.journal import lock_conversation, turn_id_of
from app.client.store.new_turns import NewTurn, Target
from app.models import FOR_MESSAGE, FOR_STEER, IDLE, REQUIRES_ACTION, RUNNING


def submit(
    connection: Connection,
    conversation_id: uuid.UUID,
    text: str,
    *,
    idempotency_key: str | None,
    on_busy: str,
    owner_limit: int | None = None,
    metadata: dict[str, str] | None = None,
    output_schema: dict[str, Any] | None = None,
    files: list[dict[str, Any]] | None = None,
    echo: dict[str, Any] | None = None,
    target: Target | None = None,
) -> NewTurn:
    """The user's message as admission decides it: a new turn started or queued, the answer to
    the waiting turn's question, the same turn again, or a refusal (`admission`'s table);
    `metadata`, the caller's, and `echo`, its dialect's, go with a new turn (an answer keeps the
    waiting turn's);
    `target`: an edit's or a regenerate's place in the tree (`branching`)."""
    used_up = budgets.check(connection, conversation_id)
    owner = _lock_owner(connection, conversation_id, owner_limit)
    row = lock_conversation(connection, conversation_id)
    keyed = None
    if idempotency_key is not None:
        keyed = new_turns.keyed_turn(connection, conversation_id, idempotency_key)
    # (only a resting conversation's current turn can wait for the user)
    waiting = None
    if row.status == IDLE and row.turn_number:
        waiting = waiting_turn(connection, conversation_id, row.turn_number)
    asked = [] if waiting is None else open_clarifications(connection, conversation_id, waiting)
    read = Read(
        row.status,
        used_up,
        keyed,
        waiting is not None,
        tuple(asked),
        **_owner_count(connection, owner, owner_limit),
        branching=target is not None,
    )
    decided = admission.admit_submit(read, text, on_busy)
    match decided:
        case Repeat(turn=seen):
            return NewTurn(
                seen.turn_id, seen.number, seen.status, seen.message_seq, seen.waits, repeated=True
            )
        case Answer(call_ids=call_ids):
            assert waiting is not None
            if files:
                raise errors.InvalidFile(
                    f"this message answers the question turn {waiting.id} waits on: an answer "
                    "is text; send the files with the next message"
                )
            answered = answer_actions(
                connection,
                conversation_id,
                waiting.id,
                dict.fromkeys(call_ids, text),
                now=datetime.now(UTC),
            )
            status = RUNNING if answered.resumes else REQUIRES_ACTION
            return NewTurn(waiting.id, row.turn_number, status, None, resumes=answered.resumes)
        case Start():
            return new_turns.start_turn(
                connection,
                conversation_id,
                row,
                text,
                idempotency_key,
                metadata=metadata,
                output_schema=output_schema,
                files=files,
                echo=echo,
                target=target,
            )
        case Enqueue() | Interrupt() | Rollback() | Steer():
            return _queue(
                connection,
                conversation_id,
                row,
                text,
                key=idempotency_key,
                decided=decided,
                metadata=metadata,
                output_schema=output_schema,
                files=files,
                echo=echo,
                target=target,
            )
    raise _refusal(connection, conversation_id, row, decided, key=idempotency_key, owner=owner)


def retry(
    connection: Connection, conversation_id: uuid.UUID, *, owner_limit: int | None = None
) -> NewTurn:
    """A new turn that continues a failed one from its transcript; `NotRetryable` otherwise."""
    used_up = budgets.check(connection, conversation_id)
    owner = _lock_owner(connection, conversation_id, owner_limit)
    row = lock_conversation(connection, conversation_id)
    read = Read(row.status, used_up, **_owner_count(connection, owner, owner_limit))
    decided = admission.admit_retry(read)
    if isinstance(decided, Start):
        return new_turns.retry_turn(connection, conversation_id, row)
    raise _refusal(connection, conversation_id, row, decided, key=None, owner=owner)


def _queue(
    connection: Connection,
    conversation_id: uuid.UUID,
    row: Any,
    text: str,
    *,
    key: str | None,
    decided: admission.Admission,
    metadata: dict[str, str] | None = None,
    output_schema: dict[str, Any] | None = None,
    files: list[dict[str, Any]] | None = None,
    echo: dict[str, Any] | None = None,
    target: Target | None = None,
) -> NewTurn:
    """Rows 8 to 13: the turn queued; with `interrupt` and `rollback` every turn before it
    cancelled, and with `rollback` the current turn's messages leave the active path when this
    one starts; with `steer` queued for the running turn to take in."""
    running = turn_id_of(connection, conversation_id, row.turn_number)
    last_seq = row.event_seq
    now = datetime.now(UTC)
    interrupt = isinstance(decided, Interrupt | Rollback)
    if isinstance(decided, Rollback) and target is None:
        target = Target(FOR_MESSAGE, new_turns.where_turn_hangs(connection, conversation_id, row))
    if interrupt:
        waiting = [turn.id for turn in waiting_turns(connection, conversation_id, row.turn_number)]
        last_seq = cancel_waiting(connection, conversation_id, last_seq, waiting, now=now)
    turn = new_turns.queue_turn(
        connection,
        conversation_id,
        row,
        last_seq,
        text=text,
        key=key,
        metadata=metadata,
        output_schema=output_schema,
        files=files,
        echo=echo,
        kind=FOR_STEER if isinstance(decided, Steer) else FOR_MESSAGE,
        target=target,
    )
    if not interrupt or running is None:
        return turn
    relocked = lock_conversation(connection, conversation_id)
    cancelled = cancel_current(connection, conversation_id, relocked, running, now=now)
    return replace(turn, waits=not cancelled.ring, announce=cancelled.announce)


def _lock_owner(
    connection: Connection, conversation_id: uuid.UUID, owner_limit: int | None
) -> str | None:
    return None if owner_limit is None else owners.lock_owner(connection, conversation_id)


def _owner_count(connection: Connection, owner: str | None, limit: int | None) -> dict[str, Any]:
    """The owner's running conversations and its limit, when a limit applies to it."""
    if owner is None or limit is None:
        return {}
    return {"running": owners.running_conversations(connection, owner), "limit": limit}


def _not_steerable(
    connection: Connection, conversation_id: uuid.UUID, row: Any, branching: bool
) -> Exception:
    if branching:
        return errors.NotBranchable(
            "an edit or a regenerate starts a new branch: it cannot steer the running turn; "
            "submit it with on_busy='rollback', 'interrupt' or 'enqueue'"
        )
    waiting = turn_id_of(connection, conversation_id, row.turn_number)
    return errors.NotBranchable(
        f"turn {waiting} of conversation {conversation_id} waits for its client's tool "
        "outputs or an approval: nothing runs to steer; answer it, or submit with "
        "on_busy='enqueue', 'interrupt' or 'rollback'"
    )


def _refusal(
    connection: Connection,
    conversation_id: uuid.UUID,
    row: Any,
    decided: admission.Admission,
    *,
    key: str | None,
    owner: str | None,
) -> Exception:
    """The error a refusing decision raises (its message names what to do instead)."""
    match decided:
        case OverBudget(error=error):
            return errors.BudgetExceeded(error)
        case KeyReused(turn=seen):
            return errors.IdempotencyKeyReused(
                f"idempotency key {key!r} was already used for turn {seen.turn_id} of "
                f"conversation {conversation_id} with another text; use a new key for a new "
                "message"
            )
        case OverOwnerLimit(running=count, retry_after=retry_after):
            return errors.TooManyRunningTurns(
                f"owner {owner!r} already runs {count} turns, its limit; retry when one "
                f"has ended (in {retry_after} s)",
                retry_after,
            )
        case NotRetryable(status=status):
            return errors.NotRetryable(
                f"conversation {conversation_id} is {status}; only a failed one can be retried"
            )
        case NotSteerable(branching=branching):
            return _not_steerable(connection, conversation_id, row, branching)
        case Busy(waits_for_client=waits):
            running = turn_id_of(connection, conversation_id, row.turn_number)
            doing = "waits for its client's tool outputs" if waits else "is running"
            return errors.ConversationBusy(
                f"conversation {conversation_id} is {row.status}: turn {running} {doing}; "
                "submit with on_busy='enqueue' to queue the message behind it, 'steer' to "
                "send it to the running turn, 'interrupt' to cancel it and run this one, or "
                "'rollback' to also drop its messages",
                turn_id=running,
            )
    raise AssertionError(f"not a refusal: {decided!r}")  # pragma: no cover


__all__ = ["retry", "submit"]
