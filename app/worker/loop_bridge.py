"""The store's synchronous code run on the event loop, its statements awaited there.

The store builds a step's statement and reads its row in plain functions, shared by every caller
(the worker's loop, the CLI, the tests). `run(function, ...)` runs such a function in a greenlet
of its own on the loop's thread; where the driver would block on the database it calls
`await_(coroutine)`, which hands the coroutine to `run` (the loop's side) to await and switches
back with its result or exception. The function's code runs between two awaits exactly as it
would on a thread, without the thread: no hop to a pool thread and back for each statement
(the pattern SQLAlchemy's asyncio extension uses, here in twenty lines of our own).

Outside `run`, `on_loop()` is False and the driver takes its blocking path.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import greenlet  # type: ignore[import-untyped]

P = ParamSpec("P")
T = TypeVar("T")


class _OnLoop(greenlet.greenlet):  # type: ignore[misc]
    """A function running for `run`; its parent is the loop's greenlet."""


async def run(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`function(*args, **kwargs)` on this thread, each `await_` in it awaited on the loop."""
    child = _OnLoop(function, greenlet.getcurrent())
    step: Any = child.switch(*args, **kwargs)
    while not child.dead:  # it switched back with an awaitable: await it, send the outcome in
        try:
            value = await step
        except BaseException:  # a cancel too: raised at the `await_`, where it happened
            step = child.throw(*sys.exc_info())
        else:
            step = child.switch(value)
    return step  # type: ignore[no-any-return]


def on_loop() -> bool:
    """True inside a function `run` runs (an `await_` there is awaited on the loop)."""
    return isinstance(greenlet.getcurrent(), _OnLoop)


def await_(awaitable: Awaitable[T]) -> T:
    """The awaitable's result, awaited on the loop by `run`; only inside `run`'s function."""
    current = greenlet.getcurrent()
    if not isinstance(current, _OnLoop):
        raise RuntimeError("await_ outside loop_bridge.run: nothing would await it")
    return current.parent.switch(awaitable)  # type: ignore[no-any-return]


__all__ = ["await_", "on_loop", "run"]
