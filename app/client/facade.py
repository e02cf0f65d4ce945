"""What a web app calls: create a conversation, submit a message as a turn, follow its events
(committed and live), cancel a turn, poll it, retry a failed turn.

`ChatClient` is synchronous (Django, Flask); `AsyncChatClient` is the same for asyncio (FastAPI,
Starlette) and runs each call in a thread. Each call checks its input (`checks`), runs its SQL
(`commands`, `reads`) in one transaction, and rings the queue (`doorbell`). A bad request raises an
`InvalidRequest` subclass and writes nothing.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from app.client import attachments, branching, filing, intake, quota
from app.client.admin import AdminClient
from app.client.admission import REJECT
from app.client.checks import (
    check_approval_tools,
    check_busy_policy,
    check_context,
    check_context_policy,
    check_decisions,
    check_fallback_models,
    check_idempotency_key,
    check_metadata,
    check_model,
    check_outputs,
    check_seq,
    check_text,
    check_tool_choice,
    check_tool_names,
    check_tools_offered,
    parse_conversation_id,
    parse_file_id,
    parse_turn_id,
)
from app.client.doorbell import QUEUED_BEHIND, Enqueue, QueueRinger, default_enqueue, ring
from app.client.following import Offload
from app.client.keys import check_owner_name
from app.client.reader import ChatReader
from app.client.schemas import check_client_tools, check_output_schema
from app.client.store import conversations, reads
from app.client.store import files as stored_files
from app.client.store.answers import answer_actions
from app.client.store.cancel import CancelOutcome, cancel_turn
from app.client.store.conversations import NewTurn
from app.client.store.loop_store import LoopStore
from app.client.store.outage import unavailable_as_ours
from app.client.views import (
    ConversationView,
    Decision,
    StoredFile,
    Submitted,
    TurnView,
)
from app.config import Settings, get_settings
from app.db import autocommit_reads, make_engine
from app.errors import InvalidRequest
from app.live import CommitNotice, LiveChannel
from app.telemetry import tracing

log = logging.getLogger(__name__)


class ChatClient(ChatReader):
    """The synchronous web-app API over the database and the queue.

    `enqueue` rings a worker for a conversation id. By default: the process's queue (`app.queue`)
    when the settings have a `REDIS_URL`, and nothing at all without one (the turn then waits for
    a worker's recovery sweep; `Submitted.detail` says so).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        engine: Engine | None = None,
        enqueue: Enqueue | None = None,
        live: LiveChannel | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self.engine = unavailable_as_ours(engine or make_engine(self.settings.database_url))
        self.reads = autocommit_reads(self.engine)  # (reads that leave prepared statements be)
        self.loop_store = LoopStore.for_engine(self.engine)
        self._enqueue = enqueue if enqueue is not None else default_enqueue(self.settings)
        self._live = live
        self._live_warned = False
        self._admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        """The operator's calls (API keys, budgets, webhooks, the tool catalogue, readiness) over
        this client's engine and live channel."""
        if self._admin is None:
            self._admin = AdminClient(self.settings, engine=self.engine, live=lambda: self.live)
        return self._admin

    def create_conversation(
        self,
        *,
        model: str | None = None,
        instructions: str | None = None,
        tools: Sequence[str] = (),
        tool_choice: str = "auto",
        context: dict[str, Any] | None = None,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        client_tools: Sequence[dict[str, Any]] | None = None,
        clarify: bool = True,
        approval_tools: Sequence[str] | None = None,
        context_policy: dict[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        fallback_models: Sequence[str] | None = None,
    ) -> uuid.UUID:
        """A new idle conversation; `tools` are names from `list_tools()`.

        `owner`: who may see it through the HTTP API (None: no one in particular). A caller may
        choose its id: a second create with the same id and the same fields returns it again
        (see `create_or_get`), with other fields it is `ConversationConflict`.

        `client_tools`: tools the web app's client executes ({"name", "description",
        "parameters": a JSON Schema}); a call of one pauses the turn (`requires_action`) until
        the client posts its output (`answer_actions`). `clarify`: the model may ask the
        user a question (`agent_clarify`) when it has tools; the next message answers it.
        `approval_tools`: tools (of `tools`) whose every call the user approves first, beyond
        what each MCP server's own policy asks (a caller can ask for more, never less).
        `context_policy`: this conversation's own rules for what the model is sent as it grows
        (`window`, `threshold`, `reply_tokens`, `compaction`, `summary_model`, `prompt_cache`),
        over the settings'. `output_schema`: every final answer must match this JSON Schema
        (`{"name", "schema", "strict"}`; checked before the turn completes, one repair asked
        for); a message may ask for its own. `fallback_models`: the models a call moves to, in
        order, when the one in use is down or its transient errors spent their retries (None:
        the settings' `CHATWORKER_FALLBACK_MODELS`)."""
        return self.create_or_get(
            model=model,
            instructions=instructions,
            tools=tools,
            tool_choice=tool_choice,
            context=context,
            owner=owner,
            conversation_id=conversation_id,
            client_tools=client_tools,
            clarify=clarify,
            approval_tools=approval_tools,
            context_policy=context_policy,
            output_schema=output_schema,
            fallback_models=fallback_models,
        )[0].id

    def create_or_get(
        self,
        *,
        model: str | None = None,
        instructions: str | None = None,
        tools: Sequence[str] = (),
        tool_choice: str = "auto",
        context: dict[str, Any] | None = None,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        client_tools: Sequence[dict[str, Any]] | None = None,
        clarify: bool = True,
        approval_tools: Sequence[str] | None = None,
        context_policy: dict[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        fallback_models: Sequence[str] | None = None,
    ) -> tuple[ConversationView, bool]:
        """`create_conversation`, as read in its transaction (without messages), and whether it
        was created (False: it existed, same fields)."""
        model = check_model(self.settings.model if model is None else model)
        check_tool_choice(tool_choice)
        names = check_tool_names(tools, tool_choice)
        declared = check_client_tools(client_tools, names)
        approval = check_approval_tools(approval_tools, names)
        if not isinstance(clarify, bool):
            raise InvalidRequest(f"clarify must be true or false, not {clarify!r}")
        if instructions is not None:
            check_text(instructions, "instructions", self._limit, allow_empty=True)
        check_context(context)
        policy = check_context_policy(context_policy)
        schema = check_output_schema(output_schema)
        fallbacks = check_fallback_models(fallback_models, model)
        if owner is not None:
            check_owner_name(owner)
        chosen = uuid.uuid4() if conversation_id is None else parse_conversation_id(conversation_id)
        setup: dict[str, Any] = {
            "owner": owner,
            "model": model,
            "instructions": instructions,
            "tools": names,
            "tool_choice": tool_choice,
            "context": context,
            "client_tools": declared,
            "clarify": clarify,
            "approval_tools": approval,
            "context_policy": policy,
            "output_schema": schema,
            "fallback_models": fallbacks,
        }
        try:
            return self._insert(chosen, setup)
        except IntegrityError:
            if conversation_id is None:
                raise
            # Two creates of one chosen id at once: the other one won; compare with it.
            return self._insert(chosen, setup)

    def _insert(
        self, conversation_id: uuid.UUID, setup: dict[str, Any]
    ) -> tuple[ConversationView, bool]:
        with self.engine.begin() as connection:
            if setup["tools"]:
                check_tools_offered(setup["tools"], reads.catalogue_names(connection))
            created = conversations.insert_conversation(connection, conversation_id, **setup)
            return reads.read_conversation(
                connection, conversation_id, None, messages=False
            ), created

    def delete_conversation(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> None:
        """Delete the conversation with its turns, messages and events; `ConversationBusy` while
        a turn runs or waits (cancel first), `ConversationNotFound`."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.engine.begin() as connection:
            reads.check_owner(connection, conversation_id, owner)
            conversations.delete_conversation(connection, conversation_id)

    def submit_message(
        self,
        conversation_id: uuid.UUID | str,
        text: str,
        *,
        idempotency_key: str | None = None,
        on_busy: str = REJECT,
        owner: str | None = None,
        metadata: Mapping[str, str] | None = None,
        after_seq: int | None = None,
        output_schema: Mapping[str, Any] | None = None,
        files: Sequence[Mapping[str, Any] | bytes] | None = None,
    ) -> Submitted:
        """Store the user's message as a new turn and start it (`metadata`: the caller's own
        key-value pairs, kept with the turn: at most 16, keys up to 64 characters, values up
        to 512, as OpenAI's).

        While a turn runs, `on_busy` decides: `reject` (`ConversationBusy`, naming the running
        turn), `enqueue` (the turn waits, its message outside the transcript, and starts when
        the running one ends), `interrupt` (the running turn is cancelled, and any other
        waiting turn; this one starts as soon as it has ended), `rollback` (as `interrupt`, and
        the cancelled turn's messages leave the active path: this message takes its place) or
        `steer` (the running turn takes the message in at its next model call and this turn
        carries the run on; if the running turn ends first, this one runs next; refused
        while the turn waits for its client's outputs or an approval). The same
        `idempotency_key` with the same text returns the first submit's turn (`repeated`) and
        writes nothing; with another text, `IdempotencyKeyReused`.

        `after_seq` puts the message right after that message instead of the path's last (a new
        branch there: OpenAI's `previous_response_id` naming an earlier response); the path up
        to it must answer every call it makes (`NotBranchable`).

        `output_schema`: this message's answer must match that JSON Schema (over the
        conversation's own; `create_conversation` says how it is checked).

        `files`: what the message carries beside its text, each `{"name", "media_type", "data":
        bytes, base64 or a data: URL}` (or bytes): images, PDFs, text files, their media type
        read from their bytes (`InvalidFile` when a claim belies them), within the size caps
        (`FileTooLarge`), of a kind the conversation's model takes (`FileNotTaken`, naming
        both); stored once per owner by content hash, gone with the last conversation using
        them (`get_file` reads one back).
        """
        conversation_id = parse_conversation_id(conversation_id)
        check_text(text, "message", self._limit, allow_empty=bool(files))
        key = check_idempotency_key(idempotency_key)
        policy = check_busy_policy(on_busy)
        tags = check_metadata(metadata)
        after = None if after_seq is None else check_seq(after_seq)
        schema = check_output_schema(output_schema)
        checked = attachments.check_files(files, filing.limits(self.settings))
        with (
            tracing.submit_span("chat submit") as span,
            self.engine.begin() as connection,
        ):
            reads.check_owner(connection, conversation_id, owner)
            kept = filing.keep(connection, conversation_id, checked, self.settings)
            if after is None:
                turn = intake.submit(
                    connection,
                    conversation_id,
                    text,
                    idempotency_key=key,
                    on_busy=policy,
                    owner_limit=self._owner_limit,
                    metadata=tags,
                    output_schema=schema,
                    files=kept,
                )
            else:
                submit = branching.Submit(key, policy, self._owner_limit, tags, schema, kept)
                turn = branching.reply_after(connection, conversation_id, after, text, submit)
            view = reads.read_turn(connection, turn.id)
            _describe(span, conversation_id, turn.id)
        return self._submitted(conversation_id, turn, view)

    async def asubmit_message(
        self,
        conversation_id: uuid.UUID | str,
        text: str,
        *,
        idempotency_key: str | None = None,
        on_busy: str = REJECT,
        owner: str | None = None,
        metadata: Mapping[str, str] | None = None,
        after_seq: int | None = None,
        output_schema: Mapping[str, Any] | None = None,
        files: Sequence[Mapping[str, Any] | bytes] | None = None,
        offload: Offload[Submitted],
    ) -> Submitted:
        """`submit_message` on an event loop. The common submit (a message to a resting
        conversation, or a repeated key; `quick_submit` says which) is awaited there in two
        statements; every other submit, a database without an async driver, and the followers'
        notice and the worker's doorbell after the commit (Redis, which may block) run in
        `offload`, as `submit_message` does."""
        general = functools.partial(
            self.submit_message,
            conversation_id,
            text,
            idempotency_key=idempotency_key,
            on_busy=on_busy,
            owner=owner,
            metadata=metadata,
            after_seq=after_seq,
            output_schema=output_schema,
            files=files,
        )
        if (
            self.loop_store is None
            or files
            or after_seq is not None
            or self._owner_limit is not None
        ):
            return await offload(general)
        conversation_id = parse_conversation_id(conversation_id)
        check_text(text, "message", self._limit)
        key = check_idempotency_key(idempotency_key)
        policy = check_busy_policy(on_busy)
        tags = check_metadata(metadata)
        schema = check_output_schema(output_schema)
        with tracing.submit_span("chat submit") as span:
            quick = await self.loop_store.submit(
                conversation_id,
                text,
                key,
                policy,
                owner=owner,
                metadata=tags,
                output_schema=schema,
                trace_context=tracing.carrier(),
            )
            if quick is not None:
                _describe(span, conversation_id, quick[0].id)
        if quick is None:
            return await offload(general)
        turn, view = quick
        return await offload(functools.partial(self._submitted, conversation_id, turn, view))

    def edit_message(
        self,
        conversation_id: uuid.UUID | str,
        seq: int,
        text: str,
        *,
        idempotency_key: str | None = None,
        on_busy: str = REJECT,
        owner: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Submitted:
        """Edit the user message `seq` of any branch: its new version (a sibling) with `text`,
        after the messages before it on its own path, ends the active path; a turn runs on it.
        The old version and what followed stay, inactive (`switch_branch`). Admitted like a
        message (`on_busy`, `idempotency_key`; `steer` is refused: a new branch cannot join the
        running turn). `MessageNotFound`; `NotBranchable` for a message not the user's."""
        conversation_id = parse_conversation_id(conversation_id)
        check_text(text, "message", self._limit)
        seq = check_seq(seq)
        submit = self._branch_submit(idempotency_key, on_busy, metadata)
        with tracing.submit_span("chat edit") as span, self.engine.begin() as connection:
            reads.check_owner(connection, conversation_id, owner)
            turn = branching.edit(connection, conversation_id, seq, text, submit)
            view = reads.read_turn(connection, turn.id)
            _describe(span, conversation_id, turn.id)
        return self._submitted(conversation_id, turn, view)

    def regenerate(
        self,
        conversation_id: uuid.UUID | str,
        seq: int | None = None,
        *,
        idempotency_key: str | None = None,
        on_busy: str = REJECT,
        owner: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Submitted:
        """A new answer to the user message at or above `seq` on its own path, any branch
        (None: the last one's): a turn runs from it again and its answer becomes a new version
        (a sibling) of the old one, which stays, inactive. Admitted like a message (`steer` is
        refused). `MessageNotFound`; `NotBranchable` when no user message precedes it."""
        conversation_id = parse_conversation_id(conversation_id)
        at = None if seq is None else check_seq(seq)
        submit = self._branch_submit(idempotency_key, on_busy, metadata)
        with tracing.submit_span("chat regenerate") as span, self.engine.begin() as connection:
            reads.check_owner(connection, conversation_id, owner)
            turn = branching.regenerate(connection, conversation_id, at, submit)
            view = reads.read_turn(connection, turn.id)
            _describe(span, conversation_id, turn.id)
        return self._submitted(conversation_id, turn, view)

    def switch_branch(
        self, conversation_id: uuid.UUID | str, seq: int, *, owner: str | None = None
    ) -> ConversationView:
        """Make the version holding message `seq` the active path: its newest message becomes
        the leaf (the version's latest state); no turn runs. The conversation must rest with no turn
        waiting (`ConversationBusy`). Followers hear `branch.switched`. The conversation, with
        its new path."""
        conversation_id = parse_conversation_id(conversation_id)
        seq = check_seq(seq)
        with self.engine.begin() as connection:
            reads.check_owner(connection, conversation_id, owner)
            branching.switch(connection, conversation_id, seq)
            view = reads.read_conversation(connection, conversation_id, None)
        self._notify(conversation_id)
        return view

    def fork_conversation(
        self,
        conversation_id: uuid.UUID | str,
        seq: int | None = None,
        *,
        new_id: uuid.UUID | str | None = None,
        owner: str | None = None,
    ) -> ConversationView:
        """A new conversation of the same owner and setup holding a copy of the path up to
        message `seq` (None: all of the active path) as its own, idle: it goes its own way from
        there. `NotBranchable` at a message whose path leaves a tool call unanswered."""
        conversation_id = parse_conversation_id(conversation_id)
        fork_id = uuid.uuid4() if new_id is None else parse_conversation_id(new_id)
        at = None if seq is None else check_seq(seq)
        with self.engine.begin() as connection:
            reads.check_owner(connection, conversation_id, owner)
            stored = quota.stored_before_fork(connection, conversation_id)
            branching.fork(connection, conversation_id, at, fork_id)
            quota.check_fork(connection, stored, fork_id, self.settings.owner_storage_bytes)
            return reads.read_conversation(connection, fork_id, None)

    def retry_conversation(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> Submitted:
        """A new turn that continues a failed one from its transcript (pending calls first)."""
        conversation_id = parse_conversation_id(conversation_id)
        with tracing.submit_span("chat retry") as span, self.engine.begin() as connection:
            reads.check_owner(connection, conversation_id, owner)
            turn = intake.retry(connection, conversation_id, owner_limit=self._owner_limit)
            view = reads.read_turn(connection, turn.id)
            _describe(span, conversation_id, turn.id)
        self._notify(conversation_id)
        return self._ring(conversation_id, turn, view)

    def answer_actions(
        self,
        turn_id: uuid.UUID | str,
        outputs: Mapping[str, str] | None = None,
        *,
        approvals: Mapping[str, bool | Decision] | None = None,
        owner: str | None = None,
    ) -> TurnView:
        """Answer what a turn waits for (`requires_action`), by call id: a client tool's output
        or the user's answer to the model's question (`outputs`), a call's approval (`approvals`:
        True runs it, False or `Decision(False, reason)` tells the model it was denied). When
        none is left waiting, the turn goes on (a worker is rung). An answer given before is
        skipped (a retry is harmless); `ActionNotFound` for a call the turn never waited on,
        `ActionAlreadyAnswered` for one answered otherwise (or cancelled); a refused answer
        refuses the whole request. The turn as it is after the answers."""
        turn_id = parse_turn_id(turn_id)
        checked = check_outputs(outputs or {}, self._limit, allow_empty=bool(approvals))
        decisions = check_decisions(approvals or {}, self._limit, allow_empty=bool(checked))
        with self.engine.begin() as connection:
            conversation_id = reads.conversation_of_turn(connection, turn_id, owner)
            answered = answer_actions(
                connection,
                conversation_id,
                turn_id,
                checked,
                decisions=decisions,
                now=datetime.now(UTC),
            )
            turn = reads.read_turn(connection, turn_id)
        if answered.written:
            self._notify(conversation_id)
        if answered.resumes and self._enqueue is not None:
            ring(self._enqueue, Submitted(conversation_id, None, enqueued=False))
        return turn

    def cancel(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> TurnView | None:
        """Stop the conversation's current turn; the turn as it is after the request (None when
        the conversation never had one).

        With a worker on it, the request is committed and the worker is told at once: the turn
        is returned `running` with `cancel_requested_at` set, and ends `cancelled` within
        moments (follow the events for `turn.cancelled`). Queued, or left by a dead worker, it
        is `cancelled` here. A finished turn comes back unchanged; asking twice is harmless."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.engine.connect() as connection:
            reads.check_owner(connection, conversation_id, owner)
        return self._cancel(conversation_id, None)

    def cancel_turn(self, turn_id: uuid.UUID | str, *, owner: str | None = None) -> TurnView:
        """`cancel` for one turn by id: the running one, or one waiting behind it (its request
        is honoured when its time comes, before any model call); `TurnNotFound`."""
        turn_id = parse_turn_id(turn_id)
        with self.engine.connect() as connection:
            conversation_id = reads.conversation_of_turn(connection, turn_id, owner)
        cancelled = self._cancel(conversation_id, turn_id)
        assert cancelled is not None
        return cancelled

    def close(self) -> None:
        if isinstance(self._enqueue, QueueRinger):
            self._enqueue.close()
        if self._live is not None:
            self._live.close()
        self.engine.dispose()

    @property
    def _limit(self) -> int:
        return self.settings.max_message_chars

    def _cancel(self, conversation_id: uuid.UUID, turn_id: uuid.UUID | None) -> TurnView | None:
        with self.engine.begin() as connection:
            outcome: CancelOutcome = cancel_turn(
                connection, conversation_id, turn_id, now=datetime.now(UTC)
            )
            if outcome.turn_id is None:
                return None
            # As the command left it: the worker told next may end it a moment later.
            turn = reads.read_turn(connection, outcome.turn_id)
        self._notify(conversation_id)
        if outcome.announce:
            self._announce_cancel(conversation_id)
        if outcome.ring and self._enqueue is not None:
            ring(self._enqueue, Submitted(conversation_id, None, enqueued=False))
        return turn

    def _notify(self, conversation_id: uuid.UUID) -> None:
        """Wake the conversation's followers: its log has grown (best effort: they also poll)."""
        self._best_effort(lambda: self.live.publish([(conversation_id, CommitNotice(0))]))

    def _announce_cancel(self, conversation_id: uuid.UUID) -> None:
        """Tell the worker holding the turn now; if it never hears, its next step or heartbeat
        reads the committed request."""
        self._best_effort(lambda: self.live.announce_cancel(conversation_id))

    def _best_effort(self, send: Any) -> None:
        try:
            send()
        except Exception as exc:  # the live channel is a shortcut, never the source of truth
            if not self._live_warned:
                log.warning("live channel unavailable (%s); readers fall back to polling", exc)
            self._live_warned = True

    @property
    def _owner_limit(self) -> int | None:
        """The owner limit a submit or a retry refuses past (policy `reject`), else None."""
        if self.settings.owner_limit_policy != "reject":
            return None
        return self.settings.owner_max_running_turns

    def check_files(
        self, files: Sequence[Mapping[str, Any] | bytes] | None, model: str | None = None
    ) -> None:
        """Check files as `submit_message` does (and, with `model`, that it takes them),
        writing nothing: for a caller that creates a conversation before its first message."""
        limits = filing.limits(self.settings)
        checked = attachments.check_files(files, limits)
        if model is not None:
            attachments.check_taken(checked, model, limits)

    def get_file(self, file_id: uuid.UUID | str, *, owner: str | None = None) -> StoredFile:
        """A message's file: its media type, name and bytes (`FileNotFound` for another
        owner's, or an unknown id)."""
        found = parse_file_id(file_id)
        with self.engine.connect() as connection:
            return stored_files.read(connection, found, owner)

    def _branch_submit(
        self, key: str | None, on_busy: str, metadata: Mapping[str, str] | None
    ) -> branching.Submit:
        """How an edit or a regenerate is admitted, its input checked."""
        return branching.Submit(
            check_idempotency_key(key),
            check_busy_policy(on_busy),
            self._owner_limit,
            check_metadata(metadata),
        )

    def _submitted(self, conversation_id: uuid.UUID, turn: NewTurn, view: TurnView) -> Submitted:
        """After a submit's commit: the followers woken, a cancel announced, a worker rung."""
        if not turn.repeated:
            self._notify(conversation_id)
        if turn.announce:
            self._announce_cancel(conversation_id)
        return self._ring(conversation_id, turn, view)

    def _ring(self, conversation_id: uuid.UUID, turn: NewTurn, view: TurnView) -> Submitted:
        submitted = Submitted(
            conversation_id,
            turn.message_seq,
            enqueued=False,
            turn_id=turn.id,
            turn_status=turn.status,
            repeated=turn.repeated,
            turn=view,
        )
        if turn.waits:
            return replace(submitted, detail=QUEUED_BEHIND)
        if turn.status != "queued" and not turn.resumes:
            return submitted  # a repeated submit of a turn that has started already
        return ring(self._enqueue, submitted)


def _describe(span: Any, conversation_id: uuid.UUID, turn_id: uuid.UUID) -> None:
    if span.is_recording():
        span.set_attribute("chatworker.conversation_id", str(conversation_id))
        span.set_attribute("chatworker.turn_id", str(turn_id))
