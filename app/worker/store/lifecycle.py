"""A turn's life in the database: claim, heartbeat, record each step, finish or fail, release.

Every write after the claim is fenced by the lease epoch the claim granted: when the fence does not
match, another worker owns the conversation now, and `LeaseLost` is raised with nothing written.
Each call is one short transaction; none is held open across an LLM or tool call. Every write
also appends its events to the conversation's log and updates the turn it belongs to (`journal`),
in the same statement: the caller passes the status it last committed, so a step logs a
`status.changed` exactly when it changes the status, and gets the new status back.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, NamedTuple

from sqlalchemy import Engine

from app.budgets import store as budgets
from app.db import autocommit_reads
from app.errors import ChatWorkerError
from app.files import store as stored_files
from app.loop_connections import LoopConnections
from app.models import APPROVED, BUILTIN_TOOL_NAMES, TOOL_LOOP
from app.worker.context import Compacted
from app.worker.history import Histories
from app.worker.plan import Entry, ToolCall
from app.worker.ports import ToolMedia, Usage
from app.worker.store import fence, files, journal, outputs, tree
from app.worker.store.clock import Clock, utc_now
from app.worker.store.driver import (
    ClaimRows,
    Deferred,
    Op,
    Row,
    StepConflict,
    make_driver,
)
from app.worker.store.fence import StepKind, Write
from app.worker.store.liveness import LivenessToken
from app.worker.store.outputs import ListedOutput, OutputPage
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
    tool_choice: str
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


class TurnStore:
    """The worker's database port for running turns. Synchronous: the turn calls it from the
    database threads, and its steps' writes through `loop_bridge.run` on the event loop, where
    the statement is awaited (`steps_on_loop`, `CHATWORKER_DATABASE_IO`)."""

    def __init__(
        self,
        engine: Engine,
        clock: Clock = utc_now,
        histories: Histories | None = None,
        liveness: LivenessToken | None = None,
    ) -> None:
        self.engine = engine
        self.reads = autocommit_reads(engine)  # (reads that leave prepared statements be)
        self.clock = clock
        self.histories = histories  # the transcripts this process kept between turns
        self.liveness = liveness  # this process's token: every claim records it on the lease
        self._driver = make_driver(engine)

    @property
    def steps_on_loop(self) -> bool:
        """Whether a step's write, run by `loop_bridge.run`, awaits its statement on the event
        loop (PostgreSQL through psycopg) instead of blocking it (call it on a thread then)."""
        return self._driver.on_loop

    def close(self) -> None:
        """Close the connections the steps used on the event loop (the engine keeps its own)."""
        self._driver.close()

    @property
    def loop_connections(self) -> LoopConnections | None:
        """The connections the steps use on the event loop (None: the driver has none)."""
        return getattr(self._driver, "loop_connections", None)

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

    def heartbeat(self, claim: Claim, ttl: float) -> Committed:
        """Renew the lease; raise `LeaseLost` if it was taken over. The result says whether the
        user asked to cancel the turn meanwhile."""
        return self._run(Write.HEARTBEAT, claim, ttl=ttl)

    def release(self, claim: Claim) -> None:
        """Give the lease up (graceful shutdown) so another worker may claim at once."""
        self._run(Write.RELEASE, claim)

    def record_tool_calls(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        content: str | None,
        calls: Sequence[ToolCall],
        usage: Usage,
        ttl: float,
        finish_reason: str | None = None,
        reply_stream: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> Committed:
        """The assistant's tool calls and status `tool_loop`, in one transaction (`reply_stream`:
        how the reply was streamed, `messages.reply_stream`; `model`: the one that answered)."""
        entry = Entry(seq, "assistant", content, tuple(calls), finish_reason=finish_reason)
        return self._step(
            StepKind.TOOL_CALLS,
            claim,
            status,
            entry,
            parent,
            ttl=ttl,
            usage=usage,
            reply=reply_stream,
            model=model,
        )

    def record_tool_result(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        call: ToolCall,
        content: str,
        is_error: bool,
        ttl: float,
        kept: KeptOutput | None = None,
        files: Sequence[dict[str, Any]] = (),
    ) -> Committed:
        """One tool result, in its own transaction; with `kept`, the call's whole output goes
        to the session tool cache (`tool_outputs`) in the same statement; `files`: the images
        and blobs it returned, kept (`keep_files`)."""
        entry = Entry(
            seq,
            "tool",
            content,
            tool_call_id=call.id,
            tool_name=call.name,
            is_error=is_error,
            files=tuple(files),
        )
        if kept is None:
            return self._step(StepKind.TOOL_RESULT, claim, status, entry, parent, ttl=ttl)
        extra = journal.output_parameters(kept.arguments, kept.content)
        return self._step(StepKind.TOOL_OUTPUT, claim, status, entry, parent, ttl=ttl, extra=extra)

    def budget_used_up(self, conversation_id: uuid.UUID) -> str | None:
        """The error naming a used-up budget of the conversation or its owner, else None."""
        with self.reads.connect() as connection:
            return budgets.check(connection, conversation_id, self.clock())

    def cached_outputs(
        self, conversation_id: uuid.UUID, *, tool: str | None = None, limit: int = 50
    ) -> tuple[list[ListedOutput], int]:
        """The conversation's kept tool outputs (the latest `limit`), and how many it has."""
        return outputs.list_outputs(self.reads, conversation_id, tool=tool, limit=limit)

    def cached_output(
        self, conversation_id: uuid.UUID, call_id: str, *, offset: int, limit: int
    ) -> OutputPage | None:
        """A page of the output kept for `call_id`, or None when there is none."""
        return outputs.read_output(self.reads, conversation_id, call_id, offset=offset, limit=limit)

    def keep_files(
        self, conversation_id: uuid.UUID, media: Sequence[ToolMedia]
    ) -> list[dict[str, Any]]:
        """A tool's images and blobs kept whole as the conversation's files (for its owner, by
        content hash: a repeated one is one row), before the result that names them commits;
        what its message keeps of them. (Written first, on its own: a crash before the
        result leaves files the conversation uses, gone with it.)"""
        checked = [files.checked(item.data, item.media_type, item.name) for item in media]
        with self.engine.begin() as connection:
            _, owner = stored_files.conversation_setup(connection, conversation_id)
            return stored_files.keep(connection, owner, conversation_id, checked)

    def read_files(self, conversation: uuid.UUID, ids: Collection[uuid.UUID]) -> dict[Any, bytes]:
        """The bytes of the files a request sends: the conversation's owner's, that it uses."""
        return files.read_files(self.reads, conversation, ids)

    def record_answer(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        content: str,
        usage: Usage,
        finish_reason: str | None = None,
        reply_stream: dict[str, Any] | None = None,
        model: str | None = None,
        output: Any = None,
    ) -> Committed:
        """The final text; the turn completes and the conversation rests (`idle`) or moves on
        to the next waiting turn (`processing`), lease released, in one transaction (`output`:
        a structured answer's parsed object)."""
        entry = Entry(seq, "assistant", content, finish_reason=finish_reason)
        return self._step(
            StepKind.ANSWER,
            claim,
            status,
            entry,
            parent,
            usage=usage,
            reply=reply_stream,
            model=model,
            output=output,
        )

    def record_refused(
        self,
        claim: Claim,
        *,
        status: str,
        seq: int,
        parent: int | None,
        content: str,
        error: str,
        usage: Usage,
        ttl: float,
        finish_reason: str | None = None,
        reply_stream: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> Committed:
        """A structured answer that does not match its schema, kept with `is_error` (the
        planner asks the model to repair it once, or fails the turn), one call counted."""
        entry = Entry(
            seq, "assistant", content, is_error=True, finish_reason=finish_reason, refusal=error
        )
        return self._step(
            StepKind.REFUSED,
            claim,
            status,
            entry,
            parent,
            ttl=ttl,
            usage=usage,
            reply=reply_stream,
            model=model,
        )

    def fall_back(
        self,
        claim: Claim,
        *,
        from_model: str,
        to_model: str,
        error: str,
        ttl: float,
        usage: Usage | None = None,
    ) -> Committed:
        """The turn moves to `to_model` (`turns.model`, with `model.fallback` naming both and
        the error): one fenced statement, a step, so a resumed turn goes on with it."""
        data = {"from": from_model, "to": to_model, "error": error}
        values = {"fallback_model": to_model, "fallback_data": data}
        return self._run(
            Write.FALLBACK, claim, ttl=ttl, **values, **journal.usage_parameters(usage)
        )

    def finish(self, claim: Claim, *, status: str) -> Committed:
        """Complete the turn when its final text is already committed (no call counted)."""
        return self._run(Write.FINISH, claim, old_status=status, **journal.usage_parameters(None))

    def starting(self, claim: Claim, call_id: str, ttl: float) -> Committed:
        """Mark `call_id` as running (and renew the lease) before a call that may not simply
        run again: a later claim that finds it without a result knows it was in flight."""
        return self._run(Write.STARTING, claim, ttl=ttl, in_flight=call_id)

    def pause(self, claim: Claim, *, status: str, actions: Sequence[dict[str, Any]]) -> Committed:
        """The turn requires action (`actions`: what it waits for): the conversation rests
        (`idle`) with the turn still current, lease released, in one transaction."""
        return self._run(Write.PAUSE, claim, old_status=status, actions=list(actions))

    def compact(self, claim: Claim, record: CompactionRecord, *, ttl: float) -> Committed:
        """A compaction of what the model is sent (`record`), with its `context.compacted`
        event and a summary's usage, in one fenced statement: a step, so it renews the lease."""
        return self._run(Write.COMPACT, claim, ttl=ttl, **record.parameters())

    def next_steer(self, conversation_id: uuid.UUID) -> Steering | None:
        """The turn right behind the current one when it is a steer message still waiting (its
        id and text), else None (plan row 26)."""
        with self.reads.connect() as connection:
            found = connection.execute(
                fence.NEXT_STEER, {"steer_conversation": conversation_id}
            ).one_or_none()
        if found is None:
            return None
        files = tuple(json.loads(found.files) or ()) if found.files else ()
        return Steering(found.id, str(found.input or ""), files)

    def steer(
        self,
        claim: Claim,
        steering: Steering,
        *,
        status: str,
        seq: int,
        parent: int | None,
        ttl: float,
    ) -> Committed:
        """Take the steer message in (plan row 26): the running turn ends `completed`, the
        message goes on the path, and the steer turn runs on under this lease, in one fenced
        statement. `claim` names the steer turn (the returned cancel flag is its)."""
        entry = Entry(seq, "user", steering.text, files=steering.files)
        steered = Claim(claim.conversation_id, claim.owner, claim.epoch, steering.turn_id)
        values = {
            "old_status": status,
            "ended_id": claim.turn_id,
            "steered_data": {"steered_into": str(steering.turn_id)},
            **journal.message_parameters(entry, parent),
        }
        committed = self._run(Write.STEER, steered, ttl=ttl, **values)
        return replace(committed, entry=entry)

    def cancel(self, claim: Claim, *, status: str) -> Committed:
        """End the turn `cancelled` once every call has an answer: the conversation rests
        (`idle`) or moves on to the next waiting turn (`processing`), lease released."""
        return self._run(Write.CANCEL, claim, old_status=status, **journal.usage_parameters(None))

    def fail(
        self, claim: Claim, error: str, *, status: str, usage: Usage | None = None
    ) -> Committed:
        """The turn fails with a readable error (lease released); a failed call's tokens count.
        The conversation is `failed`, or `processing` when another turn waits."""
        return self._run(
            Write.FAIL, claim, old_status=status, error=error, **journal.usage_parameters(usage)
        )

    def _run(self, op: Op, claim: Claim, ttl: float | None = None, **values: Any) -> Committed:
        parameters = fence.fence_parameters(
            claim.conversation_id, claim.epoch, now=self.clock(), ttl=ttl
        )
        found = self._driver.run(op, {**parameters, "turn_id": claim.turn_id, **values})
        if found is None:
            raise _lost(claim)
        return Committed(
            found[_STATUS], None, found[_EVENT_SEQ], bool(found[_CANCEL]), found[_TURN_COUNT]
        )

    def _step(
        self,
        kind: StepKind,
        claim: Claim,
        status: str,
        entry: Entry,
        parent: int | None,
        *,
        ttl: float | None = None,
        usage: Usage | None = None,
        extra: dict[str, Any] | None = None,
        reply: dict[str, Any] | None = None,
        model: str | None = None,
        output: Any = None,
    ) -> Committed:
        """The fenced UPDATE, the entry's INSERT (below `parent`, the path's leaf) and their
        events, atomically: all, or nothing."""
        if status != TOOL_LOOP and kind in fence.ENTERING:
            kind = fence.ENTERING[kind]
        values = {
            "old_status": status,
            **journal.usage_parameters(usage),
            **journal.message_parameters(entry, parent, reply, usage, model=model, output=output),
            **(extra or {}),
        }
        try:
            committed = self._run(kind, claim, ttl=ttl, **values)
        except StepConflict as exc:
            # The fence passed, so only a writer that bypassed it could have taken this seq.
            raise LeaseLost(
                f"conversation {claim.conversation_id}: seq {entry.seq} already written"
            ) from exc
        return replace(committed, entry=entry)


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


# Positions in every head's row: fence.SOURCE, then fence.CANCEL_ASKED and the turn count.
_EVENT_SEQ, _STATUS, _CANCEL, _TURN_COUNT = 1, 2, 4, 5


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


def _lost(claim: Claim) -> LeaseLost:
    return LeaseLost(f"conversation {claim.conversation_id}: lease epoch {claim.epoch} lost")


__all__ = [
    "Claim",
    "Committed",
    "CompactionRecord",
    "KeptOutput",
    "LeaseLost",
    "Snapshot",
    "Steering",
    "TurnStore",
]
