"""How a worker process is assembled from the settings: database, model, tools, service, engine.

Kept apart from the dramatiq glue so the demo, the tests and the benchmarks build the same thing.
"""

from __future__ import annotations

from collections.abc import Callable

from app.config import Settings
from app.db import make_engine
from app.worker.engine import Engine, make_executor, worker_id
from app.worker.loop import ChatService, LoopConfig
from app.worker.ports import ModelClient, ToolProvider
from app.worker.store import Store

DB_THREADS = 8


def loop_config(settings: Settings) -> LoopConfig:
    return LoopConfig(
        max_iterations=settings.max_iterations,
        lease_ttl=settings.lease_ttl_seconds,
        heartbeat_interval=settings.heartbeat_seconds,
        max_attempts=settings.max_attempts,
    )


def model_client(settings: Settings) -> ModelClient:
    from app.worker.llm import LiteLLMClient, prepare_litellm

    prepare_litellm()
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    return LiteLLMClient(
        timeout=settings.llm_timeout_seconds, api_base=settings.llm_api_base, api_key=key
    )


def tool_provider(settings: Settings) -> ToolProvider:
    from app.worker.mcp import McpToolProvider

    return McpToolProvider(
        settings.mcp_servers,
        call_timeout=settings.tool_timeout_seconds,
        max_output_chars=settings.max_tool_output_chars,
    )


def build_engine(
    settings: Settings,
    *,
    requeue: Callable[..., None] | None = None,
    model: ModelClient | None = None,
    tools: ToolProvider | None = None,
) -> Engine:
    """A ready-to-start engine for this process (its tools are published to the catalogue)."""
    database = make_engine(settings.database_url, pool_size=DB_THREADS, max_overflow=2)
    store = Store(database)
    tools = tools or tool_provider(settings)
    service = ChatService(
        store,
        model=model or model_client(settings),
        tools=tools,
        config=loop_config(settings),
        owner=worker_id(),
        executor=make_executor(DB_THREADS),
    )

    async def publish_tools() -> None:
        await service.db(store.publish_catalog, await tools.definitions())

    return Engine(
        service,
        store,
        max_in_flight=settings.max_in_flight,
        recovery_interval=settings.recovery_interval_seconds,
        orphan_after=settings.lease_ttl_seconds,
        requeue=requeue,
        on_start=publish_tools,
    )
