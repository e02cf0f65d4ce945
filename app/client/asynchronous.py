"""`AsyncChatClient`: `ChatClient` for asyncio apps (FastAPI, Starlette), each call run in a
worker thread, never blocking the loop; the hottest (`events`, `get_turn`, `submit_message`) are
awaited on the loop itself where the database's driver has an async side (`ChatClient`'s loop
variants: `aevents`, `aget_turn`, `asubmit_message`). Each method has its `ChatClient` twin's
exact signature (`tests/integration/test_client.py` compares them, so they cannot drift).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Engine

from app.client.admission import REJECT
from app.client.asynchronous_admin import AsyncAdminClient
from app.client.doorbell import Enqueue
from app.client.facade import ChatClient
from app.client.following import REST, AsyncFollowing, LogInterval
from app.client.merge import Cursor
from app.client.views import (
    ConversationPage,
    ConversationView,
    Decision,
    EventPage,
    FinishedTurn,
    StoredFile,
    Submitted,
    TurnRecord,
    TurnView,
)
from app.config import Settings
from app.live import LiveChannel


class AsyncChatClient:
    """`ChatClient`'s calls as coroutines; `sync` is the client they run on."""

    def __init__(
        self,
        client: ChatClient | None = None,
        *,
        settings: Settings | None = None,
        engine: Engine | None = None,
        enqueue: Enqueue | None = None,
        live: LiveChannel | None = None,
    ) -> None:
        self.sync = client or ChatClient(settings, engine=engine, enqueue=enqueue, live=live)
        self._admin: AsyncAdminClient | None = None

    @property
    def admin(self) -> AsyncAdminClient:
        """The operator's calls (keys, budgets, webhooks, tools, readiness) as coroutines, over
        the same engine."""
        if self._admin is None:
            self._admin = AsyncAdminClient(self.sync.admin)
        return self._admin

    async def create_conversation(
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
        """`ChatClient.create_conversation`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.create_conversation(
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
            )
        )

    async def create_or_get(
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
        """`ChatClient.create_or_get`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.create_or_get(
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
            )
        )

    async def list_conversations(
        self, *, owner: str | None = None, limit: int = 20, before: uuid.UUID | str | None = None
    ) -> ConversationPage:
        """`ChatClient.list_conversations`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.list_conversations(owner=owner, limit=limit, before=before)
        )

    async def delete_conversation(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> None:
        """`ChatClient.delete_conversation`, in a worker thread."""
        await asyncio.to_thread(lambda: self.sync.delete_conversation(conversation_id, owner=owner))

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
    ) -> Submitted:
        """`ChatClient.submit_message`: the common submit awaited on the loop, any other in a
        worker thread (`asubmit_message`)."""
        return await self.sync.asubmit_message(
            conversation_id,
            text,
            idempotency_key=idempotency_key,
            on_busy=on_busy,
            owner=owner,
            metadata=metadata,
            after_seq=after_seq,
            output_schema=output_schema,
            files=files,
            offload=asyncio.to_thread,
        )

    async def check_files(
        self, files: Sequence[Mapping[str, Any] | bytes] | None, model: str | None = None
    ) -> None:
        """`ChatClient.check_files`, in a worker thread."""
        await asyncio.to_thread(lambda: self.sync.check_files(files, model))

    async def get_file(self, file_id: uuid.UUID | str, *, owner: str | None = None) -> StoredFile:
        """`ChatClient.get_file`, in a worker thread."""
        return await asyncio.to_thread(lambda: self.sync.get_file(file_id, owner=owner))

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
        """`ChatClient.edit_message`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.edit_message(
                conversation_id,
                seq,
                text,
                idempotency_key=idempotency_key,
                on_busy=on_busy,
                owner=owner,
                metadata=metadata,
            )
        )

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
        """`ChatClient.regenerate`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.regenerate(
                conversation_id,
                seq,
                idempotency_key=idempotency_key,
                on_busy=on_busy,
                owner=owner,
                metadata=metadata,
            )
        )

    async def switch_branch(
        self, conversation_id: uuid.UUID | str, seq: int, *, owner: str | None = None
    ) -> ConversationView:
        """`ChatClient.switch_branch`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.switch_branch(conversation_id, seq, owner=owner)
        )

    async def fork_conversation(
        self,
        conversation_id: uuid.UUID | str,
        seq: int | None = None,
        *,
        new_id: uuid.UUID | str | None = None,
        owner: str | None = None,
    ) -> ConversationView:
        """`ChatClient.fork_conversation`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.fork_conversation(conversation_id, seq, new_id=new_id, owner=owner)
        )

    async def retry_conversation(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> Submitted:
        """`ChatClient.retry_conversation`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.retry_conversation(conversation_id, owner=owner)
        )

    async def answer_actions(
        self,
        turn_id: uuid.UUID | str,
        outputs: Mapping[str, str] | None = None,
        *,
        approvals: Mapping[str, bool | Decision] | None = None,
        owner: str | None = None,
    ) -> TurnView:
        """`ChatClient.answer_actions`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.answer_actions(turn_id, outputs, approvals=approvals, owner=owner)
        )

    async def cancel(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> TurnView | None:
        """`ChatClient.cancel`, in a worker thread."""
        return await asyncio.to_thread(lambda: self.sync.cancel(conversation_id, owner=owner))

    async def cancel_turn(self, turn_id: uuid.UUID | str, *, owner: str | None = None) -> TurnView:
        """`ChatClient.cancel_turn`, in a worker thread."""
        return await asyncio.to_thread(lambda: self.sync.cancel_turn(turn_id, owner=owner))

    async def follow(
        self,
        conversation_id: uuid.UUID | str,
        after: Cursor | int | str = 0,
        *,
        until: str | None = REST,
        turn_id: uuid.UUID | str | None = None,
        timeout: float | None = None,
        poll_interval: float = 1.0,
        log_interval: LogInterval | None = None,
        owner: str | None = None,
    ) -> AsyncFollowing:
        """`ChatClient.follow`, in a worker thread."""
        following = await asyncio.to_thread(
            lambda: self.sync.follow(
                conversation_id,
                after,
                until=until,
                turn_id=turn_id,
                timeout=timeout,
                poll_interval=poll_interval,
                log_interval=log_interval,
                owner=owner,
            )
        )
        return AsyncFollowing(following)

    async def get_turn(self, turn_id: uuid.UUID | str, *, owner: str | None = None) -> TurnView:
        """`ChatClient.get_turn`, awaited on the loop (`aget_turn`)."""
        return await self.sync.aget_turn(turn_id, owner=owner, offload=asyncio.to_thread)

    async def wait_for_turn(
        self,
        turn_id: uuid.UUID | str,
        timeout: float,
        *,
        log_interval: float | None = None,
        owner: str | None = None,
    ) -> FinishedTurn:
        """`ChatClient.wait_for_turn`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.wait_for_turn(
                turn_id, timeout, log_interval=log_interval, owner=owner
            )
        )

    async def turn_record(
        self, turn_id: uuid.UUID | str, *, owner: str | None = None
    ) -> TurnRecord:
        """`ChatClient.turn_record`, in a worker thread."""
        return await asyncio.to_thread(lambda: self.sync.turn_record(turn_id, owner=owner))

    async def current_turn(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> TurnView | None:
        """`ChatClient.current_turn`, in a worker thread."""
        return await asyncio.to_thread(lambda: self.sync.current_turn(conversation_id, owner=owner))

    async def events(
        self,
        conversation_id: uuid.UUID | str,
        after: int = 0,
        limit: int = 100,
        *,
        owner: str | None = None,
    ) -> EventPage:
        """`ChatClient.events`, awaited on the loop (`aevents`)."""
        return await self.sync.aevents(
            conversation_id, after, limit, owner=owner, offload=asyncio.to_thread
        )

    async def wait_for_events(
        self,
        conversation_id: uuid.UUID | str,
        after: int = 0,
        limit: int = 100,
        *,
        wait: float = 0.0,
        log_interval: float | None = None,
        owner: str | None = None,
    ) -> EventPage:
        """`ChatClient.wait_for_events`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.wait_for_events(
                conversation_id, after, limit, wait=wait, log_interval=log_interval, owner=owner
            )
        )

    async def get_conversation(
        self,
        conversation_id: uuid.UUID | str,
        after_seq: int | None = None,
        *,
        owner: str | None = None,
        all_versions: bool = False,
        messages: bool = True,
    ) -> ConversationView:
        """`ChatClient.get_conversation`, in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.sync.get_conversation(
                conversation_id,
                after_seq,
                owner=owner,
                all_versions=all_versions,
                messages=messages,
            )
        )

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)


__all__ = ["AsyncChatClient"]
