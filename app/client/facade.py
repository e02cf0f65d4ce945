"""`ChatClient`: what a synchronous web app (Django, Flask, a script) calls, each method the
blocking twin of its `AsyncChatClient` method (`inline.blocking`: the same signature and
documentation, by construction, and one implementation).

A call runs in the calling thread, as the asynchronous client would run it in its `offload`,
with no event loop and no thread hop (`inline`), so it costs what the SQL costs; in a thread
that runs an event loop it blocks that loop like any blocking call (use `AsyncChatClient`
there). `follow` returns a blocking iterator (`Following`).
"""

from __future__ import annotations

from sqlalchemy import Engine

from app.client.admin import AdminClient
from app.client.asynchronous import AsyncChatClient as Async
from app.client.doorbell import Enqueue
from app.client.following import AsyncFollowing, Following
from app.client.inline import blocking, inline
from app.client.store.loop_store import LoopStore
from app.config import Settings
from app.live import LiveChannel


def _blocking_iterator(following: AsyncFollowing) -> Following:
    return following.sync


class ChatClient:
    """The web-app API over the database and the queue, blocking: `AsyncChatClient`'s calls.

    `enqueue` rings a worker for a conversation id. By default: the process's queue (`app.queue`)
    when the settings have a `REDIS_URL`, and nothing at all without one (the turn then waits for
    a worker's recovery sweep; `Submitted.detail` says so).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        engine: Engine | None = None,
        enqueue: Enqueue | None = None,
        live: LiveChannel | None = None,
    ) -> None:
        self._core = Async(settings, engine=engine, enqueue=enqueue, live=live, offload=inline)
        self._admin: AdminClient | None = None

    @property
    def core(self) -> Async:
        """The asynchronous client these calls drive, in this thread (`offload=inline`);
        `AsyncChatClient(client)` is one for an event loop over the same engine and channel."""
        return self._core

    @property
    def settings(self) -> Settings:
        return self._core.settings

    @property
    def engine(self) -> Engine:
        return self._core.engine

    @property
    def loop_store(self) -> LoopStore | None:
        return self._core.loop_store

    @property
    def live(self) -> LiveChannel:
        """The live channel (Redis at `REDIS_URL`, else this process's hub), opened on first use."""
        return self._core.live

    @property
    def admin(self) -> AdminClient:
        """The operator's calls (API keys, budgets, webhooks, the tool catalogue, readiness) over
        this client's engine and live channel."""
        if self._admin is None:
            wiring = self._core.wiring
            self._admin = AdminClient(
                wiring.settings, engine=wiring.engine, live=lambda: wiring.live
            )
        return self._admin

    create_conversation = blocking(Async.create_conversation)
    create_or_get = blocking(Async.create_or_get)
    delete_conversation = blocking(Async.delete_conversation)
    switch_branch = blocking(Async.switch_branch)
    fork_conversation = blocking(Async.fork_conversation)
    import_history = blocking(Async.import_history)
    check_files = blocking(Async.check_files)
    get_file = blocking(Async.get_file)
    submit_message = blocking(Async.submit_message)
    edit_message = blocking(Async.edit_message)
    regenerate = blocking(Async.regenerate)
    retry_conversation = blocking(Async.retry_conversation)
    answer_actions = blocking(Async.answer_actions)
    cancel = blocking(Async.cancel)
    cancel_turn = blocking(Async.cancel_turn)
    close = blocking(Async.close)

    list_conversations = blocking(Async.list_conversations)
    follow = blocking(Async.follow, _blocking_iterator)
    get_turn = blocking(Async.get_turn)
    wait_for_turn = blocking(Async.wait_for_turn)
    turn_record = blocking(Async.turn_record)
    current_turn = blocking(Async.current_turn)
    turn_of_call = blocking(Async.turn_of_call)
    turn_keyed = blocking(Async.turn_keyed)
    events = blocking(Async.events)
    wait_for_events = blocking(Async.wait_for_events)
    get_conversation = blocking(Async.get_conversation)


__all__ = ["ChatClient"]
