"""The worker host: one asyncio loop per worker process, in its own thread, hosting many turns.

The queue actor only rings a doorbell (`ring(conversation_id)`) and returns; the host runs the
conversation as a task, up to `max_in_flight` at once, while they all wait on models and tools.
Because the queue message is acknowledged at once, recovery comes from the database: the rounds
of `recovery.py` ring again the turns of dead workers, the queued turns whose doorbell was lost,
the silent ones, and the runs a database outage interrupted here. The host owns what its turns
share for the process's lifetime: the database threads, the tool provider, and the live channel
(its turns' replies and commit notices go out through it, and the cancels it announces reach the
turn running here at once). Its chores: the recovery rounds, the liveness heartbeat, the queue's
watch (`queue_watch.py`) and the webhook dispatcher (`webhook_dispatcher.py`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import Engine

from app.config import Settings
from app.live import LiveChannel
from app.telemetry import logs, metrics
from app.worker.broadcast import Broadcaster
from app.worker.event_loop import new_event_loop
from app.worker.history import Histories
from app.worker.lease_runner import Outcome, TurnRunner
from app.worker.ports import ModelClient, ToolProvider
from app.worker.queue_watch import QueueWatch
from app.worker.recovery import Recovery, Ring
from app.worker.store import DeliveryStore, LivenessToken, TurnStore, Upkeep
from app.worker.store.outage import Interrupted, interrupted_by_database
from app.worker.threads import DatabaseThreads
from app.worker.webhook_dispatcher import WebhookDispatcher

log = logging.getLogger(__name__)

#: The exit code of a worker process whose host could not start (its tools, its database).
START_FAILED = 5
#: Threads for database calls (and the size of the connection pool they share).
DB_THREADS = 8
# Connections whose claim is planned at boot (~35 ms each, measured): the pool is LIFO, so an idle
# worker's claims take the one or two used last; the others get their plans from their own claims.
WARM_CONNECTIONS = 2
HEARTBEAT_SECONDS = 5.0  # how often the loop beats for the liveness probe
#: Outcomes after which this worker released a lease it held (a turn ended or paused here): its
#: webhook deliveries may be due, and its owner may run another turn.
FREED_A_SLOT = frozenset({Outcome.IDLE, Outcome.FAILED, Outcome.CANCELLED, Outcome.REQUIRES_ACTION})


def worker_id() -> str:
    """A lease owner name that says where the worker runs."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class WorkerHost:
    """Runs turns on a private event loop; thread-safe `start`, `ring` and `stop`."""

    def __init__(
        self,
        settings: Settings,
        database: Engine,
        *,
        model: ModelClient,
        tools: ToolProvider,
        requeue: Ring | None = None,
        owner: str | None = None,
        orphan_after: float | None = None,
        recovery_jitter: float = 1.0,
        live: LiveChannel | None = None,
        queue: Any = None,
    ) -> None:
        """`queue`: the Redis client of the queue, watched for lost doorbells (None: not)."""
        self.settings = settings
        metrics.enable(settings.metrics)
        self.tools = tools
        self.db = DatabaseThreads(DB_THREADS)
        self.upkeep = Upkeep(database)
        # Held while this process lives: a claim records it, so the database tells the others
        # when this process is gone (`store/liveness.py`).
        self.owner = owner or worker_id()
        self.liveness = LivenessToken(database, enabled=settings.liveness_token, owner=self.owner)
        self.live = live
        self.broadcaster = Broadcaster(live, settings.live_flush_seconds)
        self.runner = TurnRunner(
            TurnStore(
                database,
                histories=Histories(settings.history_cache_mb),
                liveness=self.liveness,
            ),
            model=model,
            tools=tools,
            settings=settings,
            owner=self.owner,
            db=self.db,
            broadcaster=self.broadcaster,
            again=self._requeue,
        )
        self.webhooks = (
            WebhookDispatcher(settings, DeliveryStore(database), self.db)
            if settings.webhook_delivery
            else None
        )
        self._stop_listening: Callable[[], None] | None = None
        self._running: dict[uuid.UUID, asyncio.Task[None]] = {}
        self.requeue = requeue
        self.recovery = Recovery(
            settings,
            upkeep=self.upkeep,
            liveness=self.liveness,
            runs=self.runner,
            db=self.db,
            ring=self._requeue,
            running=self._running.__contains__,
            orphan_after=settings.lease_ttl_seconds if orphan_after is None else orphan_after,
            jitter=recovery_jitter,
        )
        self.queue_watch = (
            None if queue is None else QueueWatch(queue, self.runner.owner, self.queue_emptied)
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._again: set[uuid.UUID] = set()
        self._accepting = False
        self._slots: asyncio.Semaphore | None = None
        self._start_error: BaseException | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._beating: asyncio.Task[None] | None = None
        self._watching: asyncio.Task[None] | None = None
        self._delivering: asyncio.Task[None] | None = None

    # --- thread-safe API -------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Start the loop thread and wait until the tools are published and recovery runs."""
        self._thread = threading.Thread(target=self._main, name="chatworker-host", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the worker host did not start in time")
        if self._start_error is not None:
            raise RuntimeError(f"the worker host failed to start: {self._start_error}")

    def ring(self, conversation_id: uuid.UUID) -> None:
        """Run this conversation soon (a no-op if it is already running here: it reruns after)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            raise RuntimeError("the worker host is not running")
        loop.call_soon_threadsafe(self._admit, conversation_id)

    def in_flight(self) -> int:
        return len(self._running)

    def queue_emptied(self) -> None:
        """The queue lost its doorbells (thread-safe): the next recovery round rings every
        waiting turn at once."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.recovery.queue_emptied)

    def cancel(self, conversation_id: uuid.UUID) -> None:
        """A cancel was announced: stop the conversation's turn if it runs here (thread-safe)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.runner.cancel, conversation_id)

    def stop(self, grace: float = 10.0) -> None:
        """Stop admitting, let running turns finish for `grace` seconds, then release the rest."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._stopped.is_set():
            return
        future = asyncio.run_coroutine_threadsafe(self._drain(grace), loop)
        if self.queue_watch is not None:
            self.queue_watch.close()
        try:
            future.result(timeout=grace + 30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=10)
            self.db.close()
            self.runner.checker.close()
            self.runner.store.close()  # (its steps' connections: the loop has stopped)
            self.liveness.close()  # (its leases are released: nobody needs to see it die)
            self.broadcaster.close()
            if self.live is not None:
                self.live.close()
            self._stopped.set()

    # --- inside the loop -------------------------------------------------------------------------

    def _main(self) -> None:
        loop = new_event_loop(self.settings.event_loop)
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
        """Start the tools and publish them to the catalogue, then admit doorbells and sweep."""
        self._slots = asyncio.Semaphore(self.settings.max_in_flight)
        await self.db.run(self.liveness.take)  # before the first claim, which records it
        await self.db.run(self.upkeep.publish_catalog, await self.tools.definitions())
        # The claim planned before the first doorbell: an idle worker's pickup does not pay it.
        limited = self.settings.owner_max_running_turns is not None
        try:
            await self.db.run(self.runner.store.warm, limited, WARM_CONNECTIONS)
        except Exception as exc:  # only slower first claims: never a reason not to start
            log.warning("could not plan the claim ahead (%s); the first claims will", exc)
        if self.live is not None:
            self._stop_listening = self.live.on_cancel(self.cancel)
        self._accepting = True
        loop = asyncio.get_running_loop()
        recovery = self.recovery
        self._sweeper = loop.create_task(
            self._every(self.settings.recovery_interval_seconds, recovery.sweep, "recovery sweep")
        )
        self._beating = loop.create_task(self._beat_forever())
        # Every second: keep this process's liveness token, give back what an outage interrupted,
        # re-ring the dead workers' turns and the queued ones whose doorbell was lost.
        self._watching = loop.create_task(
            self._every(
                self.settings.dead_worker_sweep_seconds, recovery.watch, "dead worker sweep"
            )
        )
        if self.queue_watch is not None:
            self.queue_watch.start()
        if self.webhooks is not None:
            self._delivering = loop.create_task(self.webhooks.run_forever())

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
                with (
                    logs.turn_fields(conversation_id, self.runner.owner),
                    metrics.TURNS_IN_FLIGHT.track_inprogress(),
                ):
                    outcome = await self.runner.run(conversation_id)
            log.info("conversation %s: %s", conversation_id, outcome.value)
            if outcome in FREED_A_SLOT:
                if self.webhooks is not None:
                    self.webhooks.poke()
                if self.settings.owner_max_running_turns is not None:
                    await self._ring_owner_waiting(conversation_id)
        except asyncio.CancelledError:
            log.info("conversation %s: released at shutdown, re-enqueued", conversation_id)
            self._requeue(conversation_id)  # let another worker go on now
            raise
        except Interrupted as stopped:  # not the turn's fault: it costs the turn no attempt
            log.warning(
                "conversation %s: the database went away mid-run (%s); its claim is given back"
                " once it answers",
                conversation_id, stopped.__cause__,
            )  # fmt: skip
            self.recovery.interrupted(stopped.claim)
        except Exception as exc:  # the lease expires and recovery retries, bounded by attempts
            if interrupted_by_database(exc):  # before a claim: the recovery round rings it
                log.warning(
                    "conversation %s: the database is unreachable (%s)", conversation_id, exc
                )
            else:
                log.exception("conversation %s: run crashed", conversation_id)
        finally:
            self._running.pop(conversation_id, None)
            if conversation_id in self._again:
                self._again.discard(conversation_id)
                self._admit(conversation_id)

    async def _ring_owner_waiting(self, conversation_id: uuid.UUID) -> None:
        """A turn of this owner ended here: ring its oldest waiting conversations (as many as
        its limit: the ones that still find it full wait again, for the next end or sweep)."""
        limit = self.settings.owner_max_running_turns or 0
        try:
            waiting = await self.db.run(self.upkeep.owner_waiting, conversation_id, limit)
        except Exception:  # the sweep rings them later
            log.exception("cannot read the owner's waiting conversations")
            return
        for waiter in waiting:
            self._requeue(waiter)

    async def _beat_forever(self) -> None:
        """The liveness probe's signal (`/healthz`): this loop still runs its tasks."""
        interval = min(HEARTBEAT_SECONDS, self.settings.liveness_seconds / 4)
        while True:
            metrics.beat()
            await asyncio.sleep(interval)

    async def _every(self, seconds: float, chore: Callable[[], Awaitable[int]], what: str) -> None:
        """Run `chore` every `seconds` while the host runs; a failure (the database may be down)
        is logged and the next round tries again."""
        while True:
            try:
                await chore()
            except Exception:
                log.exception("%s failed", what)
            await asyncio.sleep(seconds)

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
        if self._stop_listening is not None:
            self._stop_listening()
        for chore in (self._sweeper, self._beating, self._watching, self._delivering):
            if chore is not None:
                chore.cancel()
        pending = list(self._running.values())
        if pending:
            _done, still = await asyncio.wait(pending, timeout=grace)
            for task in still:
                task.cancel()
            if still:
                await asyncio.wait(still, timeout=10)
        await self.tools.close()


__all__ = ["DB_THREADS", "START_FAILED", "Ring", "WorkerHost", "worker_id"]
