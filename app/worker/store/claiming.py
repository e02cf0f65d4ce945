"""The claim: a turn's lease taken (the conversation running, nobody holding a live lease, and
with an owner limit, fewer of its owner's other conversations on one), and what the worker then
knows (`Snapshot`): the turn's settings and counters and its whole transcript, read after the
claim committed (or the transcript this process kept, continued). Its statements planned before
the first doorbell (`warm`).
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any, NamedTuple

from app.models import APPROVED, BUILTIN_TOOL_NAMES
from app.worker.context import Compacted
from app.worker.history import Histories
from app.worker.plan import Entry, ToolCall
from app.worker.store import tree
from app.worker.store.clock import Clock
from app.worker.store.driver import ClaimRows, Deferred, Driver, Row
from app.worker.store.liveness import LivenessToken
from app.worker.store.records import Claim, Snapshot
from app.worker.transcript import Transcript


class Claiming:
    """The claim's part of `TurnStore` (its clock, kept transcripts, liveness token and driver
    are the store's)."""

    clock: Clock
    histories: Histories | None
    liveness: LivenessToken | None
    _driver: Driver

    def warm(self, owner_limited: bool = False, connections: int = 1) -> None:
        """Plan the claim's statements on `connections` of the pool's connections before the
        first doorbell (`Driver.warm`): nothing is claimed, read or written."""
        now = self.clock()
        nobody = uuid.UUID(int=0)
        claim = {  # (the values of a real claim's types: psycopg prepares a statement per types)
            "claim_id": nobody,
            "claim_owner": "warm-up",
            "claim_token": self.liveness.token if self.liveness is not None else None,
            "now": now,
            "expires": now,
            "owner_limit": 1,
        }
        if not owner_limited:
            del claim["owner_limit"]
        reading = {"transcript_id": nobody, "transcript_after": 0}
        self._driver.warm(claim, reading, owner_limited, connections)

    def claim(
        self,
        conversation_id: uuid.UUID,
        owner: str,
        ttl: float,
        owner_limit: int | None = None,
    ) -> Snapshot | Deferred | None:
        """Take the lease if the conversation is running and nobody holds a live lease (and,
        with `owner_limit`, fewer than that many of its owner's other conversations do).

        Returns None when there is nothing to do or another worker owns it, `DEFERRED_CLAIM`
        when only the owner's limit stood in the way. The transcript is read after the claim
        committed, so every step an earlier owner committed is in it.
        """
        now = self.clock()
        parameters: dict[str, Any] = {
            "claim_id": conversation_id,
            "claim_owner": owner,
            "claim_token": self.liveness.token if self.liveness is not None else None,
            "now": now,
            "expires": now + timedelta(seconds=ttl),
        }
        kept = self.histories.take(conversation_id) if self.histories is not None else None
        after = kept[-1].seq if kept else 0
        reading = {"transcript_id": conversation_id, "transcript_after": after}
        claimed: ClaimRows | Deferred | None
        if owner_limit is None:
            claimed = self._driver.claim(parameters, reading)
        else:
            parameters["owner_limit"] = owner_limit
            claimed = self._driver.claim_limited(parameters, reading)
        if claimed is None or isinstance(claimed, Deferred):
            if kept is not None and self.histories is not None:
                self.histories.keep(conversation_id, kept)  # not claimed: still good
            return claimed
        found, rows = claimed
        row = _ClaimRow(*found)
        actions = _actions(row.turn_actions)
        compacted = Compacted(
            # (the next compaction's number is past every branch's)
            row.compacted_top or 0,
            row.compacted_elided_through or 0,
            row.compacted_summarized_through or 0,
            row.compacted_summary,
        )
        unkept = {*BUILTIN_TOOL_NAMES, *(str(tool["name"]) for tool in row.client_tools or ())}
        # The kept transcript still holds when its last message is still on the active path
        # (read again as the first row): then the rows after it continue it.
        on_path = bool(rows) and rows[0][0] == after
        if kept is not None and on_path and kept.same_setup(row.instructions, compacted, unkept):
            for entry in map(_entry, rows[1:]):
                kept.append(entry)
            transcript = kept
        else:
            if after:  # the kept one is stale (another branch, another setup): the whole path
                rows = self._driver.transcript({**reading, "transcript_after": 0})
            transcript = Transcript(
                row.instructions, map(_entry, rows), compacted=compacted, unkept=unkept
            )
        return Snapshot(
            claim=Claim(conversation_id, owner, row.lease_epoch, row.turn_id),
            status=row.status,
            first=bool(row.turn_first),
            model=row.turn_model or row.model,
            allowed_tools=tuple(row.allowed_tools or ()),
            tool_choice=row.tool_choice,
            forced_tool=row.forced_tool,
            iterations=row.iterations,
            attempts=row.attempts,
            transcript=transcript,
            event_seq=row.event_seq,
            cancel_requested=bool(row.cancel_requested),
            client_tools=tuple(row.client_tools or ()),
            clarify=bool(row.clarify),
            approval_tools=frozenset(row.approval_tools or ()),
            approved=_approved(actions),
            actions=tuple(actions),
            in_flight=row.in_flight,
            taken_over=bool(row.taken_over),
            trace_context=_json_object(row.trace_context),
            budgeted=bool(row.budgeted),
            context_policy=_json_object(row.context_policy),
            # the next seq nobody took, over every branch (the promoted message took one)
            free_seq=row.message_seq + (row.turn_input is not None),
            turn_number=row.turn_number,
            turn_count=row.turn_count,
            other_calls=frozenset((row.other_branch_calls or "").split(tree.CALL_ID_SEPARATOR))
            - {""},
            output_schema=_json_object(row.turn_output_schema) or _json_object(row.output_schema),
            primary_model=row.model,
            fallback_models=_models(row.fallback_models),
        )

    def keep_history(self, claim: Claim, transcript: Transcript) -> None:
        """The run of `claim` ended normally: its transcript (all of it committed) is kept for
        the conversation's next claim in this process."""
        if self.histories is not None:
            self.histories.keep(claim.conversation_id, transcript)


class _ClaimRow(NamedTuple):
    id: uuid.UUID
    event_seq: int
    status: str
    lease_epoch: int
    model: str
    instructions: str | None
    allowed_tools: list[str] | None
    tool_choice: str
    iterations: int
    attempts: int
    turn_id: uuid.UUID
    turn_first: bool
    turn_input: str | None
    message_seq: int
    cancel_requested: bool | None
    client_tools: list[dict[str, Any]] | None
    clarify: bool | None
    approval_tools: list[str] | None
    turn_actions: list[dict[str, Any]] | str | None
    in_flight: str | None
    taken_over: bool | None
    trace_context: dict[str, str] | str | None
    budgeted: bool | None
    context_policy: dict[str, Any] | str | None
    compacted_elided_through: int | None
    compacted_summarized_through: int | None
    compacted_summary: str | None
    compacted_top: int | None
    turn_parent: int | None
    cuts: bool | None
    cut_at: int | None
    leaf: int | None
    turn_number: int
    turn_count: int
    other_branch_calls: str | None
    turn_output_schema: dict[str, Any] | str | None
    output_schema: dict[str, Any] | str | None
    turn_model: str | None
    fallback_models: list[str] | str | None
    turn_files: Any
    forced_tool: str | None


def _entry(row: Row) -> Entry:
    """An Entry from a TRANSCRIPT row, whose tool_calls is JSON text."""
    seq, role, content, tool_calls, tool_call_id, tool_name, is_error, finish_reason = row[:8]
    refusal, files = row[8:10]
    calls: tuple[ToolCall, ...] = ()
    if tool_calls:  # one history message in four, or fewer: the rest skip the parsing
        calls = tuple(ToolCall.from_json(call) for call in json.loads(tool_calls) or ())
    return Entry(
        seq,
        role,
        content,
        calls,
        tool_call_id,
        tool_name,
        is_error,
        finish_reason,
        refusal,
        tuple(json.loads(files) or ()) if files else (),
    )


def _actions(actions: list[dict[str, Any]] | str | None) -> list[dict[str, Any]]:
    """The turn's actions (JSON text on some drivers)."""
    found: list[dict[str, Any]] = json.loads(actions) if isinstance(actions, str) else actions or []
    return found


def _json_object(value: dict[str, Any] | str | None) -> dict[str, Any] | None:
    """A JSON object column's value (JSON text on some drivers)."""
    found = json.loads(value) if isinstance(value, str) else value
    return found if isinstance(found, dict) and found else None


def _models(value: list[str] | str | None) -> tuple[str, ...] | None:
    """A JSON list of model strings (JSON text on some drivers); None when unset."""
    found = json.loads(value) if isinstance(value, str) else value
    return None if found is None else tuple(str(model) for model in found)


def _approved(actions: list[dict[str, Any]]) -> frozenset[str]:
    """The call ids the user approved."""
    return frozenset(
        str(action["call_id"]) for action in actions if action.get("decision") == APPROVED
    )


__all__ = ["Claiming"]
