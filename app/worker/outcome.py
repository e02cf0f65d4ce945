"""How a run of a claimed conversation ended: the lease runner's answer to its host, which
counts it, rings the owner's waiting turns when a slot was freed, and logs it.
"""

from __future__ import annotations

import enum


class Outcome(enum.Enum):
    IDLE = "idle"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REQUIRES_ACTION = "requires_action"  # the turn waits for the user or their client
    NOT_CLAIMED = "not_claimed"  # nothing to do, or another worker owns it
    DEFERRED = "deferred"  # its owner runs its limit of turns: it waits (per-owner limits)
    LEASE_LOST = "lease_lost"  # another worker took over mid-run; this one wrote nothing more
    CRASHED = "crashed"  # the run raised: the attempt counted, the lease given back (`crashes`)


__all__ = ["Outcome"]
