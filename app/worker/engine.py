"""The engine of a worker process: one asyncio loop, in its own thread, hosting many conversations.

The queue actor only rings a doorbell (`ring(conversation_id)`) and returns; the engine runs the
conversation as a task, up to `max_in_flight` at once, while they all wait on models and tools.
Because the queue message is acknowledged at once, recovery comes from the database: a periodic
sweep re-enqueues running conversations whose lease expired (or whose doorbell was lost).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.worker.loop import ChatService
from app.worker.plan import recovery_delay
from app.worker.store import Store

log = logging.getLogger(__name__)

Ring = Callable[[uuid.UUID, float], None]  # (conversation id, delay in seconds)


def worker_id() -> str:
    """A lease owner name that says where the worker runs."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


#: The exit code of a worker process whose engine could not start (its tools, its database).
ENGINE_FAILED = 5


class Engine:
    """Runs conversations on a private event loop; thread-safe `ring`, `start` and `stop`."""

    def __init__(
        self,
        service: ChatService,
        store: Store,
        *,
        max_in_flight: int = 500,
        recovery_interval: float = 15.0,
        orphan_after: float = 30.0,
        recovery_jitter: float = 1.0,
        requeue: Ring | None = None,
        on_start: Callable[[], Any] | None = None,
    ) -> None:
        self.service = service
        self.store = store
        self.max_in_flight = max_in_flight
        self.recovery_interval = recovery_interval
        self.orphan_after = orphan_after
        self.recovery_jitter = recovery_jitter
        self._resent: dict[uuid.UUID, float] = {}  # doorbells this process re-sent: until when
        self.requeue = requeue
        self.on_start = on_start
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._running: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._again: set[uuid.UUID] = set()
        self._accepting = False
        self._slots: asyncio.Semaphore | None = None
        self._start_error: BaseException | None = None
        self._sweeper: asyncio.Task[None] | None = None

    # --- thread-safe API -------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Start the loop thread and wait until the tools are loaded and recovery runs."""
        self._thread = threading.Thread(target=self._main, name="chatworker-engine", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the worker engine did not start in time")
        if self._start_error is not None:
            raise RuntimeError(f"the worker engine failed to start: {self._start_error}")

    def ring(self, conversation_id: uuid.UUID) -> None:
        """Run this conversation soon (a no-op if it is already running here: it reruns after)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            raise RuntimeError("the worker engine is not running")
        loop.call_soon_threadsafe(self._admit, conversation_id)

    def in_flight(self) -> int:
        return len(self._running)

    def stop(self, grace: float = 10.0) -> None:
        """Stop admitting, let running turns finish for `grace` seconds, then release the rest."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._stopped.is_set():
            return
        future = asyncio.run_coroutine_threadsafe(self._drain(grace), loop)
        try:
            future.result(timeout=grace + 30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._stopped.set()

    # --- inside the loop -------------------------------------------------------------------------

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._boot())
        except BaseException as exc:  # surfaced to start() in the calling thread
            self._start_error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _boot(self) -> None:
        self._slots = asyncio.Semaphore(self.max_in_flight)
        if self.on_start is not None:
            result = self.on_start()
            if asyncio.iscoroutine(result):
                await result
        self._accepting = True
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    def _admit(self, conversation_id: uuid.UUID) -> None:
        if not self._accepting:
            return
        if conversation_id in self._running:
            self._again.add(conversation_id)
            return
        task = asyncio.get_running_loop().create_task(self._run(conversation_id))
        self._running[conversation_id] = task

    async def _run(self, conversation_id: uuid.UUID) -> None:
        assert self._slots is not None
        try:
            async with self._slots:
                outcome = await self.service.run(conversation_id)
            log.info("conversation %s: %s", conversation_id, outcome.value)
        except asyncio.CancelledError:
            log.info("conversation %s: released at shutdown, re-enqueued", conversation_id)
            self._requeue(conversation_id)  # let another worker go on now
            raise
        except Exception:  # the lease expires and recovery retries, bounded by the attempt count
            log.exception("conversation %s: run crashed", conversation_id)
        finally:
            self._running.pop(conversation_id, None)
            if conversation_id in self._again:
                self._again.discard(conversation_id)
                self._admit(conversation_id)

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:  # the database may be down; try again next time
                log.exception("recovery sweep failed")
            await asyncio.sleep(self.recovery_interval)

    async def sweep(self) -> int:
        """Re-enqueue running conversations that nobody has touched for `orphan_after` seconds,
        each after `plan.recovery_delay` (a random spread that grows with its crashes)."""
        orphans = await self.service.db(self.store.orphans, self.orphan_after)
        now = time.monotonic()
        resent = 0
        for conversation_id, attempts in orphans:
            pending = self._resent.get(conversation_id, 0.0) > now
            if conversation_id in self._running or pending:
                continue  # its doorbell is already on its way
            delay = recovery_delay(attempts, random.random(), self.recovery_jitter)
            self._resent[conversation_id] = now + delay + self.orphan_after
            self._requeue(conversation_id, delay)
            resent += 1
        self._resent = {k: until for k, until in self._resent.items() if until > now}
        if resent:
            log.info("recovery sweep: re-enqueued %d conversation(s)", resent)
        return resent

    def _requeue(self, conversation_id: uuid.UUID, delay: float = 0.0) -> None:
        if self.requeue is not None:
            try:
                self.requeue(conversation_id, delay)
                return
            except Exception as exc:  # queue down: run it here rather than wait for the queue
                log.warning("cannot enqueue %s (%s); running it here", conversation_id, exc)
        if self._accepting:
            asyncio.get_running_loop().call_later(delay, self._admit, conversation_id)

    async def _drain(self, grace: float) -> None:
        self._accepting = False
        if self._sweeper is not None:
            self._sweeper.cancel()
        pending = list(self._running.values())
        if pending:
            _done, still = await asyncio.wait(pending, timeout=grace)
            for task in still:
                task.cancel()
            if still:
                await asyncio.wait(still, timeout=10)
        await self.service.tools.close()


def make_executor(threads: int) -> ThreadPoolExecutor:
    """The pool that runs database calls off the event loop."""
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="chatworker-db")
