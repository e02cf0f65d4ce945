"""The model or tool call a run awaits now: the user's cancel aborts it (`Aborted`), while a
cancel of the whole run (a shutdown, a lost lease) still propagates as itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Aborted(Exception):
    """The user's cancel aborted the model or tool call the turn was waiting on."""


class Cancellable(Protocol):
    """The run whose calls are awaited (`step_loop.StepLoop`): whether the user cancelled it."""

    cancel_requested: bool


class InFlight:
    def __init__(self, run: Cancellable) -> None:
        self.run = run
        self._task: asyncio.Future[Any] | None = None  # the model or tool call awaited now

    def abort(self) -> None:
        """The user cancelled the turn: abort the call awaited now, if any."""
        if self._task is not None:
            self._task.cancel()

    async def wait(self, call: Awaitable[T]) -> T:
        """Await `call` so that the user's cancel can abort it (`Aborted`). A cancel of the
        whole run (shutdown, a lost lease) still propagates as itself."""
        task = asyncio.ensure_future(call)
        self._task = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            run_cancelled = current is not None and current.cancelling() > 0
            if task.cancelled() and self.run.cancel_requested and not run_cancelled:
                raise Aborted from None
            raise
        finally:
            self._task = None


__all__ = ["Aborted", "Cancellable", "InFlight"]
