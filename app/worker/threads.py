"""The database threads of a worker process: store calls run there, off the event loop, so a slow
query never stalls the other conversations. The worker host owns them and shuts them down."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class DatabaseThreads:
    """A bounded thread pool for blocking database calls (None threads: asyncio's default pool)."""

    def __init__(self, threads: int | None = None) -> None:
        self._pool = (
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="chatworker-db")
            if threads
            else None
        )

    async def run(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`function(*args, **kwargs)` on a database thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: function(*args, **kwargs))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["DatabaseThreads"]
