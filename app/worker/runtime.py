"""How a worker process is assembled from the settings: its database, model, tools and host.

Kept apart from the dramatiq glue so the demo, the tests and the benchmarks build the same thing.
"""

from __future__ import annotations

from typing import Any

from app.config import Settings
from app.db import make_engine
from app.live import open_channel
from app.worker.host import DB_THREADS, Ring, WorkerHost
from app.worker.ports import ModelClient, ToolProvider


def model_client(settings: Settings) -> ModelClient:
    """The model client of the settings, litellm prepared and the offline demo's provider
    (`demo/...`) registered with it."""
    from app.demo import model as demo
    from app.worker.llm import LiteLLMClient, prepare_litellm

    prepare_litellm()
    demo.register()
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    return LiteLLMClient(
        timeout=settings.llm_timeout_seconds,
        api_base=settings.llm_api_base,
        api_key=key,
        stream=settings.llm_stream,
        max_retry_after=settings.llm_max_retry_after_seconds,
        file_kinds=settings.model_file_kinds,
    )


def tool_provider(settings: Settings) -> ToolProvider:
    from app.worker.mcp import McpToolProvider

    return McpToolProvider(
        settings.mcp_servers,
        call_timeout=settings.tool_timeout_seconds,
        max_output_chars=settings.max_tool_output_chars,
        max_media_bytes=settings.max_file_bytes,
    )


def build_host(
    settings: Settings,
    *,
    requeue: Ring | None = None,
    model: ModelClient | None = None,
    tools: ToolProvider | None = None,
    queue: Any = None,
) -> WorkerHost:
    """A ready-to-start host for this process (it publishes its tools to the catalogue);
    `queue`: the queue's Redis client, watched for lost doorbells."""
    return WorkerHost(
        settings,
        # LIFO: an idle worker's next claim takes the connection used last, whose statements are
        # prepared and planned (`TurnStore.warm`), not one idle since the boot.
        make_engine(
            settings.database_url, pool_size=DB_THREADS, max_overflow=2, pool_use_lifo=True
        ),
        model=model or model_client(settings),
        tools=tools or tool_provider(settings),
        requeue=requeue,
        live=open_channel(settings.redis_url),
        queue=queue,
    )
