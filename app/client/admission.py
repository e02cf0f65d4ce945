"""**Pure**: what a submit or a retry becomes, from what the store read under the conversation's
lock. No I/O here: `intake` reads, asks `admit_submit` / `admit_retry`, then writes or refuses.

    what the store read                                            decision
    -------------------------------------------------------------  -------------------------------
 1  a budget of the conversation or of its owner is used up        OverBudget: nothing written
                                                                     (a turn would fail at its
                                                                     first model call)
    a submit:
 2    its idempotency key was used before, with the same text      Repeat: that turn again,
                                                                     nothing written
 3    its idempotency key was used before, with another text       KeyReused: nothing written
 4    a plain message (not an edit or a regenerate), the current   Answer: the text answers every
        turn waits for the user, and a question of the model         open question, not a new turn
        (`agent_clarify`) has no answer yet
 5    the conversation rests, no turn waits, and the owner runs    OverOwnerLimit: nothing
        its limit of turns already (policy `reject`)                 written
 6    the conversation rests and no turn waits                     Start: the turn runs now
 7    a turn runs, or waits for its client's tool outputs or an    Busy: refused, naming the turn
        approval, and `on_busy` is `reject`
 8    ... `on_busy` is `enqueue`                                   Enqueue: the turn waits behind
                                                                     it, its message outside the
                                                                     transcript
 9    ... `on_busy` is `interrupt`                                 Interrupt: queued next; the
                                                                     current turn and the other
                                                                     waiting ones are cancelled
10    ... `on_busy` is `rollback`                                  Rollback: as Interrupt, and the
                                                                     new message hangs where the
                                                                     current turn's messages hang:
                                                                     they leave the active path
                                                                     (kept, inactive)
11    ... `on_busy` is `steer`, an edit or a regenerate            NotSteerable: a new branch
                                                                     cannot join the running turn
12    ... `on_busy` is `steer`, and the current turn waits for     NotSteerable: nothing written
        its client's tool outputs or an approval
13    ... `on_busy` is `steer`                                     Steer: queued as a steer turn;
                                                                     the running turn takes the
                                                                     message in at its next model
                                                                     call (plan row 26), else it
                                                                     runs next
    a retry:
14    the conversation has not failed                              NotRetryable
15    it failed, and the owner runs its limit of turns already     OverOwnerLimit
      (policy `reject`)
16    it failed                                                    Start: a turn that continues
                                                                     it from its transcript

Rows are tried in order: a used-up budget refuses even a repeated submit. The owner's count is
read under its limit lock, before this command's own turn, so "at its limit" is `running >=
limit`. A repeated submit, an answer and a queued turn start nothing: no limit applies to them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.vocabulary import (
    BUSY_POLICIES,
    ENQUEUE,
    FAILED,
    IDLE,
    INTERRUPT,
    REJECT,
    ROLLBACK,
    STEER,
)

AT_REST = (IDLE, FAILED)

RETRY_AFTER_SECONDS = 5  # what a refusal over the owner's limit suggests


@dataclass(frozen=True)
class Keyed:
    """The turn an idempotency key was used for before, and the text it was submitted with."""

    turn_id: uuid.UUID
    number: int
    status: str
    message_seq: int | None
    text: str | None
    waits: bool  # queued behind another turn, its message outside the transcript


@dataclass(frozen=True)
class Read:
    """What the store read for a command, under the conversation's lock (and the owner's)."""

    status: str
    used_up: str | None = None  # the first used-up budget's error
    keyed: Keyed | None = None  # the turn of the submit's idempotency key, when it was used
    waiting: bool = False  # the current turn waits for the user (`requires_action`)
    questions: tuple[str, ...] = ()  # its clarification calls with no answer yet
    running: int = 0  # the owner's running conversations, before this command
    limit: int | None = None  # the owner's limit under the `reject` policy; None: no limit
    branching: bool = False  # an edit or a regenerate: a new branch, never an answer or a steer


@dataclass(frozen=True)
class OverBudget:
    error: str


@dataclass(frozen=True)
class Repeat:
    turn: Keyed


@dataclass(frozen=True)
class KeyReused:
    turn: Keyed


@dataclass(frozen=True)
class Answer:
    call_ids: tuple[str, ...]


@dataclass(frozen=True)
class OverOwnerLimit:
    running: int
    retry_after: int = RETRY_AFTER_SECONDS


@dataclass(frozen=True)
class Start:
    pass


@dataclass(frozen=True)
class Busy:
    waits_for_client: bool  # the current turn waits for outputs or approvals, not running


@dataclass(frozen=True)
class Enqueue:
    pass


@dataclass(frozen=True)
class Interrupt:
    pass


@dataclass(frozen=True)
class Rollback:
    pass


@dataclass(frozen=True)
class Steer:
    pass


@dataclass(frozen=True)
class NotSteerable:
    branching: bool  # an edit or a regenerate (else: the turn waits for its client)


@dataclass(frozen=True)
class NotRetryable:
    status: str


Admission = (
    OverBudget
    | Repeat
    | KeyReused
    | Answer
    | OverOwnerLimit
    | Start
    | Busy
    | Enqueue
    | Interrupt
    | Rollback
    | Steer
    | NotSteerable
    | NotRetryable
)


def admit_submit(read: Read, text: str, on_busy: str) -> Admission:
    """What a submit of `text` becomes (rows 1 to 13)."""
    if read.used_up is not None:
        return OverBudget(read.used_up)
    if read.keyed is not None:
        return Repeat(read.keyed) if read.keyed.text == text else KeyReused(read.keyed)
    if read.waiting and read.questions and not read.branching:
        return Answer(read.questions)
    if read.status in AT_REST and not read.waiting:
        return _start(read)
    return _when_busy(read, on_busy)


def admit_retry(read: Read) -> Admission:
    """What a retry becomes (rows 1, 14 to 16)."""
    if read.used_up is not None:
        return OverBudget(read.used_up)
    if read.status != FAILED:
        return NotRetryable(read.status)
    return _start(read)


def _when_busy(read: Read, on_busy: str) -> Admission:
    if on_busy == ENQUEUE:
        return Enqueue()
    if on_busy == INTERRUPT:
        return Interrupt()
    if on_busy == ROLLBACK:
        return Rollback()
    if on_busy == STEER:
        if read.branching or read.waiting:
            return NotSteerable(branching=read.branching)
        return Steer()
    return Busy(waits_for_client=read.waiting)


def _start(read: Read) -> Admission:
    if read.limit is not None and read.running >= read.limit:
        return OverOwnerLimit(read.running)
    return Start()


__all__ = [
    "AT_REST",
    "BUSY_POLICIES",
    "ENQUEUE",
    "INTERRUPT",
    "REJECT",
    "RETRY_AFTER_SECONDS",
    "ROLLBACK",
    "STEER",
    "Admission",
    "Answer",
    "Busy",
    "Enqueue",
    "Interrupt",
    "KeyReused",
    "Keyed",
    "NotRetryable",
    "NotSteerable",
    "OverBudget",
    "OverOwnerLimit",
    "Read",
    "Repeat",
    "Rollback",
    "Start",
    "Steer",
    "admit_retry",
    "admit_submit",
]
