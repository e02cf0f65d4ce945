"""The lease runner: claim a conversation, hold its lease (a heartbeat renews it while the step
loop waits on the model or a tool), and hand the claimed turn to the step loop until it rests.

A fresh turn and a resumed one are the same call. If the lease is lost the run is cancelled and
writes nothing; a run cancelled otherwise (a shutdown) releases the lease for another worker; a
run the database went away under raises `Interrupted` with its claim, which the host gives back
once the database answers (an outage is not the turn's fault: it costs no attempt).
A user's cancel reaches a running turn three ways: the live notice (`TurnRunner.cancel`, at
once), the heartbeat, and every committed step (`step_loop`; both return the turn's cancel flag).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from app.config import Settings
from app.live import ANY_STREAM, RESUMED
from app.models import PROCESSING
from app.telemetry import logs, metrics, tracing
from app.worker import failpoints, plan
from app.worker.broadcast import Broadcaster
from app.worker.checker import SchemaChecker
from app.worker.crashes import Ring, after_crash, claim_crashed
from app.worker.outcome import Outcome
from app.worker.ports import ModelClient, ToolProvider, TurnStore
from app.worker.step_loop import StepLoop, next_seq
from app.worker.store import Claim, Deferred, LeaseLost, Snapshot
from app.worker.store.outage import Interrupted, interrupted_by_database
from app.worker.threads import DatabaseThreads

log = logging.getLogger(__name__)


class TurnRunner:
    """Runs conversations to their next resting state, with what every turn of a process shares:
    the store, the model, the tools, the settings and the database threads."""

    def __init__(
        self,
        store: TurnStore,
        *,
        model: ModelClient,
        tools: ToolProvider,
        settings: Settings,
        owner: str,
        db: DatabaseThreads | None = None,
        broadcaster: Broadcaster | None = None,
        checker: SchemaChecker | None = None,
        again: Ring | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.tools = tools
        self.settings = settings
        self.owner = owner
        self.db = db or DatabaseThreads()
        self.broadcaster = broadcaster or Broadcaster(None)
        self.checker = checker or SchemaChecker(
            settings.schema_check_seconds, settings.schema_check_memory_mb
        )
        self.again = again  # rings a conversation after a delay (the host's doorbell)
        self._turns: dict[uuid.UUID, StepLoop] = {}  # the turns running in this process

    def live_claims(self) -> list[tuple[uuid.UUID, int]]:
        """The runs alive in this process: each one's conversation and lease epoch (call on the
        runner's loop)."""
        return [(cid, turn.claim.epoch) for cid, turn in self._turns.items()]

    def cancel(self, conversation_id: uuid.UUID) -> bool:
        """The user asked to cancel this conversation's turn (call on the runner's loop): abort
        what it is waiting on now. False when no turn of it runs here."""
        turn = self._turns.get(conversation_id)
        if turn is None:
            return False
        turn.request_cancel()
        return True

    async def run(self, conversation_id: uuid.UUID) -> Outcome:
        """Claim the conversation and drive it until it rests; resume whatever is committed.

        A turn that ends while another waits behind it leaves the conversation `processing`
        with no lease: the next turn is claimed at once (the outcome is the last turn's)."""
        while True:
            outcome, next_waits = await self._run_turn(conversation_id)
            if not next_waits:
                return outcome

    async def _run_turn(self, conversation_id: uuid.UUID) -> tuple[Outcome, bool]:
        try:
            snapshot = await self.db.run(
                self.store.claim,
                conversation_id,
                self.owner,
                self.settings.lease_ttl_seconds,
                self.settings.owner_max_running_turns,
            )
        except Exception as exc:  # (after the claim committed: its lease given back, counted)
            if interrupted_by_database(exc):
                raise  # (no claim to give back: the lost-doorbell round rings it once it answers)
            return await claim_crashed(self, self.owner, conversation_id, exc, self.again)
        if snapshot is None:
            return Outcome.NOT_CLAIMED, False
        if isinstance(snapshot, Deferred):
            metrics.TURNS_DEFERRED.inc()
            return Outcome.DEFERRED, False
        logs.note_turn(snapshot.claim.turn_id)
        _count_claim(snapshot)
        attributes = {
            "chatworker.conversation_id": str(conversation_id),
            "chatworker.turn_id": str(snapshot.claim.turn_id),
            "chatworker.worker_id": self.owner,
            "chatworker.attempt": snapshot.attempts,
            "chatworker.resumed": not snapshot.first,
            "chatworker.taken_over": snapshot.taken_over,
            "gen_ai.request.model": snapshot.model,
        }
        with tracing.turn_span(
            snapshot.trace_context, resumed=not snapshot.first, attributes=attributes
        ) as span:
            outcome, next_waits = await self._run_claimed(snapshot)
            span.set_attribute("chatworker.outcome", outcome.value)
            return outcome, next_waits

    def _discard_previous(self, snapshot: Snapshot) -> None:
        """A reply the previous worker was streaming will never come: its readers drop it."""
        if not snapshot.first:
            self.broadcaster.discarded(
                snapshot.claim.conversation_id,
                next_seq(snapshot.transcript),
                ANY_STREAM,
                RESUMED,
            )

    async def _run_claimed(self, snapshot: Snapshot) -> tuple[Outcome, bool]:
        conversation_id = snapshot.claim.conversation_id
        claim = snapshot.claim
        gave_up = plan.on_claim(
            snapshot.attempts, self.settings.max_attempts, snapshot.cancel_requested
        )
        if gave_up is not None:
            failed = await self.db.run(
                self.store.fail, claim, gave_up.error, status=snapshot.status
            )
            self.broadcaster.committed(conversation_id, failed.event_seq)
            self._discard_previous(snapshot)
            _count_end(snapshot.model, Outcome.FAILED)
            return Outcome.FAILED, failed.status == PROCESSING
        failpoints.hit("after_claim")
        self.broadcaster.committed(conversation_id, snapshot.event_seq)
        self._discard_previous(snapshot)
        lost = asyncio.Event()
        turn = StepLoop(self, snapshot)
        self._turns[conversation_id] = turn
        beating = asyncio.create_task(self._heartbeat(turn, asyncio.current_task(), lost))
        try:
            outcome = await turn.drive()
            self.store.keep_history(claim, turn.transcript)
            _count_end(snapshot.model, outcome)
            return outcome, turn.status == PROCESSING
        except LeaseLost:
            log.warning("conversation %s: lease lost, stopping without writing", conversation_id)
            metrics.LEASES_LOST.inc()
            return Outcome.LEASE_LOST, False
        except asyncio.CancelledError:
            if lost.is_set():
                log.warning("conversation %s: lease lost while waiting, stopped", conversation_id)
                metrics.LEASES_LOST.inc()
                return Outcome.LEASE_LOST, False
            await asyncio.shield(self._release(claim))
            raise
        except Exception as exc:
            # The database went away: not the turn's fault, so it must not count as a crash of
            # the turn (an attempt); the host gives the claim back once the database answers.
            if interrupted_by_database(exc):
                raise Interrupted(claim) from exc
            # Anything else (a constraint the run's statement broke included) is the turn's:
            # counted as an attempt, failed with its error once they are spent.
            return await after_crash(turn, exc, self.again)
        finally:
            beating.cancel()
            self._turns.pop(conversation_id, None)

    async def _heartbeat(
        self, turn: StepLoop, runner: asyncio.Task[Any] | None, lost: asyncio.Event
    ) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_seconds)
            claim = turn.claim  # (a steer message taken in moves it to the steer turn)
            try:
                beat = await self.db.run(
                    self.store.heartbeat, claim, self.settings.lease_ttl_seconds
                )
            except LeaseLost:
                lost.set()
                if runner is not None:
                    runner.cancel()
                return
            except Exception:  # the database may be back before the lease runs out
                log.exception("conversation %s: heartbeat failed", claim.conversation_id)
                continue
            if beat.cancel_requested:  # the live notice was lost: the flag is committed
                turn.request_cancel()

    async def _release(self, claim: Claim) -> None:
        try:
            await self.db.run(self.store.release, claim)
        except LeaseLost:
            pass
        except Exception:  # the lease expires by itself; recovery picks the turn up then
            log.exception("conversation %s: could not release the lease", claim.conversation_id)


_ENDED = {Outcome.IDLE: "completed", Outcome.FAILED: "failed", Outcome.CANCELLED: "cancelled"}


def _count_end(model: str, outcome: Outcome) -> None:
    if outcome is Outcome.REQUIRES_ACTION:
        metrics.TURNS_PAUSED.labels(model).inc()
    elif outcome in _ENDED:
        metrics.TURNS_ENDED.labels(model, _ENDED[outcome]).inc()


def _count_claim(snapshot: Snapshot) -> None:
    if snapshot.first:
        metrics.TURNS_STARTED.labels(snapshot.model).inc()
    else:
        after = "takeover" if snapshot.taken_over else "handover"
        metrics.TURNS_RESUMED.labels(snapshot.model, after).inc()


__all__ = ["Outcome", "TurnRunner"]
