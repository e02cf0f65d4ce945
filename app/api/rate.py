"""A request rate limit per API key (or JWT subject): `CHATWORKER_API_RATE_LIMIT` = N/second,
N/minute or N/hour, up to N at once, then one per period/N.

The generic cell rate algorithm (GCRA): each caller has a theoretical arrival time (TAT); a
request is let through when `max(TAT, now) + period/N - now <= period`, and moves the TAT on by
period/N. One number per caller, no timers. With `REDIS_URL` the TAT lives in Redis (a Lua
script on Redis's own clock, `chatworker:rate:<caller>`), so every API process shares one
limit; without it, in this process. If Redis cannot be reached the request is let through (a
rate limit is not worth an outage) and the failure logged.

A refusal is a 429 `rate_limited` problem with `Retry-After`; every answer to a limited caller
carries `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` (seconds).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.config import Settings, parse_rate

log = logging.getLogger(__name__)

PREFIX = "chatworker:rate:"

_GCRA = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000000 + tonumber(now_parts[2])
local interval = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local next_tat = tat + interval
local ahead = next_tat - now
if ahead > period then
  return {0, ahead - period, tat - now}
end
redis.call('SET', KEYS[1], next_tat, 'PX', math.ceil(period / 1000) + 1000)
return {1, 0, ahead}
"""


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: int
    remaining: int
    reset: float  # seconds until the caller has its whole burst again
    retry_after: float  # refused: seconds until one request goes through

    def headers(self) -> dict[str, str]:
        shown = {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(math.ceil(self.reset)),
        }
        if not self.allowed:
            shown["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
        return shown


class RateLimiter(Protocol):
    def check(self, caller: str) -> Verdict: ...


class _Gcra:
    def __init__(self, rate: str) -> None:
        self.limit, period = parse_rate(rate)
        self.period_us = int(period * 1_000_000)
        self.interval_us = self.period_us // self.limit

    def verdict(self, allowed: bool, wait_us: int, ahead_us: int) -> Verdict:
        remaining = max(0, (self.period_us - ahead_us) // self.interval_us) if allowed else 0
        return Verdict(allowed, self.limit, remaining, ahead_us / 1e6, wait_us / 1e6)


class MemoryRateLimiter(_Gcra):
    """The TATs of this process."""

    def __init__(
        self, rate: str, clock_us: Callable[[], int] = lambda: time.monotonic_ns() // 1000
    ):
        super().__init__(rate)
        self._clock_us = clock_us  # (tests move it on instead of sleeping)
        self._tats: dict[str, int] = {}
        self._lock = threading.Lock()

    def check(self, caller: str) -> Verdict:
        now = self._clock_us()
        with self._lock:
            tat = max(self._tats.get(caller, now), now)
            ahead = tat + self.interval_us - now
            if ahead > self.period_us:
                return self.verdict(False, ahead - self.period_us, tat - now)
            self._tats[caller] = tat + self.interval_us
            if len(self._tats) > 100_000:  # forget the callers whose burst is whole again
                self._tats = {k: v for k, v in self._tats.items() if v > now}
        return self.verdict(True, 0, ahead)


class RedisRateLimiter(_Gcra):
    """The TATs in Redis, shared by every API process."""

    def __init__(self, rate: str, redis_url: str) -> None:
        super().__init__(rate)
        import redis

        self._redis: Any = redis.Redis.from_url(
            redis_url, socket_timeout=1.0, socket_connect_timeout=1.0
        )
        self._script = self._redis.register_script(_GCRA)

    def check(self, caller: str) -> Verdict:
        try:
            allowed, wait, ahead = self._script(
                keys=[PREFIX + caller], args=[self.interval_us, self.period_us]
            )
        except Exception as exc:  # let it through: the limit is not worth an outage
            log.warning("rate limit not checked (Redis: %s); request let through", exc)
            return Verdict(True, self.limit, self.limit, 0.0, 0.0)
        return self.verdict(bool(allowed), int(wait), int(ahead))


def make_limiter(settings: Settings, rate: str | None = None) -> RateLimiter | None:
    """The limiter of `rate` (default: the request rate), shared through Redis when there is
    one; None without a rate."""
    rate = settings.api_rate_limit if rate is None else rate
    if rate is None:
        return None
    if settings.redis_url:
        return RedisRateLimiter(rate, settings.redis_url)
    return MemoryRateLimiter(rate)


def caller_of_key(presented: str) -> str:
    """An API key's rate identity: a digest of the key (never the key itself)."""
    return "key:" + hashlib.sha256(presented.encode()).hexdigest()[:32]


__all__ = [
    "MemoryRateLimiter",
    "RateLimiter",
    "RedisRateLimiter",
    "Verdict",
    "caller_of_key",
    "make_limiter",
]
