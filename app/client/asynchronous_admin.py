"""`AsyncAdminClient`: `AdminClient` for asyncio apps, every call run in a worker thread, never on
the loop; each method has its `AdminClient` twin's exact signature
(`tests/integration/test_client.py` compares them, so they cannot drift).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from app.client.admin import AdminClient
from app.client.views import ApiKeyView, BudgetView, DeliveryView, ToolInfo, WebhookView
from app.config import Settings


class AsyncAdminClient:
    """`AdminClient`'s calls as coroutines; `sync` is the client they run on
    (`AsyncChatClient.admin` is one over its `ChatClient`'s)."""

    def __init__(self, client: AdminClient | None = None, *, settings: Settings | None = None):
        self.sync = client or AdminClient(settings)

    async def list_tools(self) -> list[ToolInfo]:
        return await asyncio.to_thread(self.sync.list_tools)

    async def create_key(self, owner: str, name: str = "") -> tuple[ApiKeyView, str]:
        return await asyncio.to_thread(self.sync.create_key, owner, name)

    async def list_keys(self, owner: str | None = None) -> list[ApiKeyView]:
        return await asyncio.to_thread(self.sync.list_keys, owner)

    async def revoke_key(self, key_id: uuid.UUID | str) -> ApiKeyView:
        return await asyncio.to_thread(self.sync.revoke_key, key_id)

    async def set_budget(
        self,
        *,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        period: str = "total",
        max_tokens: int | None = None,
        max_cost_usd: float | str | None = None,
    ) -> None:
        await asyncio.to_thread(
            lambda: self.sync.set_budget(
                owner=owner,
                conversation_id=conversation_id,
                period=period,
                max_tokens=max_tokens,
                max_cost_usd=max_cost_usd,
            )
        )

    async def remove_budget(
        self,
        *,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        period: str = "total",
    ) -> bool:
        return await asyncio.to_thread(
            lambda: self.sync.remove_budget(
                owner=owner, conversation_id=conversation_id, period=period
            )
        )

    async def list_budgets(self, owner: str | None = None) -> list[BudgetView]:
        return await asyncio.to_thread(self.sync.list_budgets, owner)

    async def add_webhook(
        self,
        url: str,
        *,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        event_types: Sequence[str] | None = None,
        description: str | None = None,
        body_format: str = "standard",
    ) -> WebhookView:
        return await asyncio.to_thread(
            lambda: self.sync.add_webhook(
                url,
                owner=owner,
                conversation_id=conversation_id,
                event_types=event_types,
                description=description,
                body_format=body_format,
            )
        )

    async def list_webhooks(self, *, owner: str | None = None) -> list[WebhookView]:
        return await asyncio.to_thread(lambda: self.sync.list_webhooks(owner=owner))

    async def get_webhook(
        self, webhook_id: uuid.UUID | str, *, owner: str | None = None
    ) -> WebhookView:
        return await asyncio.to_thread(lambda: self.sync.get_webhook(webhook_id, owner=owner))

    async def remove_webhook(
        self, webhook_id: uuid.UUID | str, *, owner: str | None = None
    ) -> None:
        await asyncio.to_thread(lambda: self.sync.remove_webhook(webhook_id, owner=owner))

    async def list_deliveries(
        self,
        webhook_id: uuid.UUID | str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int = 50,
    ) -> list[DeliveryView]:
        return await asyncio.to_thread(
            lambda: self.sync.list_deliveries(webhook_id, owner=owner, status=status, limit=limit)
        )

    async def redeliver(
        self, webhook_id: uuid.UUID | str, delivery_id: int, *, owner: str | None = None
    ) -> DeliveryView:
        return await asyncio.to_thread(
            lambda: self.sync.redeliver(webhook_id, delivery_id, owner=owner)
        )

    async def owner_of_key(self, text: str) -> str:
        return await asyncio.to_thread(self.sync.owner_of_key, text)

    async def check_ready(self) -> dict[str, str]:
        return await asyncio.to_thread(self.sync.check_ready)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)


__all__ = ["AsyncAdminClient"]
