"""The fleet as an operator sees it (`FleetView`), read from what the database already keeps: the
live workers (each holds a liveness token: `pg_locks`, its session named after it), the turns
queued for a worker and the oldest one's wait, the runs going on, the last hour's outcomes, the
last day's failures by class, and today's spend per owner. Pure: the reads are
`store/fleet.py`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

_HTTP = re.compile(r"\(HTTP (\d{3})[^)]*\)")
MAX_CLASS_CHARS = 60


@dataclass(frozen=True)
class WorkerView:
    name: str  # its lease owner name (host:pid:...), as its liveness session is named
    token: int
    since: datetime  # when its liveness session began
    in_flight: int  # the runs it holds now
    last_heartbeat: datetime | None


@dataclass(frozen=True)
class FleetView:
    workers: list[WorkerView]
    queued: int  # runs waiting for a worker (no lease)
    oldest_queued_s: float | None  # how long the oldest of them has waited
    running: int  # runs a worker holds
    outcomes_last_hour: dict[str, int]  # turn status -> count, of the turns of the last hour
    failures_last_day: list[tuple[str, int]] = field(default_factory=list)  # by class
    spend_today: list[tuple[str, Decimal]] = field(default_factory=list)  # by owner, most first


def error_class(error: str | None) -> str:
    """What kind of failure an error is: its HTTP status and error type when a provider gave
    one ("HTTP 429 RateLimitError"), else its text up to the first colon."""
    text = (error or "").strip()
    found = _HTTP.search(text)
    if found is not None:
        return found.group(0)[1:-1][:MAX_CLASS_CHARS]
    head = text.split(":", 1)[0].strip()
    return (head or "unknown")[:MAX_CLASS_CHARS]


__all__ = ["FleetView", "WorkerView", "error_class"]
