"""The commands that run the service or prepare it: `demo`, `worker`, `migrate`, `serve`, and the
metrics directory the worker processes (and `cleanup`) share."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from app.errors import ChatWorkerError

DEMO_QUESTION = "What does the Northwind refund policy say about used tents?"


def add_commands(commands: Any) -> None:
    """`demo`, `worker` and `migrate`."""
    demo = commands.add_parser("demo", help="run one chat turn with tools end to end, offline")
    demo.add_argument("message", nargs="?", default=DEMO_QUESTION, help="what the user asks")
    demo.add_argument("--model", help="a litellm model string (default: CHATWORKER_MODEL)")
    demo.add_argument("--timeout", type=float, default=120, help="seconds to wait for the answer")
    demo.set_defaults(run=_demo)

    worker = commands.add_parser("worker", help="run queue worker processes (needs REDIS_URL)")
    worker.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    worker.add_argument("--threads", type=int, default=2, help="consumer threads per process")
    worker.set_defaults(run=_worker)

    migrate = commands.add_parser("migrate", help="bring the database schema up to date")
    migrate.add_argument("--revision", default="head", help="target revision (default: head)")
    migrate.add_argument("--database-url", help="override DATABASE_URL for this run")
    migrate.set_defaults(run=_migrate)


def add_serve(commands: Any) -> None:
    """`serve`."""
    serve = commands.add_parser("serve", help="serve the HTTP API and the chat page")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="API processes (needs REDIS_URL)")
    serve.set_defaults(run=_serve)


def _demo(args: argparse.Namespace) -> int:
    from app.demo.run import run_demo

    return run_demo(args.message, args.model, args.timeout)


def _worker(args: argparse.Namespace) -> int:
    from app.config import load_settings

    settings = load_settings()
    if not settings.redis_url:
        raise ChatWorkerError(
            "REDIS_URL is not set: worker processes share work through Redis. Set REDIS_URL, or "
            "run `chatworker demo` to see a turn with an in-process worker."
        )
    # An idle consumer polls Redis with a back-off capped at this many ms (dramatiq: 1,000), and
    # pickup waits ~0.4x the cap. Measured (python -m bench --only pickup,footprint): 100 ms gave
    # a 40-70 ms median pickup at 2.2 % of a core idle; 50 ms gives ~15-30 ms at ~3.4 %.
    os.environ.setdefault("dramatiq_worker_timeout", "50")
    if settings.metrics_port is not None:
        share_metrics(metrics_dir(settings.metrics_dir, settings.metrics_port), fresh=True)
    command = [
        sys.executable,
        "-m",
        "app.worker.command",
        "app.worker.actors",
        "--queues",
        "chat",
        "--processes",
        str(args.processes),
        "--threads",
        str(args.threads),
        *(["--verbose"] if args.verbose else []),
    ]
    os.execv(sys.executable, command)
    return 0  # not reached


def _migrate(args: argparse.Namespace) -> int:
    from app.config import load_settings
    from app.db import shown
    from app.migrate import upgrade

    url = args.database_url or load_settings().database_url
    upgrade(url, args.revision)
    print(f"database at {shown(url)} is at revision {args.revision}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from app.serve import ServeOptions, serve

    if args.workers < 1:
        raise ChatWorkerError(f"--workers must be at least 1, not {args.workers}")
    level = "debug" if args.verbose else "info"
    return serve(ServeOptions(args.host, args.port, args.workers, level))


def metrics_dir(configured: str | None, port: int | None) -> Path:
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"chatworker-metrics-{port or 'shared'}"


def share_metrics(directory: Path, *, fresh: bool) -> None:
    """Processes started from here write their metric values to `directory` (prometheus_client's
    multiprocess mode, dramatiq's queue metrics included); `fresh` empties it first (a new
    worker's counters start at zero, as a restarted process's would)."""
    from app.telemetry import MULTIPROC_ENV  # (not .metrics: it must see the variable set)

    directory.mkdir(parents=True, exist_ok=True)
    if fresh:
        for leftover in directory.glob("*.db"):
            leftover.unlink()
    os.environ[MULTIPROC_ENV] = str(directory)
    os.environ["dramatiq_prom_db"] = str(directory)  # noqa: SIM112 - dramatiq reads this name
