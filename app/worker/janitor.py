"""The janitor: fail running conversations whose heartbeat is older than the stale threshold.

It is the backstop for what recovery could not revive (no worker running, a poisoned turn). It
keys on `heartbeat_at`, which a live worker renews even during a slow tool, and uses the partial
index on running conversations, so a sweep costs the same however many idle conversations exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.telemetry import metrics
from app.worker.store import StaleConversation, Upkeep

STALE_ERROR = (
    "No progress for more than {threshold}: the worker running this turn stopped "
    "(crashed or lost) and nothing revived it. Retry to continue from the saved transcript."
)


@dataclass(frozen=True)
class JanitorReport:
    conversations: list[StaleConversation]
    dry_run: bool
    older_than: float


def stale_error(older_than: float) -> str:
    minutes, seconds = divmod(int(older_than), 60)
    threshold = (
        f"{minutes} min" + (f" {seconds} s" if seconds else "") if minutes else f"{seconds} s"
    )
    return STALE_ERROR.format(threshold=threshold)


def clean_up(upkeep: Upkeep, older_than: float, dry_run: bool = False) -> JanitorReport:
    """Fail (or, with `dry_run`, only list) conversations silent for `older_than` seconds."""
    if dry_run:
        found = upkeep.stale(older_than)
    else:
        found = upkeep.fail_stale(older_than, stale_error(older_than))
        metrics.JANITOR_FAILED.inc(len(found))
    return JanitorReport(found, dry_run, older_than)
