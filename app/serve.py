"""`chatworker serve`: the HTTP API (and its chat page) under uvicorn.

With `REDIS_URL` set it serves the API only; the workers run beside it (`chatworker worker`),
sharing the database and Redis, and `--workers N` starts N API processes. With neither
`DATABASE_URL` nor `REDIS_URL` it is the embedded default: one process runs the API and a worker
on the SQLite file, the offline demo model and the bundled demo tools, and, bound to a loopback
address with no auth mode set, auth is `none` (a newcomer opens http://127.0.0.1:8000 and chats).

This module composes the API with the worker; `app.api` itself never imports the worker.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass

from app.config import NO_AUTH, env_name
from app.errors import ChatWorkerError


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    log_level: str = "info"


def is_embedded() -> bool:
    """Nothing configured: no database URL and no Redis in the environment (or `.env`)."""
    from app.config import load_settings

    settings = load_settings()
    return settings.redis_url is None and "DATABASE_URL" not in os.environ


def serve(options: ServeOptions) -> int:
    import uvicorn

    from app.api.connection_limits import GuardedHttpTools
    from app.config import get_settings
    from app.telemetry import logs

    embedded = is_embedded()
    if embedded:
        _embedded_defaults(options)
    settings = get_settings()
    if settings.redis_url is None and options.workers > 1:
        raise ChatWorkerError(
            "--workers > 1 needs REDIS_URL: API processes share live streams and cancels "
            "through Redis (without it each process has its own)"
        )
    if settings.api_auth == (NO_AUTH,) and not _loopback(options.host):
        print(
            f"chatworker: warning: {env_name('api_auth')}=none on {options.host}: anyone who "
            "can reach this port reads and writes every conversation",
            file=sys.stderr,
        )
    print(
        f"chatworker: serving http://{options.host}:{options.port}/ (auth "
        f"{','.join(settings.api_auth)}; {'embedded worker, ' if embedded else ''}"
        f"API at /v1, OpenAPI at /openapi.json)",
        file=sys.stderr,
    )
    if options.workers > 1:
        uvicorn.run(
            "app.api.asgi:from_environment",
            factory=True,
            host=options.host,
            port=options.port,
            workers=options.workers,
            log_level=options.log_level,
            timeout_graceful_shutdown=5,
            http=GuardedHttpTools,
            **logs.uvicorn_options(settings.log_format, options.log_level),
        )
        return 0
    if not embedded:
        from app.api.app import create_server_app

        uvicorn.run(
            create_server_app(settings),
            host=options.host,
            port=options.port,
            log_level=options.log_level,
            timeout_graceful_shutdown=5,
            http=GuardedHttpTools,
            **logs.uvicorn_options(settings.log_format, options.log_level),
        )
        return 0
    return _serve_embedded(options)


def _embedded_defaults(options: ServeOptions) -> None:
    from app.demo.run import use_demo_tools_by_default

    use_demo_tools_by_default()
    if env_name("api_auth") not in os.environ and _loopback(options.host):
        os.environ[env_name("api_auth")] = NO_AUTH


def _serve_embedded(options: ServeOptions) -> int:
    import dramatiq
    import uvicorn

    from app.api.app import create_server_app
    from app.api.connection_limits import GuardedHttpTools
    from app.client import ChatClient
    from app.config import get_settings
    from app.db import shown
    from app.migrate import upgrade
    from app.queue import ring
    from app.telemetry import logs

    settings = get_settings()
    upgrade(settings.database_url)
    from app.worker import actors

    worker = dramatiq.Worker(actors.broker, worker_threads=4, worker_timeout=100)
    worker.start()
    client = ChatClient(settings, enqueue=lambda cid: ring(cid, actors.broker))
    print(f"chatworker: database {shown(settings.database_url)}", file=sys.stderr)
    app = create_server_app(settings, client=client)
    try:
        uvicorn.run(
            app,
            host=options.host,
            port=options.port,
            log_level=options.log_level,
            timeout_graceful_shutdown=5,
            http=GuardedHttpTools,
            **logs.uvicorn_options(settings.log_format, options.log_level),
        )
    finally:
        worker.stop()
        actors.stop_host()
        client.close()
    return 0


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
