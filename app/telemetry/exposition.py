"""The worker host's own HTTP endpoint (`CHATWORKER_METRICS_PORT`): `GET /metrics`, the metrics of
every worker process of this `chatworker worker` (and dramatiq's queue metrics) summed from the
multiprocess directory, and `GET /healthz`, the liveness of the hosts' loops (200 while every live
process's host loop has beaten within `CHATWORKER_LIVENESS_SECONDS`, else 503 saying how long ago).

Run by dramatiq as a fork process of the worker (`actors.WorkerMetrics`), beside the consumers,
so a scrape never waits on a busy worker process.
"""

from __future__ import annotations

import logging
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from app.telemetry import metrics

log = logging.getLogger(__name__)


def liveness(max_age: float, now: float | None = None) -> tuple[int, str]:
    """The probe's status and body: is the oldest live host heartbeat recent enough?"""
    oldest = metrics.oldest_heartbeat()
    if oldest is None:
        return 503, "no worker host has started yet\n"
    age = (time.time() if now is None else now) - oldest
    if age > max_age:
        return 503, f"a worker host's loop last beat {age:.0f} s ago (limit {max_age:.0f} s)\n"
    return 200, f"ok: the oldest host heartbeat is {age:.1f} s old\n"


def make_server(host: str, port: int, max_age: float) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, content_type = metrics.exposition()
                self._send(200, body, content_type)
            elif path == "/healthz":
                status, text = liveness(max_age)
                self._send(status, text.encode(), "text/plain; charset=utf-8")
            else:
                self._send(404, b"GET /metrics or /healthz\n", "text/plain; charset=utf-8")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug(format, *args)

    return ThreadingHTTPServer((host, port), Handler)


def serve_worker_endpoint() -> int:
    """dramatiq's fork function: serve until the worker stops (it terminates this process)."""
    from app.config import get_settings

    settings = get_settings()
    assert settings.metrics_port is not None
    server = make_server(settings.metrics_host, settings.metrics_port, settings.liveness_seconds)
    log.info("metrics and liveness on http://%s:%d", settings.metrics_host, settings.metrics_port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


__all__ = ["liveness", "make_server", "serve_worker_endpoint"]
