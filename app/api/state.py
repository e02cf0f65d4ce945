"""What every route reaches through its dependencies: the settings, the client layer, and the
threads that follow conversations for event streams and waits.

One `ApiState` per app (`app.state.chatworker`), made by `create_app` or `install`.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from app.api.key_cache import KeyCache
from app.api.problems import ApiProblem
from app.api.rate import RateLimiter, make_limiter
from app.client import AsyncChatClient, ChatClient
from app.config import Settings
from app.telemetry import metrics

T = TypeVar("T")
#: Threads for the streams' database reads: within the API engine's 10 pooled connections (its 20
#: overflow connections are opened and closed per use: at 10,000 streams, 32 readers churned them).
READ_THREADS = 8
#: The log reads per second the process's quiet streams make together, at most (their safety net).
SAFETY_READS_PER_SECOND = 100.0


@dataclass
class ApiState:
    settings: Settings
    client: ChatClient
    owns_client: bool = True
    # What waits in a thread, and the streams' reads, get their own pools, so they never starve
    # the short requests of the shared threadpool.
    followers: ThreadPoolExecutor = field(init=False)
    readers: ThreadPoolExecutor = field(init=False)
    _streams: int = 0
    _owners: dict[str | None, int] = field(default_factory=dict)  # streams held by each owner
    _lock: threading.Lock = field(default_factory=threading.Lock)
    limiter: RateLimiter | None = field(init=False)
    failures: RateLimiter | None = field(init=False)
    keys: KeyCache = field(init=False)  # the owners of the API keys seen lately

    def __post_init__(self) -> None:
        self.keys = KeyCache(self.settings.api_key_cache_seconds)
        self.limiter = make_limiter(self.settings)
        # Failed authentications, counted per client address (`caller` "fail:<address>").
        failures = self.settings.api_auth_failure_limit
        self.failures = None if failures is None else make_limiter(self.settings, failures)
        # What still waits in a thread (a `?wait=true` submit, the Responses API's long poll):
        # twice the streams, as a closed wait's thread may still wait out its read while its
        # reader waits again.
        self.followers = ThreadPoolExecutor(
            2 * self.settings.api_max_streams + 16, thread_name_prefix="chatworker-follow"
        )
        # The streams' database reads: short, fewer at once than the engine keeps connections
        # (10,000 streams queue here instead of holding a thread each).
        self.readers = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="chatworker-read")

    @functools.cached_property
    def chat(self) -> AsyncChatClient:
        """The routes' calls, on the event loop (their blocking work in the routes' threadpool),
        over the same engine, queue and channel as `client`."""
        return AsyncChatClient(self.client, offload=run_in_threadpool)

    async def follow_step(self, step: Callable[[], T]) -> T:
        """Run a blocking step of a follower in the followers' pool."""
        return await asyncio.get_running_loop().run_in_executor(self.followers, step)

    async def read_step(self, step: Callable[[], T]) -> T:
        """Run a stream's short database read in the readers' pool."""
        return await asyncio.get_running_loop().run_in_executor(self.readers, step)

    def open_stream(self, owner: str | None = None) -> None:
        """Count a stream (or a long poll) in, for the process and for its owner: 503
        `too_many_streams` when this process serves its maximum, 429 `too_many_owner_streams`
        when the owner holds its own."""
        with self._lock:
            if self._streams >= self.settings.api_max_streams:
                raise ApiProblem(
                    503,
                    "too_many_streams",
                    f"this server follows {self._streams} streams, its maximum; retry soon "
                    "or follow with GET .../events?wait=",
                    {"Retry-After": "5"},
                )
            held = self._owners.get(owner, 0)
            cap = self.settings.api_max_streams_per_owner
            if held >= cap:
                raise ApiProblem(
                    429,
                    "too_many_owner_streams",
                    f"you hold {held} event streams and long polls on this server, the most one "
                    f"owner may (CHATWORKER_API_MAX_STREAMS_PER_OWNER={cap}); close one, or "
                    "retry soon",
                    {"Retry-After": "5"},
                )
            self._streams += 1
            self._owners[owner] = held + 1
        metrics.EVENT_FOLLOWERS.inc()

    def close_stream(self, owner: str | None = None) -> None:
        with self._lock:
            self._streams -= 1
            left = self._owners.get(owner, 0) - 1
            if left > 0:
                self._owners[owner] = left
            else:
                self._owners.pop(owner, None)
        metrics.EVENT_FOLLOWERS.dec()

    async def held(self, owner: str | None, step: Callable[[], T]) -> T:
        """A long poll: a blocking step in the followers' pool, counted as a stream while it
        waits (so waits are capped like streams, for the process and per owner)."""
        self.open_stream(owner)
        try:
            return await self.follow_step(step)
        finally:
            self.close_stream(owner)

    @property
    def streams(self) -> int:
        return self._streams

    def safety_read_interval(self, floor: float) -> float:
        """How often a stream reads the log when no notice came (the safety net for a lost one):
        the settings' `api_log_poll_seconds` (at least `floor`), stretched so that the process's
        streams together read it at most `SAFETY_READS_PER_SECOND` times a second (10,000
        streams: every 100 s, 100 reads/s, instead of 1,000 reads/s; the notices still bring
        every commit at once). Streams ask at each read (the count when a stream opened held
        the first ones to 10 s: 330 reads/s at 10,000, measured)."""
        return max(
            floor, self.settings.api_log_poll_seconds, self._streams / SAFETY_READS_PER_SECOND
        )

    def close(self) -> None:
        self.followers.shutdown(wait=False, cancel_futures=True)
        self.readers.shutdown(wait=False, cancel_futures=True)
        if self.owns_client:
            self.client.close()


async def get_state(request: Request) -> ApiState:  # (async: no thread hop to read it)
    api: ApiState = request.app.state.chatworker
    return api


Api = Annotated[ApiState, Depends(get_state)]
