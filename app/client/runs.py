"""What an operator asks of the runs across owners (`RunFilter`), checked; and a run as listed
(`RunView`): a turn with its conversation's owner and, while it runs, its signs of progress.
Pure: the query is `store/runs.py`'s.

    filter        selects
    ------------  -------------------------------------------------------------------------
    status        queued | running | requires_action | completed | failed | cancelled, or
                  stuck: running, its worker's heartbeat older than `stuck_seconds`
    owner         one owner's
    model         turns run on that model (the turn's, else its conversation's)
    since, until  created in [since, until)
    cost_above    cost (USD) above this
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from app.errors import InvalidRequest
from app.vocabulary import TURN_STATUSES

STUCK = "stuck"
STATUSES = (*TURN_STATUSES, STUCK)
MAX_PAGE = 200


@dataclass(frozen=True)
class RunFilter:
    status: str | None = None
    owner: str | None = None
    model: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    cost_above: Decimal | None = None
    stuck_seconds: float = 60.0
    limit: int = 50
    before: uuid.UUID | None = None  # the previous page's last turn

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUSES:
            raise InvalidRequest(f"status must be one of {', '.join(STATUSES)}")
        if not 1 <= self.limit <= MAX_PAGE:
            raise InvalidRequest(f"limit must be 1 to {MAX_PAGE}")
        if self.stuck_seconds <= 0:
            raise InvalidRequest("stuck_seconds must be above 0")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise InvalidRequest("since must be before until")
        for moment in (self.since, self.until):
            if moment is not None and moment.tzinfo is None:
                raise InvalidRequest("since and until need a time zone (e.g. 2026-11-28T10:00Z)")


@dataclass(frozen=True)
class RunView:
    turn_id: uuid.UUID
    conversation_id: uuid.UUID
    owner: str | None
    number: int
    status: str
    model: str | None
    error: str | None
    cost_usd: Decimal
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    iterations: int  # the conversation's, in its current turn
    worker: str | None  # the lease's holder, while it runs
    heartbeat_age_s: float | None  # since the holder's last heartbeat, while it runs
    current: bool = False  # its conversation's current turn (none came after it)


__all__ = ["MAX_PAGE", "STATUSES", "STUCK", "RunFilter", "RunView"]
