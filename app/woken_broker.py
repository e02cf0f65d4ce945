"""dramatiq's Redis broker, with idle consumers woken by the doorbell instead of found by a poll.

dramatiq's Redis consumer, finding its queue empty, sleeps a back-off (up to the worker's
`worker_timeout`) and fetches again: a doorbell rung during the sleep waits for its end, so pickup
costs half the back-off on average and all of it at worst (50 ms here: p95 ~50 ms). This broker
publishes a notice on the queue's pub/sub channel after each doorbell it enqueues, and its
consumers wait for that notice instead of sleeping, for at most the same back-off:

    enqueue:   dramatiq's dispatch (LPUSH ...)  ->  PUBLISH chatworker:rung:<namespace>:<queue>
    consume:   fetch; nothing? wait on the queue's bell for <= worker_timeout; fetch again

One thread per process (`chatworker-bells`) listens to the channels of the queues it consumes
and rings the bell of each of their consumers. The notice is only a wake-up: the message is in
the queue before it is published, a consumer clears its bell before fetching (a notice that lands
between the fetch and the wait ends the wait at once), and a notice that is lost (the listener
reconnecting, a publish that failed) costs what it costs without this broker, the back-off. A
delayed doorbell is not announced: dramatiq moves it to the queue at its time, the poll finds it.

A doorbell taken by a worker killed before it acknowledged it (the actor acknowledges as soon as
the host has the id) is in that worker's acknowledgement set, which dramatiq's queue maintenance
puts back on the queue once the worker's heartbeat is older than `heartbeat_timeout`. dramatiq's
defaults (60 s, maintenance on 0.1 % of the commands) left such a doorbell to the TTL sweep
(30-45 s); here a worker is dead after 5 s without a heartbeat and 5 % of the commands look. A
live worker's heartbeat is every fetch and acknowledgement, and its idle consumers fetch at least
every fifth of that timeout; a worker judged dead while alive (frozen, starved) only has its
doorbells rung again elsewhere: a doorbell is a wake-up, the claim decides (a second one is a
claim that finds nothing to do).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from typing import Any

import redis
from dramatiq import Message
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer

log = logging.getLogger(__name__)

CHANNEL_PREFIX = "chatworker:rung:"
_LISTEN_POLL_S = 1.0  # how often the listener takes in new queues and checks it was stopped
_RETRY_S = 1.0
_CLOSE_WAIT_S = 5.0  # how long `close` waits for the listener (woken by its own notice)
HEARTBEAT_TIMEOUT_MS = 5_000  # dramatiq's: 60,000
MAINTENANCE_CHANCE = 50_000  # per million dispatch commands (dramatiq's: 1,000)


def channel(namespace: str, queue_name: str) -> str:
    return f"{CHANNEL_PREFIX}{namespace}:{queue_name}"


class Bells:
    """The process's listener: one `threading.Event` per consumer, set when its queue is rung."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.redis = client
        self.namespace = namespace
        self._lock = threading.Lock()
        self._bells: dict[str, list[threading.Event]] = {}  # channel -> its consumers' bells
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        # A channel of this listener's own: `close` publishes on it so the listener stops now
        # instead of at the end of its poll (a worker's exit waited up to a second for it).
        self._wake = channel(namespace, f"_closing:{uuid.uuid4().hex}")
        self.heard = 0  # notices received (for tests)

    def bell(self, queue_name: str) -> threading.Event:
        """A new bell for a consumer of `queue_name` (the listener starts on the first)."""
        event = threading.Event()
        with self._lock:
            self._bells.setdefault(channel(self.namespace, queue_name), []).append(event)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._listen, name="chatworker-bells", daemon=True
                )
                self._thread.start()
        return event

    def close(self) -> None:
        self._stopped.set()
        if self._thread is None:
            return
        with contextlib.suppress(redis.RedisError):  # else it stops at the end of its poll
            self.redis.publish(self._wake, "1")
        self._thread.join(_CLOSE_WAIT_S)

    def _listen(self) -> None:
        while not self._stopped.is_set():
            try:
                with self.redis.pubsub(ignore_subscribe_messages=True) as pubsub:  # type: ignore[no-untyped-call]
                    pubsub.subscribe(self._wake)
                    subscribed: set[str] = set()
                    while not self._stopped.is_set():
                        with self._lock:
                            wanted = set(self._bells) - subscribed
                        if wanted:
                            pubsub.subscribe(*wanted)
                            subscribed |= wanted
                        message = pubsub.get_message(timeout=_LISTEN_POLL_S)
                        if message is not None:
                            name = message.get("channel")
                            self._ring(name.decode() if isinstance(name, bytes) else str(name))
            except Exception as exc:  # Redis went away: the consumers poll meanwhile
                if not self._stopped.is_set():
                    log.warning("doorbell notices: Redis unavailable (%s); retrying", exc)
                    self._wake_all()  # a notice may have been lost: let every consumer look
                self._stopped.wait(_RETRY_S)

    def _ring(self, name: str) -> None:
        self.heard += 1
        with self._lock:
            bells = list(self._bells.get(name, ()))
        for event in bells:
            event.set()

    def _wake_all(self) -> None:
        with self._lock:
            bells = [event for events in self._bells.values() for event in events]
        for event in bells:
            event.set()


class WokenRedisBroker(RedisBroker):
    """`RedisBroker` that announces each doorbell it enqueues and whose consumers wait for the
    announcement (see the module's docstring)."""

    def __init__(self, **options: Any) -> None:
        options.setdefault("heartbeat_timeout", HEARTBEAT_TIMEOUT_MS)
        options.setdefault("maintenance_chance", MAINTENANCE_CHANCE)
        super().__init__(**options)  # type: ignore[no-untyped-call]
        self.bells = Bells(self.client, self.namespace)

    @property
    def consumer_class(self) -> type[_RedisConsumer]:
        return WokenConsumer

    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        sent = super().enqueue(message, delay=delay)
        if delay is None:
            try:
                self.client.publish(channel(self.namespace, message.queue_name), "1")
            except redis.RedisError:  # enqueued: the consumers' back-off finds it
                log.debug("doorbell notice not published", exc_info=True)
        return sent

    def close(self) -> None:
        self.bells.close()
        super().close()


class WokenConsumer(_RedisConsumer):
    """dramatiq's consumer with its idle sleep replaced by a wait on the queue's bell."""

    def __init__(
        self, broker: WokenRedisBroker, queue_name: str, prefetch: int, timeout: int
    ) -> None:
        super().__init__(broker, queue_name, prefetch, 0)  # type: ignore[no-untyped-call]
        # The back-off's cap (the most a lost notice costs), short enough for the heartbeat.
        self.wait_seconds = min(timeout, broker.heartbeat_timeout / 5) / 1000
        self.bell = broker.bells.bell(queue_name)

    def __next__(self) -> Any:
        self.bell.clear()  # before the fetch: a notice after it ends the wait below at once
        message = super().__next__()  # type: ignore[no-untyped-call]  # (its back-off: 0 ms)
        if message is None:
            self.bell.wait(self.wait_seconds)
        return message


__all__ = [
    "CHANNEL_PREFIX",
    "HEARTBEAT_TIMEOUT_MS",
    "MAINTENANCE_CHANCE",
    "Bells",
    "WokenConsumer",
    "WokenRedisBroker",
    "channel",
]
