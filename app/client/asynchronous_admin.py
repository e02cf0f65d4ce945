"""What an operator calls: API keys, budgets, webhooks and their deliveries, the tool catalogue,
and readiness. `AsyncAdminClient` holds the logic (`AdminClient` in `admin` is its blocking twin);
`AsyncChatClient.admin` is one over the same engine, `AsyncAdminClient(settings)` stands alone.

Each call checks its input (`checks`) and runs its SQL (`store/`) in one transaction, both in the
client's `offload`, and writes nothing when the input is bad (an `InvalidRequest` subclass).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy import Connection, Engine

from app.client.checks import (
    check_budget,
    check_budget_subject,
    parse_conversation_id,
    parse_webhook_id,
)
from app.client.fleet import FleetView
from app.client.inline import Offload
from app.client.runs import RunFilter, RunView
from app.client.store import api_keys, audit, budgets, fleet, reads, runs, webhooks
from app.client.store.outage import unavailable_as_ours
from app.client.views import (
    ApiKeyView,
    AuditView,
    BudgetView,
    DeliveryView,
    ToolInfo,
    WebhookView,
)
from app.config import Settings, get_settings
from app.db import make_engine
from app.errors import InvalidRequest, KeyNotFound, WebhookNotFound
from app.live import LiveChannel, open_channel

T = TypeVar("T")
MAX_AUDIT_PAGE = 500


class AsyncAdminClient:
    """The operator's API over the database (and the live channel, for readiness).

    Alone, it makes its engine from the settings and opens the live channel on first use; over a
    chat client (`client.admin`) it shares that client's engine and channel. `offload` runs the
    blocking work (default `asyncio.to_thread`)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        engine: Engine | None = None,
        live: Callable[[], LiveChannel] | None = None,
        offload: Offload | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self._owns_engine = engine is None
        self.engine = unavailable_as_ours(engine or make_engine(self.settings.database_url))
        self.offload = offload or asyncio.to_thread
        self._channel: LiveChannel | None = None
        self._shared_live = live

    def _live(self) -> LiveChannel:
        if self._shared_live is not None:
            return self._shared_live()
        if self._channel is None:
            self._channel = open_channel(self.settings.redis_url)
        return self._channel

    async def _read(self, work: Callable[[Connection], T]) -> T:
        """`work` on a connection of its own, in `offload`."""

        def read() -> T:
            with self.engine.connect() as connection:
                return work(connection)

        return await self.offload(read)

    async def _write(self, work: Callable[[Connection], T]) -> T:
        """`work` in a transaction of its own, in `offload`."""

        def write() -> T:
            with self.engine.begin() as connection:
                return work(connection)

        return await self.offload(write)

    async def list_tools(self) -> list[ToolInfo]:
        """The tools the workers' MCP servers offer (as the workers last published them)."""
        return await self._read(reads.read_catalogue)

    async def create_key(
        self, owner: str, name: str = "", *, operator: bool = False
    ) -> tuple[ApiKeyView, str]:
        """A new API key for `owner`: its listing, and its text, shown this once. With
        `operator`, an operator's key (`cwo_...`): `owner` names the operator; it is taken by the
        operator routes (`/v1/admin`) only."""
        return await self._write(
            lambda connection: api_keys.create_key(connection, owner, name, operator=operator)
        )

    async def list_runs(self, wanted: RunFilter | None = None) -> list[RunView]:
        """The turns of every owner that `wanted` selects (`runs.RunFilter`), newest first, each
        with its owner and, while it runs, its worker and its heartbeat's age."""
        chosen = wanted or RunFilter()
        return await self._read(
            lambda connection: runs.list_runs(connection, chosen, datetime.now(UTC))
        )

    async def fleet(self) -> FleetView:
        """The live workers and what they hold, the queue, the last hour's outcomes, the last
        day's failures by class, today's spend per owner (`fleet.py`)."""
        return await self._read(lambda connection: fleet.read_fleet(connection, datetime.now(UTC)))

    async def audit_log(self, limit: int = 50, before: int | None = None) -> list[AuditView]:
        """The operators' actions, newest first: at most `limit` (1 to 500), those older than
        entry `before` (the previous page's last id)."""
        if not 1 <= limit <= MAX_AUDIT_PAGE:
            raise InvalidRequest(f"limit must be 1 to {MAX_AUDIT_PAGE}")
        return await self._read(lambda connection: audit.read_log(connection, limit, before))

    async def list_keys(self, owner: str | None = None) -> list[ApiKeyView]:
        return await self._read(lambda connection: api_keys.list_keys(connection, owner))

    async def revoke_key(self, key_id: uuid.UUID | str) -> ApiKeyView:
        """Revoke a key (from its next request on); harmless twice; `KeyNotFound`."""
        try:
            parsed = key_id if isinstance(key_id, uuid.UUID) else uuid.UUID(str(key_id))
        except ValueError:
            raise KeyNotFound(f"no API key {key_id!r} (a key id is a UUID)") from None
        return await self._write(lambda connection: api_keys.revoke_key(connection, parsed))

    async def set_budget(
        self,
        *,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        period: str = "total",
        max_tokens: int | None = None,
        max_cost_usd: float | str | None = None,
    ) -> None:
        """Cap what an owner or one conversation may spend (`period`: `total` or `day`, UTC),
        in tokens, US dollars or both; replaces the subject's budget of that period. Past it,
        a turn fails before its next model call and a new message is `BudgetExceeded`."""
        parsed = None if conversation_id is None else parse_conversation_id(conversation_id)
        tokens, cost = check_budget(owner, parsed, period, max_tokens, max_cost_usd)
        await self._write(
            lambda connection: budgets.set_budget(
                connection,
                owner=owner,
                conversation_id=parsed,
                period=period,
                max_tokens=tokens,
                max_cost_usd=cost,
            )
        )

    async def remove_budget(
        self,
        *,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        period: str = "total",
    ) -> bool:
        """Remove a budget; whether there was one."""
        parsed = None if conversation_id is None else parse_conversation_id(conversation_id)
        check_budget_subject(owner, parsed, period)
        return await self._write(
            lambda connection: budgets.remove_budget(
                connection, owner=owner, conversation_id=parsed, period=period
            )
        )

    async def list_budgets(self, owner: str | None = None) -> list[BudgetView]:
        """Every budget, or an owner's (its own and its conversations')."""
        return await self._read(lambda connection: budgets.list_budgets(connection, owner))

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
        """A webhook for the owner's conversations (or, with `conversation_id`, that one's):
        `turn.completed`, `turn.failed`, `turn.cancelled` and `turn.requires_action` (or the
        `event_types` given) are POSTed to `url`, signed by the Standard Webhooks scheme with
        the returned view's `secret`, which is not shown again. `body_format` "openai": the
        bodies are OpenAI's webhook events (`response.completed`, ... naming the response of
        `/v1/responses`), which the openai SDK's `webhooks.unwrap` verifies."""
        parsed = None if conversation_id is None else parse_conversation_id(conversation_id)
        return await self._write(
            lambda connection: webhooks.add_webhook(
                connection,
                url=url,
                owner=owner,
                conversation_id=parsed,
                event_types=event_types,
                description=description,
                body_format=body_format,
                allowed=self.settings.webhook_networks,
            )
        )

    async def list_webhooks(self, *, owner: str | None = None) -> list[WebhookView]:
        return await self._read(lambda connection: webhooks.list_webhooks(connection, owner))

    async def get_webhook(
        self, webhook_id: uuid.UUID | str, *, owner: str | None = None
    ) -> WebhookView:
        parsed = parse_webhook_id(webhook_id)
        return await self._read(
            lambda connection: webhooks.get_webhook(connection, parsed, owner=owner)
        )

    async def remove_webhook(
        self, webhook_id: uuid.UUID | str, *, owner: str | None = None
    ) -> None:
        """The webhook and its deliveries, pending ones included; `WebhookNotFound`."""
        parsed = parse_webhook_id(webhook_id)
        await self._write(
            lambda connection: webhooks.remove_webhook(connection, parsed, owner=owner)
        )

    async def list_deliveries(
        self,
        webhook_id: uuid.UUID | str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int = 50,
    ) -> list[DeliveryView]:
        """The webhook's deliveries, newest first (`status='failed'`: the given-up ones)."""
        parsed = parse_webhook_id(webhook_id)
        return await self._read(
            lambda connection: webhooks.list_deliveries(
                connection, parsed, owner=owner, status=status, limit=limit
            )
        )

    async def redeliver(
        self, webhook_id: uuid.UUID | str, delivery_id: int, *, owner: str | None = None
    ) -> DeliveryView:
        """Send a given-up delivery again, from now, with a fresh schedule."""
        if isinstance(delivery_id, bool) or not isinstance(delivery_id, int):
            raise WebhookNotFound(f"no delivery {delivery_id!r} (a delivery id is a number)")
        parsed = parse_webhook_id(webhook_id)
        return await self._write(
            lambda connection: webhooks.redeliver(connection, parsed, delivery_id, owner=owner)
        )

    async def owner_of_key(self, text: str) -> str:
        """The owner of a presented API key; `keys.KeyRefused` when it is not a live key."""
        return await self._read(lambda connection: api_keys.owner_of_key(connection, text))

    async def check_ready(self) -> dict[str, str]:
        """'ok' or the error, for the database and the live channel (Redis) each."""
        return await self.offload(self._readiness)

    def _readiness(self) -> dict[str, str]:
        found: dict[str, str] = {}
        try:
            with self.engine.connect() as connection:
                reads.ping(connection)
            found["database"] = "ok"
        except Exception as exc:
            found["database"] = type(exc).__name__
        try:
            self._live().ping()
            found["live"] = "ok"
        except Exception as exc:
            found["live"] = type(exc).__name__
        return found

    async def close(self) -> None:
        """Close what this client opened itself (a shared engine and channel stay open)."""
        await self.offload(self._close)

    def _close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if self._owns_engine:
            self.engine.dispose()


__all__ = ["AsyncAdminClient"]
