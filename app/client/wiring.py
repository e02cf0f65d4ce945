"""What a client is connected to (the settings, the database's engines, the queue, the live
channel), shared by a `ChatClient` and the `AsyncChatClient`s made over it, and what follows a
command's commit: the followers woken, a cancel announced, a worker rung (each blocking, best
effort: the database already holds it all).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace

from sqlalchemy import Engine

from app.client.doorbell import QUEUED_BEHIND, Enqueue, QueueRinger, default_enqueue, ring
from app.client.store.loop_store import LoopStore
from app.client.store.new_turns import NewTurn
from app.client.store.outage import unavailable_as_ours
from app.client.views import Submitted, TurnView
from app.config import Settings, get_settings
from app.db import autocommit_reads, make_engine
from app.live import CommitNotice, LiveChannel, open_channel

log = logging.getLogger(__name__)


class Wiring:
    """`enqueue` rings a worker for a conversation id. By default: the process's queue
    (`app.queue`) when the settings have a `REDIS_URL`, and nothing at all without one (the turn
    then waits for a worker's recovery sweep; `Submitted.detail` says so)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        engine: Engine | None = None,
        enqueue: Enqueue | None = None,
        live: LiveChannel | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self.engine = unavailable_as_ours(engine or make_engine(self.settings.database_url))
        self.reads = autocommit_reads(self.engine)  # (reads that leave prepared statements be)
        # The hot statements, awaited on an event loop (PostgreSQL; None elsewhere).
        self.loop_store = LoopStore.for_engine(self.engine)
        self.enqueue = enqueue if enqueue is not None else default_enqueue(self.settings)
        self._live = live
        self._live_warned = False

    @property
    def live(self) -> LiveChannel:
        """The live channel (Redis at `REDIS_URL`, else this process's hub), opened on first use."""
        if self._live is None:
            self._live = open_channel(self.settings.redis_url)
        return self._live

    @property
    def limit(self) -> int:
        """The longest text a message, an answer or instructions may be."""
        return self.settings.max_message_chars

    @property
    def owner_limit(self) -> int | None:
        """The owner limit a submit or a retry refuses past (policy `reject`), else None."""
        if self.settings.owner_limit_policy != "reject":
            return None
        return self.settings.owner_max_running_turns

    def notify(self, conversation_id: uuid.UUID) -> None:
        """Wake the conversation's followers: its log has grown (best effort: they also poll)."""
        self._best_effort(lambda: self.live.publish([(conversation_id, CommitNotice(0))]))

    def announce_cancel(self, conversation_id: uuid.UUID) -> None:
        """Tell the worker holding the turn now; if it never hears, its next step or heartbeat
        reads the committed request."""
        self._best_effort(lambda: self.live.announce_cancel(conversation_id))

    def resume(self, conversation_id: uuid.UUID) -> None:
        """Ring a worker for a turn that goes on (its answers are in, a cancel is to finish)."""
        if self.enqueue is not None:
            ring(self.enqueue, Submitted(conversation_id, None, enqueued=False))

    def submitted(self, conversation_id: uuid.UUID, turn: NewTurn, view: TurnView) -> Submitted:
        """After a submit's commit: the followers woken, a cancel announced, a worker rung."""
        if not turn.repeated:
            self.notify(conversation_id)
        if turn.announce:
            self.announce_cancel(conversation_id)
        return self.ring(conversation_id, turn, view)

    def ring(self, conversation_id: uuid.UUID, turn: NewTurn, view: TurnView) -> Submitted:
        submitted = Submitted(
            conversation_id,
            turn.message_seq,
            enqueued=False,
            turn_id=turn.id,
            turn_status=turn.status,
            repeated=turn.repeated,
            turn=view,
        )
        if turn.waits:
            return replace(submitted, detail=QUEUED_BEHIND)
        if turn.status != "queued" and not turn.resumes:
            return submitted  # a repeated submit of a turn that has started already
        return ring(self.enqueue, submitted)

    def _best_effort(self, send: Callable[[], None]) -> None:
        try:
            send()
        except Exception as exc:  # the live channel is a shortcut, never the source of truth
            if not self._live_warned:
                log.warning("live channel unavailable (%s); readers fall back to polling", exc)
            self._live_warned = True

    def close(self) -> None:
        if isinstance(self.enqueue, QueueRinger):
            self.enqueue.close()
        if self._live is not None:
            self._live.close()
        self.engine.dispose()


__all__ = ["Wiring"]
