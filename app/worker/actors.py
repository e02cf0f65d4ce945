"""The dramatiq side: the chat actor (a doorbell) and the middleware running this process's engine.

Run with `chatworker worker` (or `dramatiq app.worker.actors -Q chat`). The actor never retries:
the database owns recovery, and the message is acknowledged as soon as the engine has the id.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

import dramatiq

from app.config import get_settings
from app.queue import ACTOR_NAME, QUEUE_NAME, get_broker, ring
from app.worker import failpoints
from app.worker.engine import Engine

log = logging.getLogger(__name__)

_lock = threading.Lock()
_engine: Engine | None = None


def current_engine() -> Engine:
    """This process's engine, started on first use."""
    global _engine  # noqa: PLW0603 - one engine per worker process
    with _lock:
        if _engine is None:
            from app.worker.runtime import build_engine

            engine = build_engine(get_settings(), requeue=lambda cid: ring(cid, broker))
            engine.start()
            _engine = engine
        return _engine


def stop_engine(grace: float | None = None) -> None:
    """Drain this process's engine: `grace` seconds (default: the setting) for running turns."""
    global _engine
    with _lock:
        engine, _engine = _engine, None
    if engine is not None:
        engine.stop(get_settings().shutdown_grace_seconds if grace is None else grace)


class EngineLifecycle(dramatiq.Middleware):
    """Start the engine with the worker, drain it (release what is left) on shutdown."""

    def after_worker_boot(self, broker: dramatiq.Broker, worker: Any) -> None:
        current_engine()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        stop_engine()


broker = get_broker()
broker.add_middleware(EngineLifecycle())


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
    current_engine().ring(parsed)
    failpoints.hit("before_ack")
