"""The dramatiq side: the chat actor (a doorbell) and the middleware running this process's host.

Run with `chatworker worker` (or `dramatiq app.worker.actors -Q chat`). The actor never retries:
the database owns recovery, and the message is acknowledged as soon as the host has the id. With
`CHATWORKER_METRICS_PORT`, `chatworker worker` shares a metrics directory between its processes
and `WorkerMetrics` serves it (running dramatiq yourself: set `PROMETHEUS_MULTIPROC_DIR` too).
"""

from __future__ import annotations

import logging
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware.prometheus import Prometheus

from app.config import get_settings
from app.queue import ACTOR_NAME, QUEUE_NAME, get_broker, ring
from app.telemetry import logs, metrics, tracing
from app.telemetry.exposition import serve_worker_endpoint
from app.worker import failpoints
from app.worker.host import START_FAILED, WorkerHost

log = logging.getLogger(__name__)

_lock = threading.Lock()
_host: WorkerHost | None = None
_stopped = False


def current_host() -> WorkerHost | None:
    """This process's host, started on first use; None once the process is shutting down."""
    global _host  # noqa: PLW0603 - one host per worker process
    with _lock:
        if _stopped:
            return None
        if _host is None:
            from app.worker.runtime import build_host

            host = build_host(
                get_settings(),
                requeue=lambda cid, delay: ring(cid, broker, delay),
                queue=broker.client if isinstance(broker, RedisBroker) else None,
            )
            host.start()
            _host = host
        return _host


def stop_host(grace: float | None = None) -> None:
    """Drain this process's host: `grace` seconds (default: the setting) for running turns,
    then release the rest and re-enqueue them for another worker. No host starts after this."""
    global _host, _stopped
    with _lock:
        host, _host, _stopped = _host, None, True
    if host is not None:
        host.stop(get_settings().shutdown_grace_seconds if grace is None else grace)


class HostLifecycle(dramatiq.Middleware):
    """Start the host with the worker; drain it once the worker has stopped consuming, so the
    doorbells it re-enqueues go to other workers instead of coming back to this one."""

    def after_worker_boot(self, broker: dramatiq.Broker, worker: Any) -> None:
        """Start the host, or end the process: a worker without a host would take doorbells it
        cannot answer. dramatiq then stops the other processes and exits with this code, for the
        supervisor to restart the worker (SystemExit, because dramatiq logs and swallows an
        Exception raised here)."""
        try:
            current_host()
        except Exception:
            log.critical(
                "the worker host failed to start; exiting with code %d", START_FAILED,
                exc_info=True,
            )  # fmt: skip
            raise SystemExit(START_FAILED) from None

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        stop_host()
        tracing.shutdown()  # export the spans of the turns it drained


class ProcessSetup(dramatiq.Middleware):
    """A worker process logs through the pipe dramatiq gave it (its `sys.stderr` by now), in the
    configured format, with the running turn's ids on each line; and sets up its own tracer
    provider when the OTEL_* variables ask for traces (a forked process cannot share one)."""

    def after_process_boot(self, broker: dramatiq.Broker) -> None:
        log_format = get_settings().log_format
        if log_format == logs.JSON:
            logs.configure(logs.JSON, logging.getLogger().level, stream=sys.stderr)
        else:
            logs.adopt(log_format)
        tracing.setup("chatworker-worker")


class WorkerMetrics(Prometheus):
    """dramatiq's own Prometheus middleware (the queue's metrics, in the shared multiprocess
    directory), with this product's endpoint instead of its bare exposition server: /metrics
    for every process of the worker, and /healthz for the liveness of their hosts."""

    @property
    def forks(self) -> list[Callable[[], int]]:
        return [serve_worker_endpoint]

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        metrics.process_stopped()  # (dramatiq's marks the pid dead in its own directory)


broker = get_broker()
broker.add_middleware(ProcessSetup())
broker.add_middleware(HostLifecycle())
if get_settings().metrics_port is not None and metrics.multiprocess_dir() is not None:
    broker.add_middleware(WorkerMetrics())


@dramatiq.actor(
    actor_name=ACTOR_NAME,
    queue_name=QUEUE_NAME,
    broker=broker,
    max_retries=0,  # recovery is the database's job, not blind redelivery
    time_limit=60_000,  # the actor only hands the id over; this is generous
)
def chat_turn(conversation_id: str) -> None:
    try:
        parsed = uuid.UUID(conversation_id)
    except (ValueError, TypeError):
        log.error("dropping a chat message with an invalid conversation id: %r", conversation_id)
        return
    failpoints.hit("job_received")
    host = current_host()
    if host is None:  # this process is shutting down: hand the turn to another worker
        ring(parsed, broker)
        return
    host.ring(parsed)
    failpoints.hit("before_ack")
