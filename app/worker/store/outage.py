"""A database outage as the worker sees it: the errors that are the connection's fault, never the
turn's, and giving back the claim of a run that one interrupted.

A run whose statement failed because the database went away (a crash, a restart, a terminated
backend, a server out of connections or unreachable) did nothing wrong. Its lease, left alone,
would make the turn wait out its TTL; and the claim counted an attempt toward the turn's bound
(`CHATWORKER_MAX_ATTEMPTS`), which is for turns that crash their worker, not for outages. So the
host keeps the run's claim and, once the database answers, gives it back: one fenced statement
releases the lease and takes back the attempt the claim counted, and the turn is rung again.

    error (anywhere in its `__cause__` chain)          an outage?
    -------------------------------------------------  -------------------------------------------
    psycopg OperationalError with no SQLSTATE          yes: the connection failed or broke
    SQLSTATE class 08 (connection), 53 (resources),    yes: the server refused or ended the session
      57P01-57P05 (shutdown, crash, starting up)
    psycopg InterfaceError                             yes: the connection is closed
    SQLAlchemy: an invalidated connection, a pool      yes
      timeout, a disconnection; DatabaseUnavailable
    anything else (a constraint, a statement timeout,  no: the turn's own error path decides
      a deadlock, a bug)
"""

from __future__ import annotations

from datetime import datetime

import psycopg
from sqlalchemy import Engine, case, exc, update

from app.errors import ChatWorkerError, DatabaseUnavailable
from app.models import RELEASED_LEASE
from app.models.tables import conversations
from app.worker.store.fence import FENCE, NOW, fence_parameters
from app.worker.store.records import Claim

c = conversations.c

_OUTAGE_STATES = ("08", "53", "57P01", "57P02", "57P03", "57P04", "57P05")
_UNAVAILABLE = (
    psycopg.InterfaceError,
    exc.DisconnectionError,
    exc.TimeoutError,
    DatabaseUnavailable,
)


class Interrupted(ChatWorkerError):
    """A run stopped because the database went away: its claim is given back once it answers
    (raised from the database error)."""

    def __init__(self, claim: Claim) -> None:
        super().__init__(f"conversation {claim.conversation_id}: the database went away")
        self.claim = claim


def interrupted_by_database(error: BaseException) -> bool:
    """Whether `error`, or an error it was raised from, says the database went away."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _connection_failed(current):
            return True
        if isinstance(current, exc.DBAPIError) and current.__cause__ is None:
            current = current.orig  # (SQLAlchemy raises it from its driver's error: its cause)
        else:
            current = current.__cause__
    return False


def _connection_failed(error: BaseException) -> bool:
    if isinstance(error, psycopg.OperationalError):
        return error.sqlstate is None or error.sqlstate.startswith(_OUTAGE_STATES)
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return True  # (else its driver's error, its cause, says)
    return isinstance(error, _UNAVAILABLE)


# The lease released and the claim's attempt taken back (none below zero: a step the run
# committed reset the count, and so already forgave the claim). Fenced: a lease taken over
# meanwhile is the new holder's, and one given back already is given back once.
GIVE_BACK = (
    update(conversations)
    .where(FENCE, c.lease_owner.is_not(None))
    .values(
        **RELEASED_LEASE,
        attempts=case((c.attempts > 0, c.attempts - 1), else_=0),
        heartbeat_at=NOW,
        updated_at=NOW,
    )
    .returning(c.attempts)
)


def give_back(engine: Engine, claim: Claim, now: datetime) -> int | None:
    """Give an interrupted run's claim back; the turn's attempts now, or None when another
    worker holds the conversation (or it moved on) and there is nothing to give back."""
    with engine.begin() as connection:
        row = connection.execute(
            GIVE_BACK, fence_parameters(claim.conversation_id, claim.epoch, now=now)
        ).first()
    return None if row is None else int(row.attempts)


__all__ = ["GIVE_BACK", "Interrupted", "give_back", "interrupted_by_database"]
