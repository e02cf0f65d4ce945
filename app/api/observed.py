"""The API's own metrics: every request counted by route template, method and status, and timed
until its response starts (a stream's life is the followers gauge's, not a latency), as a pure
ASGI middleware; and `GET /metrics`, every metric of this process (or, with
`PROMETHEUS_MULTIPROC_DIR`, of every API process sharing it) in Prometheus's format. (Traces of
the requests are FastAPI's own: it continues a caller's `traceparent` once a tracer provider is
set up, and a submit's span is a child of its request's.)

The route is the template (`/v1/conversations/{conversation_id}`), never the raw path, so the
labels stay few; a request no route matched is counted as `unmatched`.
"""

from __future__ import annotations

import time

from fastapi import FastAPI, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.telemetry import metrics

UNMATCHED = "unmatched"


class Observed:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        counted = False

        def count(status: int) -> None:
            nonlocal counted
            if counted:
                return
            counted = True
            route = template(scope)
            method = scope["method"]
            metrics.HTTP_REQUESTS.labels(method, route, str(status)).inc()
            metrics.HTTP_REQUEST_SECONDS.labels(method, route).observe(
                time.perf_counter() - started
            )

        async def observed(message: Message) -> None:
            if message["type"] == "http.response.start":
                count(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, observed)
        except BaseException:
            count(500)
            raise


def template(scope: Scope) -> str:
    """The matched route's path with its parameters as `{name}` (the raw path's segments that
    hold a parameter's value), or `unmatched`."""
    if scope.get("route") is None:
        return UNMATCHED
    names = {str(value): name for name, value in (scope.get("path_params") or {}).items()}
    segments = str(scope.get("path", "")).split("/")
    return "/".join(f"{{{names[part]}}}" if part in names else part for part in segments)


def add_metrics_route(app: FastAPI) -> None:
    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)


__all__ = ["UNMATCHED", "Observed", "add_metrics_route", "template"]
