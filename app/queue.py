"""The dramatiq broker of this process and the doorbell message that says "run conversation X".

Importing this module is cheap (no litellm, no MCP): the web-app client enqueues through it.
"""

from __future__ import annotations

import threading
import uuid

import dramatiq
from dramatiq.brokers.stub import StubBroker

from app.config import Settings, get_settings

QUEUE_NAME = "chat"
ACTOR_NAME = "chat_turn"

_lock = threading.Lock()
_broker: dramatiq.Broker | None = None


def make_broker(settings: Settings) -> dramatiq.Broker:
    """Redis when `REDIS_URL` is set (its idle consumers woken by each doorbell,
    `app/woken_broker.py`), else an in-process broker (a worker in this process)."""
    broker: dramatiq.Broker
    if settings.redis_url:
        from app.woken_broker import WokenRedisBroker

        broker = WokenRedisBroker(
            url=settings.redis_url, socket_timeout=5, socket_connect_timeout=5
        )
    else:
        broker = StubBroker()
    broker.declare_queue(QUEUE_NAME)
    return broker


def get_broker() -> dramatiq.Broker:
    """The process-wide broker, made from the settings on first use and set as dramatiq's."""
    global _broker  # noqa: PLW0603 - one broker per process is dramatiq's model too
    with _lock:
        if _broker is None:
            _broker = make_broker(get_settings())
            dramatiq.set_broker(_broker)
        return _broker


def ring(
    conversation_id: uuid.UUID, broker: dramatiq.Broker | None = None, delay: float = 0.0
) -> None:
    """Enqueue the doorbell for a conversation, optionally `delay` seconds from now.
    Raises whatever the broker raises."""
    message: dramatiq.Message[None] = dramatiq.Message(
        queue_name=QUEUE_NAME,
        actor_name=ACTOR_NAME,
        args=(str(conversation_id),),
        kwargs={},
        options={},
    )
    milliseconds = round(delay * 1000)
    (broker or get_broker()).enqueue(message, delay=milliseconds or None)
