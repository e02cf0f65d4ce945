"""Noticing that the queue lost its doorbells: Redis answers again after an outage, or answers
without the key this process keeps there (a FLUSHALL, a restart without persistence, an eviction).

Running turns never notice either: their doorbells were acknowledged long ago. Queued ones do:
their doorbells are gone, and a delayed re-send of a crashed turn with them. A thread per worker
process asks once a second, in one round trip (EXISTS, then SET with an expiry, so a dead
process's key goes too), and tells the host (`on_lost`), whose next recovery round rings every
waiting turn at once instead of after its lost-doorbell window. The first answer only sets the
key; a Redis that never answered loses nothing this process rang into it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis

log = logging.getLogger(__name__)

KEY_PREFIX = "chatworker:watch:"
INTERVAL_S = 1.0
KEY_TTL_S = 60


class QueueWatch:
    """One worker process's watch of its queue's Redis (`start`, then `close`)."""

    def __init__(
        self,
        client: redis.Redis,
        owner: str,
        on_lost: Callable[[], None],
        interval: float = INTERVAL_S,
    ) -> None:
        self.client = client
        self.key = f"{KEY_PREFIX}{owner}"
        self.on_lost = on_lost
        self.interval = interval
        self._answered = False  # the key was set at least once
        self._down = False  # the last check did not reach Redis
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="chatworker-queue-watch", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)

    def check(self) -> bool:
        """One look: True when the queue lost what this process rang into it since the last."""
        try:
            pipeline: Any = self.client.pipeline(transaction=False)
            pipeline.exists(self.key)
            pipeline.set(self.key, b"1", ex=KEY_TTL_S)
            found, _set = pipeline.execute()
        except (redis.RedisError, OSError):
            self._down = True
            return False
        lost = self._answered and (self._down or not found)
        self._answered, self._down = True, False
        return lost

    def _run(self) -> None:
        while True:
            if self.check():
                log.warning("the queue lost its doorbells (Redis back, or emptied): ringing again")
                try:
                    self.on_lost()
                except Exception:  # the host stopped meanwhile
                    log.debug("could not tell the host", exc_info=True)
            if self._stopped.wait(self.interval):
                return


__all__ = ["KEY_PREFIX", "QueueWatch"]
