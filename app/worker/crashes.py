"""A run that raised: what a turn whose step code crashed (an unexpected exception in this
worker, not a lost process) does next, so that one that crashes the same way on every claim ends.

Each claim counts an attempt (`conversations.attempts`, reset by every committed step); a run
that raises has used its claim's attempt like a worker killed mid-step would have:

    the crashed run                                            next
    ---------------------------------------------------------  ---------------------------------
    a cancel was requested (the claim, a step, the heartbeat   the cancel's rows of the planner
      or the live notice saw it)                                 (row 3): every open call answered
                                                                 "cancelled by the user", the
                                                                 turn `cancelled`
    the claim was attempt `max_attempts` or later              Fail: "Gave up after N attempts:
                                                                 the run failed each time; the
                                                                 last error: <type>: <message>"
                                                                 (redacted, as model errors are)
    otherwise                                                  the lease released, the turn rung
                                                                 again after `plan.recovery_delay`

A database that went away (`store.outage.interrupted_by_database`) is not the turn's: the run
stops with its claim kept and the host gives it back once the database answers, no attempt
counted. Any other error, a constraint the run's statement broke included, is the turn's.

`decide` is pure; `after_crash` acts on it with the step loop's own commits. A claim that
raised after it committed (building the turn from what it read) is `claim_crashed`: its lease is
given back by owner (`store.crashed`), and with no transcript to cancel by, a cancelled one fails
with its error at once. A crash while acting (the database is gone) leaves the lease to expire,
as before: the recovery sweep and the attempt count take it from there.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from app.config import Settings
from app.models import PROCESSING
from app.telemetry import metrics
from app.worker import plan
from app.worker.llm.error_text import redact
from app.worker.outcome import Outcome
from app.worker.step_loop import Means, StepLoop
from app.worker.steps import Cancel, Finish, RejectCall
from app.worker.store import Claim, LeaseLost
from app.worker.store.crashed import release_crashed_claim

log = logging.getLogger(__name__)

Ring = Callable[[uuid.UUID, float], None]  # (conversation id, delay in seconds)

CRASHED_ERROR = "Gave up after {attempts} attempts: the run failed each time; the last error: {why}"
MAX_WHY_CHARS = 400


@dataclass(frozen=True)
class EndCancelled:
    """The user cancelled the turn: end it so, whatever crashed."""


@dataclass(frozen=True)
class GiveUp:
    """The attempts are spent: the turn fails with the crash's own error."""

    error: str


@dataclass(frozen=True)
class TryAgain:
    """The lease is given back and the turn rung again after `delay` seconds."""

    delay: float


Decision = EndCancelled | GiveUp | TryAgain


def decide(
    attempts: int, max_attempts: int, cancel_requested: bool, why: str, draw: float
) -> Decision:
    """The table above; `attempts` counts the crashed run's claim, `why` is the crash's
    readable text, `draw` a random number in [0, 1) spreading the next try."""
    if cancel_requested:
        return EndCancelled()
    if attempts >= max_attempts:
        return GiveUp(CRASHED_ERROR.format(attempts=attempts, why=why))
    return TryAgain(plan.recovery_delay(attempts, draw))


def readable(exc: BaseException, secrets: tuple[str, ...] = ()) -> str:
    """The crash in one line: its type and message, without credentials."""
    message = " ".join(str(exc).split())[:MAX_WHY_CHARS]
    return redact(f"{type(exc).__name__}: {message}" if message else type(exc).__name__, secrets)


async def after_crash(turn: StepLoop, exc: Exception, again: Ring | None) -> tuple[Outcome, bool]:
    """Act on `decide` for the run of `turn` that raised `exc`; the outcome, and whether the
    next waiting turn of the conversation is now current (a failure or cancel handed over)."""
    snapshot, settings = turn.snapshot, turn.runner.settings
    why = readable(exc, _secrets(settings))
    decision = decide(
        snapshot.attempts, settings.max_attempts, turn.cancel_requested, why, random.random()
    )
    log.error(
        "conversation %s: run crashed on attempt %d (%s): %s",
        turn.claim.conversation_id,
        snapshot.attempts,
        type(decision).__name__,
        why,
        exc_info=exc,
    )
    metrics.RUNS_CRASHED.inc()
    try:
        match decision:
            case EndCancelled():
                outcome = await _end_cancelled(turn)
            case GiveUp(error):
                await turn.fail(error)
                outcome = Outcome.FAILED
            case TryAgain(delay):
                await turn.db.run(turn.store.release, turn.claim)
                if again is not None:
                    again(turn.claim.conversation_id, delay)
                return Outcome.CRASHED, False
    except LeaseLost:
        return Outcome.LEASE_LOST, False
    except Exception:  # the lease expires by itself; the sweep and the attempt count go on
        log.exception("conversation %s: could not act on its crash", turn.claim.conversation_id)
        return Outcome.CRASHED, False
    return outcome, turn.status == PROCESSING


async def claim_crashed(
    runner: Means, owner: str, conversation_id: uuid.UUID, exc: Exception, again: Ring | None
) -> tuple[Outcome, bool]:
    """A claim of `owner` that raised: its lease given back, the turn rung again or failed."""
    settings = runner.settings
    why = readable(exc, _secrets(settings))
    log.error("conversation %s: claim crashed: %s", conversation_id, why, exc_info=exc)
    metrics.RUNS_CRASHED.inc()
    try:
        held = await runner.db.run(
            release_crashed_claim, runner.store.engine, conversation_id, owner, runner.store.clock()
        )
        if held is None:
            return Outcome.CRASHED, False  # (nothing was claimed: the sweep rings it again)
        attempts = settings.max_attempts if held.cancel_requested else held.attempts
        decision = decide(attempts, settings.max_attempts, False, why, random.random())
        if isinstance(decision, GiveUp):
            claim = Claim(conversation_id, owner, held.epoch, held.turn_id)
            failed = await runner.db.run(
                runner.store.fail, claim, decision.error, status=held.status
            )
            return Outcome.FAILED, failed.status == PROCESSING
    except LeaseLost:
        return Outcome.LEASE_LOST, False
    except Exception:
        log.exception("conversation %s: could not act on its crashed claim", conversation_id)
        return Outcome.CRASHED, False
    if again is not None and isinstance(decision, TryAgain):
        again(conversation_id, decision.delay)
    return Outcome.CRASHED, False


def _secrets(settings: Settings) -> tuple[str, ...]:
    key = settings.llm_api_key
    return (key.get_secret_value(),) if key is not None else ()


async def _end_cancelled(turn: StepLoop) -> Outcome:
    """Row 3 of the planner, alone: nothing but the cancel's own steps can crash here."""
    max_iterations = turn.runner.settings.max_iterations
    while True:
        action = plan.next_step(
            turn.transcript, turn.iterations, max_iterations, cancel_requested=True
        )
        match action:
            case RejectCall(call, error):
                await turn.record_result(call, error, is_error=True)
            case Finish():
                await turn.commit(turn.store.finish, turn.claim, status=turn.status)
                return Outcome.IDLE
            case Cancel():
                await turn.commit(turn.store.cancel, turn.claim, status=turn.status)
                return Outcome.CANCELLED
            case _:  # (rows 1-3 cover a cancelled turn: nothing else is planned)
                raise AssertionError(f"a cancelled turn planned {action!r}")


__all__ = [
    "CRASHED_ERROR",
    "Decision",
    "EndCancelled",
    "GiveUp",
    "TryAgain",
    "after_crash",
    "decide",
]
