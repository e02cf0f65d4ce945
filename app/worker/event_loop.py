"""The worker's event loop: uvloop's (libuv) by default, asyncio's own on request or where uvloop
is not installed (it comes with `uvicorn[standard]`, which the API needs; it has no Windows build).

Measured (`python -m bench --only overhead`, the same turns interleaved, five full runs): a durable
step takes 0.004-0.042 ms less on uvloop (0-3 % of its 1.3-1.4 ms)
(docs/PERFORMANCE.md); the worker's MCP subprocesses, sockets and timers run on either.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

log = logging.getLogger(__name__)

EventLoopKind = Literal["uvloop", "asyncio"]
T = TypeVar("T")


def uvloop_available() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def new_event_loop(kind: EventLoopKind = "uvloop") -> asyncio.AbstractEventLoop:
    """A new event loop of `kind`; asyncio's (with a warning) where uvloop is missing."""
    if kind == "uvloop":
        if uvloop_available():
            import uvloop

            return uvloop.new_event_loop()
        log.warning("uvloop is not installed: the worker runs on asyncio's own event loop")
    return asyncio.new_event_loop()


def runner(kind: EventLoopKind = "uvloop") -> asyncio.Runner:
    """An `asyncio.Runner` on a new loop of `kind`: `runner.run(coroutine)`, again and again on
    the same loop (as a worker's turns share its one loop, and what it keeps on it)."""
    return asyncio.Runner(loop_factory=lambda: new_event_loop(kind))


def run(main: Coroutine[Any, Any, T], kind: EventLoopKind = "uvloop") -> T:
    """`asyncio.run(main)` on a new loop of `kind`."""
    with runner(kind) as on_loop:
        return on_loop.run(main)


__all__ = ["EventLoopKind", "new_event_loop", "run", "runner", "uvloop_available"]
