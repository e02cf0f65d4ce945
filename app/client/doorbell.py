"""Telling a worker that a stored turn is waiting: ring the queue, or say why no one was told.

The turn is committed before the ring, so a missing or failed ring loses nothing: a worker's
recovery sweep starts any running turn that nobody has touched.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from app.client.views import Submitted
from app.config import Settings

log = logging.getLogger(__name__)

Enqueue = Callable[[uuid.UUID], None]

NO_QUEUE = (
    "REDIS_URL is not set, so no worker was told about this message; the message is saved, and a "
    "worker using the same database starts the turn when its recovery sweep finds it"
)


def default_enqueue(settings: Settings) -> QueueRinger | None:
    """The queue at these settings' `REDIS_URL`; None without one, because the in-process broker
    of a web-app process has no worker reading it (a ring there would be lost)."""
    return QueueRinger(settings) if settings.redis_url else None


QUEUED_BEHIND = (
    "the turn waits behind the running one; the worker that finishes that turn starts this one"
)


def ring(enqueue: Enqueue | None, submitted: Submitted) -> Submitted:
    """Ring the doorbell of a committed turn; `enqueued` says whether a worker was told."""
    conversation_id = submitted.conversation_id
    if enqueue is None:
        return replace(submitted, enqueued=False, detail=NO_QUEUE)
    try:
        enqueue(conversation_id)
    except Exception as exc:  # the turn is committed; the recovery sweep will enqueue it
        log.warning("conversation %s: queue unreachable (%s)", conversation_id, exc)
        detail = (
            f"queue unreachable ({type(exc).__name__}); the message is saved and a worker's "
            "recovery sweep will start the turn when the queue is back"
        )
        return replace(submitted, enqueued=False, detail=detail)
    return replace(submitted, enqueued=True)


class QueueRinger:
    """Rings the queue at the client's own `REDIS_URL`, not the process's (a client may be given
    settings other than the environment's); its broker is made on the first ring."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._broker: Any = None
        self._lock = threading.Lock()

    def __call__(self, conversation_id: uuid.UUID) -> None:
        from app.queue import make_broker, ring  # dramatiq only when a message is sent

        with self._lock:
            if self._broker is None:
                self._broker = make_broker(self.settings)
        ring(conversation_id, self._broker)

    def close(self) -> None:
        with self._lock:
            broker, self._broker = self._broker, None
        if broker is not None:
            broker.close()
