"""The HTTP API as an ASGI app: `create_app(settings)` for a server of its own (`create_server_app`
as `chatworker serve` runs it), `install(app)` to mount the same routes, error handlers and state
in an existing FastAPI app.

It is a skin over the client layer (`app.client`): it never imports the worker, and a route holds
no SQL and no business rule. The chat page (`app/api/page/`) is served at `/` by `create_app`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

from app.api import heap
from app.api.body_limit import BodyLimit
from app.api.chat_page import PAGE, page_html
from app.api.gate import body_limits, document_limits
from app.api.handoff import Handoff
from app.api.observed import Observed, add_metrics_route
from app.api.problems import Problem, install_handlers
from app.api.routes import router
from app.api.security_headers import SecurityHeaders
from app.api.state import ApiState
from app.client import ChatClient
from app.config import Settings, get_settings
from app.db import make_engine
from app.telemetry import metrics, tracing


def create_app(settings: Settings | None = None, *, client: ChatClient | None = None) -> FastAPI:
    """The API with the chat page, ready for uvicorn; `client` defaults to one on the settings'
    database and Redis (closed with the app)."""
    settings = settings or get_settings()
    tracing.setup("chatworker-api")  # (only if the OTEL_* variables ask for traces)
    metrics.enable(settings.metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        app.state.chatworker.close()
        tracing.shutdown()

    app = FastAPI(
        title="chatworker",
        version=_version(),
        summary="A durable LLM chat worker with MCP tools: conversations, turns, event streams.",
        lifespan=lifespan,
        docs_url=None,  # the interactive docs load scripts from a CDN; the document is enough
        redoc_url=None,
    )
    install(app, settings, client=client)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=["Location", "Idempotent-Replayed", "Retry-After"],
            max_age=600,
        )
    app.mount("/static", StaticFiles(directory=PAGE), name="static")

    page = page_html()

    @app.get("/", include_in_schema=False)
    async def chat_page() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-cache"})

    return app


def create_server_app(
    settings: Settings | None = None, *, client: ChatClient | None = None
) -> ASGIApp:
    """`create_app` as `chatworker serve` runs it: under a `Handoff` (a stream's rest runs
    outside every layer of the app), with start-up's heap frozen out of the collector's sight
    (`heap.settle`; build it last, just before serving)."""
    app = Handoff(create_app(settings, client=client))
    heap.settle()
    return app


def install(
    app: FastAPI, settings: Settings | None = None, *, client: ChatClient | None = None
) -> ApiState:
    """Mount the `/v1` routes and `/metrics` on `app` with the problem handlers, the body limits
    and the request metrics; returns the `ApiState` (close it when the app stops; `create_app`
    does)."""
    settings = settings or get_settings()
    owned = client is None
    if client is None:
        # Short requests from the threadpool and the followers' log reads share the pool.
        pool = {} if settings.is_sqlite else {"pool_size": 10, "max_overflow": 20}
        engine = make_engine(settings.database_url, **pool)
        client = ChatClient(settings, engine=engine)
    api = ApiState(settings, client, owns_client=owned)
    app.state.chatworker = api
    install_handlers(app)
    app.add_middleware(
        BodyLimit,
        # (at the door, the largest route's: each route holds its own, `gate.GuardedRoute`)
        max_bytes=max(body_limits(settings).values()),
        timeout=settings.api_body_timeout_seconds,
    )
    app.add_middleware(Observed)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(Handoff)  # (the outermost of ours: a stream's rest runs from its frame)
    app.include_router(router)
    add_metrics_route(app)
    _document(app, settings)
    return api


def _document(app: FastAPI, settings: Settings) -> None:
    """The `Problem` schema in the OpenAPI components, for every route's error responses, and
    each operation's body limit in bytes."""
    original = app.openapi

    def openapi() -> dict[str, object]:
        if app.openapi_schema is None:
            schema = original()
            document_limits(schema, settings)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.setdefault(
                "Problem", Problem.model_json_schema(ref_template="#/components/schemas/{model}")
            )
            for name, definition in (
                Problem.model_json_schema(ref_template="#/components/schemas/{model}")
                .get("$defs", {})
                .items()
            ):
                components.setdefault(name, definition)
            components["Problem"].pop("$defs", None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _version() -> str:
    try:
        return version("chatworker")
    except PackageNotFoundError:  # pragma: no cover (a checkout without an install)
        return "0"
