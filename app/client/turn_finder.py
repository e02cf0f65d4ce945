"""The reads a stateless dialect places a request by: the turn that asked for a call's answer
(Responses and Chat Completions tool outputs), the turn a history's digest names (Chat
Completions' `idempotency_key`). Each among one owner's turns only."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from app.client.reader import AsyncReader
from app.client.store import reads


class TurnFinder(AsyncReader):
    """What `AsyncChatClient` finds a turn by, beyond its id (a base of its commands)."""

    async def turn_of_call(self, call_id: str, *, owner: str | None = None) -> uuid.UUID:
        """The latest turn (of `owner`'s, if given) that asked for an answer to call `call_id`;
        `TurnNotFound` when none did."""

        def read() -> uuid.UUID:
            with self.wiring.reads.connect() as connection:
                return reads.turn_of_call(connection, call_id, owner)

        return await self.offload(read)

    async def turn_keyed(
        self,
        conversation_ids: Sequence[uuid.UUID],
        key: str,
        *,
        owner: str | None = None,
    ) -> uuid.UUID | None:
        """The latest turn submitted with idempotency key `key` in any of the conversations (of
        `owner`'s, if given); None when there is none."""

        def read() -> uuid.UUID | None:
            with self.wiring.reads.connect() as connection:
                return reads.turn_keyed(connection, list(conversation_ids), key, owner)

        return await self.offload(read)


__all__ = ["TurnFinder"]
