"""`AdminClient`: the operator's calls (API keys, budgets, webhooks and their deliveries, the
tool catalogue, readiness) for a synchronous app, each the blocking twin of its
`AsyncAdminClient` method (`inline.blocking`: the same signature, by construction).
`ChatClient.admin` is one over the same engine; `AdminClient(settings)` stands alone.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Engine

from app.client.asynchronous_admin import AsyncAdminClient as Async
from app.client.inline import blocking, inline
from app.config import Settings
from app.live import LiveChannel


class AdminClient:
    """`AsyncAdminClient`'s calls, blocking the calling thread (see `inline`)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        engine: Engine | None = None,
        live: Callable[[], LiveChannel] | None = None,
    ) -> None:
        self._core = Async(settings, engine=engine, live=live, offload=inline)

    @property
    def core(self) -> Async:
        """The asynchronous client these calls drive, in this thread (`offload=inline`)."""
        return self._core

    @property
    def settings(self) -> Settings:
        return self._core.settings

    @property
    def engine(self) -> Engine:
        return self._core.engine

    list_tools = blocking(Async.list_tools)
    create_key = blocking(Async.create_key)
    list_keys = blocking(Async.list_keys)
    revoke_key = blocking(Async.revoke_key)
    set_budget = blocking(Async.set_budget)
    remove_budget = blocking(Async.remove_budget)
    list_budgets = blocking(Async.list_budgets)
    add_webhook = blocking(Async.add_webhook)
    list_webhooks = blocking(Async.list_webhooks)
    get_webhook = blocking(Async.get_webhook)
    remove_webhook = blocking(Async.remove_webhook)
    list_deliveries = blocking(Async.list_deliveries)
    redeliver = blocking(Async.redeliver)
    owner_of_key = blocking(Async.owner_of_key)
    audit_log = blocking(Async.audit_log)
    list_runs = blocking(Async.list_runs)
    fleet = blocking(Async.fleet)
    check_ready = blocking(Async.check_ready)
    close = blocking(Async.close)


__all__ = ["AdminClient"]
