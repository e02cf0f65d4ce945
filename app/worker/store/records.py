"""What a turn's store hands the loop and takes from it: the proof of a claim (`Claim`), what a
claim found (`Snapshot`), what a write left (`Committed`), a compaction, a waiting steer message
and a tool's whole output to commit, and `LeaseLost`, raised when the fence no longer matches.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, NamedTuple

from app.errors import ChatWorkerError
from app.worker.context import Compacted
from app.worker.plan import Entry
from app.worker.ports import Usage
from app.worker.store import journal
from app.worker.transcript import Transcript


class LeaseLost(ChatWorkerError):
    """Another worker claimed the conversation: this one must stop without writing."""


@dataclass(frozen=True)
class Claim:
    """Proof of ownership: every fenced write names the epoch it was granted."""

    conversation_id: uuid.UUID
    owner: str
    epoch: int
    turn_id: uuid.UUID  # the turn this lease runs


@dataclass(frozen=True)
class Snapshot:
    """What a worker knows after a claim: the turn's settings and counters, and the whole
    transcript (built here, on the database thread, for the turn that owns it from now on)."""

    claim: Claim
    status: str  # the conversation's, as the claim found it
    first: bool  # the turn's first claim (turn.started), not a resumed one (turn.resumed)
    model: str
    allowed_tools: tuple[str, ...]
    tool_choice: str  # auto | none | required
    iterations: int
    attempts: int
    transcript: Transcript
    event_seq: int = 0  # the conversation's last event, the claim's own included
    cancel_requested: bool = False  # the user asked to cancel this turn
    client_tools: tuple[dict[str, Any], ...] = ()  # tools the web app's client executes
    clarify: bool = True  # the model may ask the user (`agent_clarify`)
    approval_tools: frozenset[str] = frozenset()  # every call approved first (the caller's)
    approved: frozenset[str] = frozenset()  # call ids the user approved (the turn's actions)
    actions: tuple[dict[str, Any], ...] = ()  # what the turn waited for so far (answered)
    in_flight: str | None = None  # a call started by an earlier owner that may not run twice
    taken_over: bool = False  # the lease was taken from a worker that stopped without releasing
    trace_context: dict[str, str] | None = None  # the submit's span, when the turn is traced
    budgeted: bool = False  # a budget applies: check it before each model call
    context_policy: dict[str, Any] | None = None  # the conversation's own context rules
    free_seq: int = 1  # the next message's seq: past every branch's, not only the path's
    turn_number: int = 0  # the claimed turn's number
    turn_count: int = 0  # the conversation's submitted turns (past turn_number: one waits)
    other_calls: frozenset[str] = frozenset()  # call ids other branches' results hold
    # What the turn's answer must match ({"name", "schema", "strict"}): the message's own
    # schema, else the conversation's; None: any text.
    output_schema: dict[str, Any] | None = None
    primary_model: str = ""  # the conversation's model (`model` is a fallback's once moved)
    fallback_models: tuple[str, ...] | None = None  # the conversation's (None: the settings')
    forced_tool: str | None = None  # the one tool `required` names (`offer.tool_choice`)


class CompactionRecord(NamedTuple):
    """A compaction to commit: its kind and reason, the range it compacts, the whole state it
    leaves (`compacted`), the estimates around it and a summary's model call."""

    kind: str
    reason: str
    from_seq: int
    through_seq: int
    compacted: Compacted
    tokens_before: int
    tokens_after: int
    window: int | None
    model: str | None = None
    usage: Usage | None = None

    def parameters(self) -> dict[str, Any]:
        state = self.compacted
        return {
            "k_number": state.number,
            "k_kind": self.kind,
            "k_reason": self.reason,
            "k_from_seq": self.from_seq,
            "k_through_seq": self.through_seq,
            "k_elided_through": state.elided_through,
            "k_summarized_through": state.summarized_through,
            "k_summary": state.summary,
            "k_tokens_before": self.tokens_before,
            "k_tokens_after": self.tokens_after,
            "k_window": self.window,
            "k_model": self.model,
            "k_data": {
                "number": state.number,
                "kind": self.kind,
                "reason": self.reason,
                "from_seq": self.from_seq,
                "through_seq": self.through_seq,
                "tokens_before": self.tokens_before,
                "tokens_after": self.tokens_after,
            },
            **journal.usage_parameters(self.usage),
        }


class Steering(NamedTuple):
    """A steer message waiting right behind the running turn: its turn and its text."""

    turn_id: uuid.UUID
    text: str
    files: tuple[dict[str, Any], ...] = ()


class KeptOutput(NamedTuple):
    """An MCP call's whole output and the arguments it ran with, for the session tool cache."""

    arguments: dict[str, Any]
    content: str


@dataclass(frozen=True)
class Committed:
    """What a write left: the conversation's status, the transcript entry it added, the seq of
    the conversation's last event (its own included), whether a cancel is requested, and how
    many turns were submitted (a new one may be a steer message to take in)."""

    status: str
    entry: Entry | None = None
    event_seq: int = 0
    cancel_requested: bool = False
    turn_count: int = 0  # the conversation's submitted turns: more than it ran, one waits


def lost(claim: Claim) -> LeaseLost:
    return LeaseLost(f"conversation {claim.conversation_id}: lease epoch {claim.epoch} lost")


__all__ = [
    "Claim",
    "Committed",
    "CompactionRecord",
    "KeptOutput",
    "LeaseLost",
    "Snapshot",
    "Steering",
    "lost",
]
