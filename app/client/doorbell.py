"""Telling a worker that a stored turn is waiting: ring the queue, or say why it could not.

The turn is committed before the ring, so a failed ring loses nothing: a worker's
recovery sweep starts any running turn that nobody has touched.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from app.client.views import Submitted

log = logging.getLogger(__name__)

Enqueue = Callable[[uuid.UUID], None]


def ring(enqueue: Enqueue | None, conversation_id: uuid.UUID, seq: int) -> Submitted:
    """Ring the doorbell of a committed turn (the process's queue unless `enqueue` is given);
    `enqueued` says whether the queue took it."""
    try:
        (enqueue or _ring_process_queue)(conversation_id)
    except Exception as exc:  # the turn is committed; the recovery sweep will enqueue it
        log.warning("conversation %s: queue unreachable (%s)", conversation_id, exc)
        detail = (
            f"queue unreachable ({type(exc).__name__}); the message is saved and a worker's "
            "recovery sweep will start the turn when the queue is back"
        )
        return Submitted(conversation_id, seq, enqueued=False, detail=detail)
    return Submitted(conversation_id, seq, enqueued=True)


def _ring_process_queue(conversation_id: uuid.UUID) -> None:
    from app.queue import ring as ring_queue  # dramatiq only when a message is sent

    ring_queue(conversation_id)
