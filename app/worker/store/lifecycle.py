"""The worker's database port for running turns (`TurnStore`, the loop's `ports.TurnStore`),
composed of its parts: the claim (`claiming`), the fenced writes of each step (`steps`) and what a
turn reads besides (`turn_reads`), over one engine, clock and statement driver.
"""

from __future__ import annotations

from sqlalchemy import Engine

from app.db import autocommit_reads
from app.loop_connections import LoopConnections
from app.worker.history import Histories
from app.worker.store.claiming import Claiming
from app.worker.store.clock import Clock, utc_now
from app.worker.store.driver import make_driver
from app.worker.store.liveness import LivenessToken
from app.worker.store.steps import StepWrites
from app.worker.store.turn_reads import TurnReads


class TurnStore(Claiming, StepWrites, TurnReads):
    """The worker's database port for running turns. Synchronous: the turn calls it from the
    database threads, and its steps' writes through `loop_bridge.run` on the event loop, where
    the statement is awaited (`steps_on_loop`, `CHATWORKER_DATABASE_IO`)."""

    def __init__(
        self,
        engine: Engine,
        clock: Clock = utc_now,
        histories: Histories | None = None,
        liveness: LivenessToken | None = None,
    ) -> None:
        self.engine = engine
        self.reads = autocommit_reads(engine)  # (reads that leave prepared statements be)
        self.clock = clock
        self.histories = histories  # the transcripts this process kept between turns
        self.liveness = liveness  # this process's token: every claim records it on the lease
        self._driver = make_driver(engine)

    @property
    def steps_on_loop(self) -> bool:
        """Whether a step's write, run by `loop_bridge.run`, awaits its statement on the event
        loop (PostgreSQL through psycopg) instead of blocking it (call it on a thread then)."""
        return self._driver.on_loop

    def close(self) -> None:
        """Close the connections the steps used on the event loop (the engine keeps its own)."""
        self._driver.close()

    @property
    def loop_connections(self) -> LoopConnections | None:
        """The connections the steps use on the event loop (None: the driver has none)."""
        return getattr(self._driver, "loop_connections", None)


__all__ = ["TurnStore"]
