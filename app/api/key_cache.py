"""The owners of the API keys an API process saw lately, kept for `CHATWORKER_API_KEY_CACHE_SECONDS`
so a request does not pay a database round trip (and a transaction) to learn who is calling.

The stated cost: a revoked key is still taken by a process that saw it for up to that many
seconds after `chatworker keys revoke` (0 turns the cache off: every request asks the database).
Only accepted keys are kept, by the SHA-256 of the whole presented text (never the text itself);
a refusal is asked again each time. At most `MAX_KEYS` are kept, the oldest dropped first.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

MAX_KEYS = 10_000


class KeyCache:
    def __init__(
        self, seconds: float, clock: Callable[[], float] = time.monotonic, size: int = MAX_KEYS
    ) -> None:
        self.seconds = seconds
        self._clock = clock
        self._size = size
        self._kept: OrderedDict[bytes, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()  # (the routes' threads share it)

    def kept(self, presented: str) -> str | None:
        """The key's owner if it is kept and fresh (no lookup, nothing blocks)."""
        if self.seconds <= 0:
            return None
        digest = hashlib.sha256(presented.encode()).digest()
        with self._lock:
            found = self._kept.get(digest)
        return found[0] if found is not None and found[1] > self._clock() else None

    def owner(self, presented: str, lookup: Callable[[str], str]) -> str:
        """The key's owner: kept, or `lookup(presented)` (which raises for a refused key)."""
        if self.seconds <= 0:
            return lookup(presented)
        digest = hashlib.sha256(presented.encode()).digest()
        now = self._clock()
        with self._lock:
            found = self._kept.get(digest)
            if found is not None and found[1] > now:
                return found[0]
        owner = lookup(presented)
        self.keep(presented, owner, now)
        return owner

    def keep(self, presented: str, owner: str, now: float | None = None) -> None:
        """Keep an accepted key's owner (looked up at `now`) for the cache's seconds."""
        if self.seconds <= 0:
            return
        digest = hashlib.sha256(presented.encode()).digest()
        expires = (self._clock() if now is None else now) + self.seconds
        with self._lock:
            self._kept[digest] = (owner, expires)
            self._kept.move_to_end(digest)
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)


__all__ = ["MAX_KEYS", "KeyCache"]
