"""A turn's life in the database: claim, heartbeat, record each step, finish or fail, release.

Every write after the claim is fenced by the lease epoch the claim granted: when the fence does not
match, another worker owns the conversation now, and `LeaseLost` is raised with nothing written.
Each call is one short transaction; none is held open across an LLM or tool call.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from sqlalchemy import Engine

from app.errors import ChatWorkerError
from app.worker.plan import Entry, ToolCall
from app.worker.ports import Usage
from app.worker.store import fence
from app.worker.store.clock import Clock, utc_now
from app.worker.store.driver import Row, StepConflict, make_driver
from app.worker.store.fence import StepKind, Write
from app.worker.transcript import Transcript


class LeaseLost(ChatWorkerError):
    """Another worker claimed the conversation: this one must stop without writing."""


@dataclass(frozen=True)
class Claim:
    """Proof of ownership: every fenced write names the epoch it was granted."""

    conversation_id: uuid.UUID
    owner: str
    epoch: int


@dataclass(frozen=True)
class Snapshot:
    """What a worker knows after a claim: the turn's settings and counters, and the whole
    transcript (built here, on the database thread, for the turn that owns it from now on)."""

    claim: Claim
    model: str
    allowed_tools: tuple[str, ...]
    tool_choice: str
    iterations: int
    attempts: int
    transcript: Transcript


class TurnStore:
    """The worker's database port for running turns. Synchronous: the turn calls it from the
    database threads."""

    def __init__(self, engine: Engine, clock: Clock = utc_now) -> None:
        self.engine = engine
        self.clock = clock
        self._driver = make_driver(engine)

    def claim(self, conversation_id: uuid.UUID, owner: str, ttl: float) -> Snapshot | None:
        """Take the lease if the conversation is running and nobody holds a live lease.

        Returns None when there is nothing to do or another worker owns it. The transcript is
        read after the claim committed, so every step an earlier owner committed is in it.
        """
        now = self.clock()
        parameters = {
            "claim_id": conversation_id,
            "owner": owner,
            "now": now,
            "expires": now + timedelta(seconds=ttl),
        }
        claimed = self._driver.claim(parameters, {"transcript_id": conversation_id})
        if claimed is None:
            return None
        found, transcript = claimed
        row = _ClaimRow(*found)
        return Snapshot(
            claim=Claim(conversation_id, owner, row.lease_epoch),
            model=row.model,
            allowed_tools=tuple(row.allowed_tools or ()),
            tool_choice=row.tool_choice,
            iterations=row.iterations,
            attempts=row.attempts,
            transcript=Transcript(row.instructions, map(_entry, transcript)),
        )

    def heartbeat(self, claim: Claim, ttl: float) -> None:
        """Renew the lease; raise `LeaseLost` if it was taken over."""
        self._write(Write.HEARTBEAT, claim, ttl=ttl)

    def release(self, claim: Claim) -> None:
        """Give the lease up (graceful shutdown) so another worker may claim at once."""
        self._write(Write.RELEASE, claim)

    def record_tool_calls(
        self,
        claim: Claim,
        *,
        seq: int,
        content: str | None,
        calls: Sequence[ToolCall],
        usage: Usage,
        ttl: float,
        finish_reason: str | None = None,
    ) -> Entry:
        """The assistant's tool calls and status `tool_loop`, in one transaction."""
        entry = Entry(seq, "assistant", content, tuple(calls), finish_reason=finish_reason)
        self._step(StepKind.TOOL_CALLS, claim, entry, ttl=ttl, usage=usage)
        return entry

    def record_tool_result(
        self, claim: Claim, *, seq: int, call: ToolCall, content: str, is_error: bool, ttl: float
    ) -> Entry:
        """One tool result, in its own transaction."""
        entry = Entry(
            seq, "tool", content, tool_call_id=call.id, tool_name=call.name, is_error=is_error
        )
        self._step(StepKind.TOOL_RESULT, claim, entry, ttl=ttl)
        return entry

    def record_answer(
        self, claim: Claim, seq: int, content: str, usage: Usage, finish_reason: str | None = None
    ) -> Entry:
        """The final text and status `idle` (lease released), in one transaction."""
        entry = Entry(seq, "assistant", content, finish_reason=finish_reason)
        self._step(StepKind.ANSWER, claim, entry, usage=usage)
        return entry

    def finish(self, claim: Claim) -> None:
        """Mark the turn done when its final text is already committed."""
        self._write(Write.FINISH, claim)

    def fail(self, claim: Claim, error: str, usage: Usage | None = None) -> None:
        """Status `failed` with a readable error (lease released); a failed call's tokens count."""
        self._write(Write.FAIL, claim, error=error, **fence.usage_parameters(usage))

    def _write(self, write: Write, claim: Claim, ttl: float | None = None, **values: Any) -> None:
        parameters = fence.fence_parameters(
            claim.conversation_id, claim.epoch, now=self.clock(), ttl=ttl
        )
        if not self._driver.write(write, {**parameters, **values}):
            raise _lost(claim)

    def _step(
        self,
        kind: StepKind,
        claim: Claim,
        entry: Entry,
        *,
        ttl: float | None = None,
        usage: Usage | None = None,
    ) -> None:
        """The fenced UPDATE and the entry's INSERT, atomically: both happen, or neither."""
        parameters = fence.fence_parameters(
            claim.conversation_id, claim.epoch, now=self.clock(), ttl=ttl
        )
        parameters.update(fence.usage_parameters(usage))
        parameters.update(fence.message_parameters(entry))
        try:
            written = self._driver.step(kind, parameters)
        except StepConflict as exc:
            # The fence passed, so only a writer that bypassed it could have taken this seq.
            raise LeaseLost(
                f"conversation {claim.conversation_id}: seq {entry.seq} already written"
            ) from exc
        if not written:
            raise _lost(claim)


class _ClaimRow(NamedTuple):
    lease_epoch: int
    model: str
    instructions: str | None
    allowed_tools: list[str] | None
    tool_choice: str
    iterations: int
    attempts: int


def _entry(row: Row) -> Entry:
    """An Entry from a TRANSCRIPT row, whose tool_calls is JSON text."""
    seq, role, content, tool_calls, tool_call_id, tool_name, is_error, finish_reason = row
    calls: tuple[ToolCall, ...] = ()
    if tool_calls:  # one history message in four, or fewer: the rest skip the parsing
        calls = tuple(ToolCall.from_json(call) for call in json.loads(tool_calls) or ())
    return Entry(seq, role, content, calls, tool_call_id, tool_name, is_error, finish_reason)


def _lost(claim: Claim) -> LeaseLost:
    return LeaseLost(f"conversation {claim.conversation_id}: lease epoch {claim.epoch} lost")


__all__ = ["Claim", "LeaseLost", "Snapshot", "TurnStore"]
