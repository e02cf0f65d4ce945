"""The host's recovery rounds: which turns this worker rings again, and when; recovery is measured
from the fault's end, by the database's own signals and an index, never by waiting out a lease.

    round                                what it finds                      rung again
    -----------------------------------  ---------------------------------  ----------------------
    `watch`, every second                the claims a database outage        given back (the lease
      (CHATWORKER_DEAD_WORKER_SWEEP_       interrupted here                    and the attempt the
      SECONDS), after keeping the                                              claim counted), then
      liveness token                                                           rung
                                         leases whose holder died (its       after `recovery_delay`
                                           token is gone from `pg_locks`)
                                         queued turns nobody took for        at once, then after
                                           CHATWORKER_LOST_DOORBELL_SECONDS    twice as long each
                                           (a doorbell Redis lost)             time, up to a lease
    `sweep`, every 15 s                  running turns silent for a lease's  after `recovery_delay`
      (CHATWORKER_RECOVERY_INTERVAL_       length (a frozen or cut-off
      SECONDS)                             worker)
    the queue lost its doorbells         (`queue_watch`: Redis flushed, or   the next `watch` rings
                                           back after an outage)              every waiting turn at
                                                                              once

The dead, queued and silent turns are read under the sweep lock, by one worker a round. A doorbell
rung twice is harmless (a claim is conditional); each process rings a conversation again at most
once per window, so the rate per conversation stays bounded.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from app.config import Settings
from app.telemetry import metrics
from app.worker.plan import recovery_delay
from app.worker.store import Claim, LivenessToken, Upkeep
from app.worker.store.liveness import Alive
from app.worker.store.outage import give_back
from app.worker.threads import DatabaseThreads

log = logging.getLogger(__name__)

Ring = Callable[[uuid.UUID, float], None]  # (conversation id, delay in seconds)


class Runs(Protocol):
    """What recovery asks of the process's runs (`lease_runner.TurnRunner`)."""

    owner: str

    def live_claims(self) -> list[Alive]: ...


class Recovery:
    """The recovery state of one host; every method runs on the host's loop."""

    def __init__(
        self,
        settings: Settings,
        *,
        upkeep: Upkeep,
        liveness: LivenessToken,
        runs: Runs,
        db: DatabaseThreads,
        ring: Ring,
        running: Callable[[uuid.UUID], bool],
        orphan_after: float,
        jitter: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.upkeep = upkeep
        self.liveness = liveness
        self.runs = runs
        self.db = db
        self.ring = ring
        self.running = running  # a run of it is here already: it runs again after
        # A lease's length without a sign of life: its worker is gone (or its doorbell was lost).
        self.orphan_after = orphan_after
        self.jitter = jitter
        self.clock = clock  # (monotonic: the windows of the doorbells this process sent)
        self._resent: dict[uuid.UUID, float] = {}  # dead or silent ones re-sent: until when
        self._rung: dict[uuid.UUID, tuple[int, float]] = {}  # queued ones: times, until when
        self._interrupted: dict[uuid.UUID, Claim] = {}
        self._queue_emptied = False

    def interrupted(self, claim: Claim) -> None:
        """A run here stopped because the database went away: its claim is given back (and the
        turn rung) by the first round that reaches the database."""
        self._interrupted[claim.conversation_id] = claim

    def queue_emptied(self) -> None:
        """The queue lost its doorbells: the next round rings every turn that waits, at once."""
        self._queue_emptied = True

    async def watch(self) -> int:
        """Keep this process's liveness token (the leases of its live runs follow a new one),
        give back the claims an outage interrupted, and ring the turns of dead workers and the
        queued turns nobody took; how many were rung."""
        await self.db.run(self.liveness.keep, self.runs.owner, self.runs.live_claims())
        rung = await self._give_back()
        emptied = self._queue_emptied
        queued_for = 0.0 if emptied else self.settings.lost_doorbell_seconds
        found = await self.db.run(self.upkeep.unattended, queued_for)
        if found is None:
            return rung  # another worker's round holds the sweep lock: it rings them
        if emptied:
            self._queue_emptied = False
            self._resent.clear()
            self._rung.clear()
            silent = await self.db.run(self.upkeep.orphans, self.orphan_after)
            rung += self._resend(silent, "recovery")
        rung += self._resend(found.dead, "dead worker")
        return rung + self._ring_queued(found.queued)

    async def sweep(self) -> int:
        """Re-enqueue running conversations that nobody has touched for `orphan_after` seconds,
        each after `plan.recovery_delay` (a random spread that grows with its crashes)."""
        return self._resend(await self.db.run(self.upkeep.orphans, self.orphan_after), "recovery")

    async def _give_back(self) -> int:
        rung = 0
        for conversation_id, claim in list(self._interrupted.items()):
            now = self.upkeep.clock()
            attempts = await self.db.run(give_back, self.upkeep.engine, claim, now)
            del self._interrupted[conversation_id]  # (still down: raised above, kept for later)
            if attempts is None or self.running(conversation_id):
                continue  # taken over meanwhile, or a doorbell of it reached this process
            self.ring(conversation_id, recovery_delay(attempts, random.random(), self.jitter))
            metrics.RECOVERY_REENQUEUES.inc()
            rung += 1
        if rung:
            log.info("database back: gave back %d interrupted claim(s) and rang them", rung)
        return rung

    def _resend(self, orphans: list[tuple[uuid.UUID, int]], sweep: str) -> int:
        now = self.clock()
        resent = 0
        for conversation_id, attempts in orphans:
            if self.running(conversation_id) or self._pending(conversation_id, now):
                continue  # its doorbell is already on its way
            delay = recovery_delay(attempts, random.random(), self.jitter)
            self._resent[conversation_id] = now + delay + self.orphan_after
            self.ring(conversation_id, delay)
            metrics.RECOVERY_REENQUEUES.inc()
            resent += 1
        self._resent = {k: until for k, until in self._resent.items() if until > now}
        if resent:
            log.info("%s sweep: re-enqueued %d conversation(s)", sweep, resent)
        return resent

    def _ring_queued(self, queued: list[tuple[uuid.UUID, int]]) -> int:
        """Ring each queued turn again, unless rung within its window: `lost_doorbell_seconds`
        after the first ring, twice that after the second, ... up to a lease's length."""
        now = self.clock()
        first = self.settings.lost_doorbell_seconds
        rung = 0
        for conversation_id, attempts in queued:
            if self.running(conversation_id) or self._pending(conversation_id, now):
                continue
            times = self._rung.get(conversation_id, (0, 0.0))[0]
            delay = recovery_delay(attempts, random.random(), self.jitter)
            window = min(max(first, self.orphan_after), first * 2 ** min(times, 16))
            self._rung[conversation_id] = (times + 1, now + delay + window)
            self.ring(conversation_id, delay)
            metrics.RECOVERY_REENQUEUES.inc()
            rung += 1
        # (forgotten once a window passed twice over: it was taken, or it waits in silence)
        self._rung = {
            k: (times, until)
            for k, (times, until) in self._rung.items()
            if until + self.orphan_after > now
        }
        if rung:
            log.info("lost doorbell sweep: rang %d queued conversation(s) again", rung)
        return rung

    def _pending(self, conversation_id: uuid.UUID, now: float) -> bool:
        """A doorbell this process sent for it is still on its way (or was, a moment ago)."""
        queued = self._rung.get(conversation_id)
        return self._resent.get(conversation_id, 0.0) > now or (
            queued is not None and queued[1] > now
        )


__all__ = ["Recovery", "Ring", "Runs"]
