"""What a web app calls: create a conversation, submit a message as a turn, follow its events
(committed and live), cancel a turn, poll it, retry a failed turn.

`AsyncChatClient` holds the logic, for asyncio (FastAPI, Starlette): each call checks its input
(`checks`), runs its SQL (`store/`) in one transaction and rings the queue (`doorbell`), all in
its `offload` (a thread: `asyncio.to_thread`, or an app's pool), never on the loop; the hottest
(a page of events, a turn, the common submit) are awaited on the loop itself where the database's
driver has an async side (`LoopStore`). `ChatClient` (`facade`) is its blocking twin. A bad request
raises an `InvalidRequest` subclass and writes nothing.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from app.client import attachments, branching, filing, intake
from app.client.admission import REJECT
from app.client.asynchronous_admin import AsyncAdminClient
from app.client.checks import (
    check_busy_policy,
    check_echo,
    check_idempotency_key,
    check_metadata,
    check_seq,
    check_text,
    parse_conversation_id,
)
from app.client.doorbell import Enqueue
from app.client.inline import Offload, inline
from app.client.schemas import check_output_schema
from app.client.store import reads
from app.client.turn_commands import TurnCommands, describe
from app.client.views import Submitted
from app.client.wiring import Wiring
from app.config import Settings
from app.live import LiveChannel
from app.telemetry import tracing

if TYPE_CHECKING:
    from app.client.facade import ChatClient


class AsyncChatClient(TurnCommands):
    """The web-app API over the database and the queue, for asyncio.

    `settings`, `engine`, `enqueue` and `live` as `ChatClient`'s (`wiring.Wiring`); or, first, a
    `ChatClient` whose engine, queue and channel this one shares. `offload` runs the blocking
    work (default `asyncio.to_thread`)."""

    def __init__(
        self,
        settings: Settings | ChatClient | None = None,
        *,
        engine: Engine | None = None,
        enqueue: Enqueue | None = None,
        live: LiveChannel | None = None,
        offload: Offload | None = None,
    ) -> None:
        if settings is None or isinstance(settings, Settings):
            self.wiring = Wiring(settings, engine=engine, enqueue=enqueue, live=live)
        else:
            self.wiring = settings.core.wiring
        self.offload = offload or asyncio.to_thread
        self._admin: AsyncAdminClient | None = None

    @property
    def admin(self) -> AsyncAdminClient:
        """The operator's calls (API keys, budgets, webhooks, the tool catalogue, readiness) over
        this client's engine and live channel."""
        if self._admin is None:
            wiring = self.wiring
            self._admin = AsyncAdminClient(
                wiring.settings,
                engine=wiring.engine,
                live=lambda: wiring.live,
                offload=self.offload,
            )
        return self._admin

    async def submit_message(
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
        echo: Mapping[str, Any] | None = None,
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

        `echo`: what the dialect that submits the turn shows back of its request and keeps
        nowhere else (a JSON object of at most 2 KB; the Responses API's `store` and
        `previous_response_id`), kept with a new turn as given (`TurnView.echo`); a message
        that answers the waiting turn's question, or repeats a key, writes none.

        The common submit (a message to a resting conversation, or a repeated key;
        `quick_submit` says which) is awaited on the loop in two statements where it can be;
        every other runs in `offload`, as do the followers' notice and the worker's doorbell
        after the commit (Redis, which may block).
        """
        wiring = self.wiring

        def submit_message() -> Submitted:  # (the general path)
            found = parse_conversation_id(conversation_id)
            check_text(text, "message", wiring.limit, allow_empty=bool(files))
            key = check_idempotency_key(idempotency_key)
            policy = check_busy_policy(on_busy)
            tags = check_metadata(metadata)
            echoed = check_echo(echo)
            after = None if after_seq is None else check_seq(after_seq)
            schema = check_output_schema(output_schema)
            checked = attachments.check_files(files, filing.limits(self.settings))
            with tracing.submit_span("chat submit") as span, self.engine.begin() as connection:
                reads.check_owner(connection, found, owner)
                kept = filing.keep(connection, found, checked, self.settings)
                if after is None:
                    turn = intake.submit(
                        connection,
                        found,
                        text,
                        idempotency_key=key,
                        on_busy=policy,
                        owner_limit=wiring.owner_limit,
                        metadata=tags,
                        output_schema=schema,
                        files=kept,
                        echo=echoed,
                    )
                else:
                    submit = branching.Submit(
                        key, policy, wiring.owner_limit, tags, schema, kept, echoed
                    )
                    turn = branching.reply_after(connection, found, after, text, submit)
                view = reads.read_turn(connection, turn.id)
                describe(span, found, turn.id)
            return wiring.submitted(found, turn, view)

        store = self.loop_store
        if (
            store is None
            or self.offload is inline
            or files
            or after_seq is not None
            or wiring.owner_limit is not None
        ):
            return await self.offload(submit_message)
        found = parse_conversation_id(conversation_id)
        check_text(text, "message", wiring.limit)
        key = check_idempotency_key(idempotency_key)
        policy = check_busy_policy(on_busy)
        tags = check_metadata(metadata)
        schema = check_output_schema(output_schema)
        echoed = check_echo(echo)
        with tracing.submit_span("chat submit") as span:
            quick = await store.submit(
                found,
                text,
                key,
                policy,
                owner=owner,
                metadata=tags,
                output_schema=schema,
                echo=echoed,
                trace_context=tracing.carrier(),
            )
            if quick is not None:
                describe(span, found, quick[0].id)
        if quick is None:
            return await self.offload(submit_message)
        turn, view = quick
        return await self.offload(functools.partial(wiring.submitted, found, turn, view))

    async def edit_message(
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

        def edit() -> Submitted:
            found = parse_conversation_id(conversation_id)
            check_text(text, "message", self.wiring.limit)
            at = check_seq(seq)
            submit = self._branch_submit(idempotency_key, on_busy, metadata)
            with tracing.submit_span("chat edit") as span, self.engine.begin() as connection:
                reads.check_owner(connection, found, owner)
                turn = branching.edit(connection, found, at, text, submit)
                view = reads.read_turn(connection, turn.id)
                describe(span, found, turn.id)
            return self.wiring.submitted(found, turn, view)

        return await self.offload(edit)

    async def regenerate(
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

        def regenerate() -> Submitted:
            found = parse_conversation_id(conversation_id)
            at = None if seq is None else check_seq(seq)
            submit = self._branch_submit(idempotency_key, on_busy, metadata)
            with tracing.submit_span("chat regenerate") as span, self.engine.begin() as connection:
                reads.check_owner(connection, found, owner)
                turn = branching.regenerate(connection, found, at, submit)
                view = reads.read_turn(connection, turn.id)
                describe(span, found, turn.id)
            return self.wiring.submitted(found, turn, view)

        return await self.offload(regenerate)

    async def close(self) -> None:
        """Close the queue's connection, the live channel and the engine's connections."""
        await self.offload(self.wiring.close)

    def _branch_submit(
        self, key: str | None, on_busy: str, metadata: Mapping[str, str] | None
    ) -> branching.Submit:
        """How an edit or a regenerate is admitted, its input checked."""
        return branching.Submit(
            check_idempotency_key(key),
            check_busy_policy(on_busy),
            self.wiring.owner_limit,
            check_metadata(metadata),
        )


__all__ = ["AsyncChatClient"]
