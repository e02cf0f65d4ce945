"""What a web app calls: create a conversation, submit a message as a turn, follow its events
(committed and live), cancel a turn, poll it, retry a failed turn.

`ChatClient` is synchronous (Django, Flask); `AsyncChatClient` is the same for asyncio (FastAPI,
Starlette) and runs each call in a thread. Each call checks its input (`checks`), runs its SQL
(`commands`, `reads`) in one transaction, and rings the queue (`doorbell`). A bad request raises an
`InvalidRequest` subclass and writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from app.client import intake
from app.client.admission import REJECT
from app.client.checks import (
    check_budget,
    check_budget_subject,
    check_busy_policy,
    check_client_tools,
    check_context,
    check_cursor,
    check_decisions,
    check_idempotency_key,
    check_model,
    check_outputs,
    check_page_size,
    check_text,
    check_tool_choice,
    check_tool_names,
    check_tools_offered,
    parse_conversation_id,
    parse_turn_id,
    parse_webhook_id,
)
from app.client.doorbell import WAITING, Enqueue, QueueRinger, default_enqueue, ring
from app.client.following import REST, TURN_END, UNTIL, AsyncFollowing, Following
from app.client.keys import check_owner_name
from app.client.merge import Cursor
from app.client.store import api_keys, budgets, reads, turns, webhooks
from app.client.store.answers import answer_actions
from app.client.store.cancel import CancelOutcome, cancel_turn
from app.client.store.turns import NewTurn
from app.client.views import (
    ApiKeyView,
    BudgetView,
    ConversationPage,
    ConversationView,
    Decision,
    DeliveryView,
    EventPage,
    EventView,
    FinishedTurn,
    Submitted,
    ToolInfo,
    TurnView,
    WebhookView,
)
from app.config import Settings, get_settings
from app.db import make_engine
from app.errors import InvalidRequest, KeyNotFound, WebhookNotFound
from app.live import CommitNotice, LiveChannel, open_channel
from app.telemetry import tracing

log = logging.getLogger(__name__)


class ChatClient:
    """The synchronous web-app API over the database and the queue.

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
        self.settings = settings or get_settings()
        self.engine = engine or make_engine(self.settings.database_url)
        self._enqueue = enqueue if enqueue is not None else default_enqueue(self.settings)
        self._live = live
        self._live_warned = False

    @property
    def live(self) -> LiveChannel:
        """The live channel (Redis at `REDIS_URL`, else this process's hub), opened on first use."""
        if self._live is None:
            self._live = open_channel(self.settings.redis_url)
        return self._live

    def create_conversation(
        self,
        *,
        model: str | None = None,
        instructions: str | None = None,
        tools: Sequence[str] = (),
        tool_choice: str = "auto",
        context: dict[str, Any] | None = None,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        client_tools: Sequence[dict[str, Any]] | None = None,
        clarify: bool = True,
    ) -> uuid.UUID:
        """A new idle conversation; `tools` are names from `list_tools()`.

        `owner`: who may see it through the HTTP API (None: no one in particular). A caller may
        choose its id: a second create with the same id and the same fields returns it again
        (see `create_or_get`), with other fields it is `ConversationConflict`.

        `client_tools`: tools the web app's client executes ({"name", "description",
        "parameters": a JSON Schema}); a call of one pauses the turn (`requires_action`) until
        the client posts its output (`submit_action_outputs`). `clarify`: the model may ask the
        user a question (`agent_clarify`) when it has tools; the next message answers it."""
        return self.create_or_get(
            model=model,
            instructions=instructions,
            tools=tools,
            tool_choice=tool_choice,
            context=context,
            owner=owner,
            conversation_id=conversation_id,
            client_tools=client_tools,
            clarify=clarify,
        )[0]

    def create_or_get(
        self,
        *,
        model: str | None = None,
        instructions: str | None = None,
        tools: Sequence[str] = (),
        tool_choice: str = "auto",
        context: dict[str, Any] | None = None,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        client_tools: Sequence[dict[str, Any]] | None = None,
        clarify: bool = True,
    ) -> tuple[uuid.UUID, bool]:
        """`create_conversation`, and whether it was created (False: it existed, same fields)."""
        model = check_model(self.settings.model if model is None else model)
        check_tool_choice(tool_choice)
        names = check_tool_names(tools, tool_choice)
        declared = check_client_tools(client_tools, names)
        if not isinstance(clarify, bool):
            raise InvalidRequest(f"clarify must be true or false, not {clarify!r}")
        if instructions is not None:
            check_text(instructions, "instructions", self._limit, allow_empty=True)
        check_context(context)
        if owner is not None:
            check_owner_name(owner)
        chosen = uuid.uuid4() if conversation_id is None else parse_conversation_id(conversation_id)
        setup: dict[str, Any] = {
            "owner": owner,
            "model": model,
            "instructions": instructions,
            "tools": names,
            "tool_choice": tool_choice,
            "context": context,
            "client_tools": declared,
            "clarify": clarify,
        }
        try:
            return chosen, self._insert(chosen, setup)
        except IntegrityError:
            if conversation_id is None:
                raise
            # Two creates of one chosen id at once: the other one won; compare with it.
            return chosen, self._insert(chosen, setup)

    def _insert(self, conversation_id: uuid.UUID, setup: dict[str, Any]) -> bool:
        with self.engine.begin() as connection:
            if setup["tools"]:
                check_tools_offered(setup["tools"], reads.catalogue_names(connection))
            return turns.insert_conversation(connection, conversation_id, **setup)

    def list_conversations(
        self, *, owner: str | None = None, limit: int = 20, before: uuid.UUID | str | None = None
    ) -> ConversationPage:
        """The owner's conversations (everyone's for None), newest first, without messages;
        `before` is the previous page's `next_before`."""
        limit = check_page_size(limit)
        mark = None if before is None else parse_conversation_id(before)
        with self.engine.connect() as connection:
            found = reads.list_conversations(connection, owner, limit + 1, mark)
        more = len(found) > limit
        return ConversationPage(found[:limit], found[limit - 1].id if more else None)

    def delete_conversation(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> None:
        """Delete the conversation with its turns, messages and events; `ConversationBusy` while
        a turn runs or waits (cancel first), `ConversationNotFound`."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.engine.begin() as connection:
            reads.check_owner(connection, conversation_id, owner)
            turns.delete_conversation(connection, conversation_id)

    def submit_message(
        self,
        conversation_id: uuid.UUID | str,
        text: str,
        *,
        idempotency_key: str | None = None,
        on_busy: str = REJECT,
        owner: str | None = None,
    ) -> Submitted:
        """Store the user's message as a new turn and start it.

        While a turn runs, `on_busy` decides: `reject` (`ConversationBusy`, naming the running
        turn), `enqueue` (the turn waits, its message outside the transcript, and starts when
        the running one ends) or `interrupt` (the running turn is cancelled, and any other
        waiting turn; this one starts as soon as it has ended). The same `idempotency_key` with
        the same text returns the first submit's turn (`repeated`) and writes nothing; with
        another text, `IdempotencyKeyReused`.
        """
        conversation_id = parse_conversation_id(conversation_id)
        check_text(text, "message", self._limit)
        key = check_idempotency_key(idempotency_key)
        policy = check_busy_policy(on_busy)
        with (
            tracing.submit_span("chat submit") as span,
            self.engine.begin() as connection,
        ):
            reads.check_owner(connection, conversation_id, owner)
            turn = intake.submit(
                connection,
                conversation_id,
                text,
                idempotency_key=key,
                on_busy=policy,
                owner_limit=self._owner_limit,
            )
            _describe(span, conversation_id, turn.id)
        if not turn.repeated:
            self._notify(conversation_id)
        if turn.announce:
            self._announce_cancel(conversation_id)
        return self._ring(conversation_id, turn)

    def retry_conversation(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> Submitted:
        """A new turn that continues a failed one from its transcript (pending calls first)."""
        conversation_id = parse_conversation_id(conversation_id)
        with tracing.submit_span("chat retry") as span, self.engine.begin() as connection:
            reads.check_owner(connection, conversation_id, owner)
            turn = intake.retry(connection, conversation_id, owner_limit=self._owner_limit)
            _describe(span, conversation_id, turn.id)
        self._notify(conversation_id)
        return self._ring(conversation_id, turn)

    def answer_actions(
        self,
        turn_id: uuid.UUID | str,
        outputs: Mapping[str, str] | None = None,
        *,
        approvals: Mapping[str, bool | Decision] | None = None,
        owner: str | None = None,
    ) -> TurnView:
        """Answer what a turn waits for (`requires_action`), by call id: a client tool's output
        or the user's answer to the model's question (`outputs`), a call's approval (`approvals`:
        True runs it, False or `Decision(False, reason)` tells the model it was denied). When
        none is left waiting, the turn goes on (a worker is rung). An answer given before is
        skipped (a retry is harmless); `ActionNotFound` for a call the turn never waited on,
        `ActionAlreadyAnswered` for one answered otherwise (or cancelled); a refused answer
        refuses the whole request. The turn as it is after the answers."""
        turn_id = parse_turn_id(turn_id)
        checked = check_outputs(outputs or {}, self._limit, allow_empty=bool(approvals))
        decisions = check_decisions(approvals or {}, self._limit, allow_empty=bool(checked))
        with self.engine.begin() as connection:
            conversation_id = reads.conversation_of_turn(connection, turn_id, owner)
            answered = answer_actions(
                connection,
                conversation_id,
                turn_id,
                checked,
                decisions=decisions,
                now=datetime.now(UTC),
            )
            turn = reads.read_turn(connection, turn_id)
        if answered.written:
            self._notify(conversation_id)
        if answered.resumes and self._enqueue is not None:
            ring(self._enqueue, Submitted(conversation_id, None, enqueued=False))
        return turn

    def cancel(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> TurnView | None:
        """Stop the conversation's current turn; the turn as it is after the request (None when
        the conversation never had one).

        With a worker on it, the request is committed and the worker is told at once: the turn
        is returned `running` with `cancel_requested_at` set, and ends `cancelled` within
        moments (follow the events for `turn.cancelled`). Queued, or left by a dead worker, it
        is `cancelled` here. A finished turn comes back unchanged; asking twice is harmless."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.engine.connect() as connection:
            reads.check_owner(connection, conversation_id, owner)
        return self._cancel(conversation_id, None)

    def cancel_turn(self, turn_id: uuid.UUID | str, *, owner: str | None = None) -> TurnView:
        """`cancel` for one turn by id: the running one, or one waiting behind it (its request
        is honoured when its time comes, before any model call); `TurnNotFound`."""
        turn_id = parse_turn_id(turn_id)
        with self.engine.connect() as connection:
            conversation_id = reads.conversation_of_turn(connection, turn_id, owner)
        cancelled = self._cancel(conversation_id, turn_id)
        assert cancelled is not None
        return cancelled

    def follow(
        self,
        conversation_id: uuid.UUID | str,
        after: Cursor | int | str = 0,
        *,
        until: str | None = REST,
        turn_id: uuid.UUID | str | None = None,
        timeout: float | None = None,
        poll_interval: float = 1.0,
        log_interval: float | None = None,
        owner: str | None = None,
    ) -> Following:
        """The conversation's committed events after the cursor `after`, then live as they
        happen, with the reply's deltas in between: iterate it (it blocks), resume from its
        `cursor` after any item. Stops when the conversation rests (`until='rest'`), after the
        followed turn's terminal event (`'turn_end'`: `turn_id`, or the next turn to end), or
        never (None). The channel is read `poll_interval` seconds at a time, and, while it is
        quiet, the committed log every `log_interval` (default: `poll_interval`) in case a
        commit notice was lost. `InvalidCursor` for a cursor that is malformed, negative or
        beyond the last event; `ConversationNotFound`."""
        conversation_id = parse_conversation_id(conversation_id)
        cursor = Cursor.parse(after)
        if until not in UNTIL:
            raise InvalidRequest(f"until must be 'rest', 'turn_end' or None, not {until!r}")
        if not poll_interval > 0:
            raise InvalidRequest(f"poll_interval must be > 0 seconds, not {poll_interval!r}")
        if log_interval is not None and not log_interval >= poll_interval:
            raise InvalidRequest(
                f"log_interval must be >= poll_interval ({poll_interval}), not {log_interval!r}"
            )
        # Bad ids and cursors, now.
        self.events(conversation_id, after=cursor.after, limit=1, owner=owner)
        return Following(
            self,
            conversation_id,
            cursor,
            until=until,
            turn_id=None if turn_id is None else parse_turn_id(turn_id),
            timeout=timeout,
            poll_interval=poll_interval,
            log_interval=log_interval,
        )

    def get_turn(self, turn_id: uuid.UUID | str, *, owner: str | None = None) -> TurnView:
        """A turn's status, error, usage and times; `TurnNotFound`."""
        turn_id = parse_turn_id(turn_id)
        with self.engine.connect() as connection:
            reads.conversation_of_turn(connection, turn_id, owner)
            return reads.read_turn(connection, turn_id)

    def wait_for_turn(
        self,
        turn_id: uuid.UUID | str,
        timeout: float,
        *,
        log_interval: float | None = None,
        owner: str | None = None,
    ) -> FinishedTurn:
        """The turn once it has ended (or after `timeout` seconds, still going) with the
        messages it committed (`log_interval` as `follow`'s); `TurnNotFound`."""
        turn = self.get_turn(turn_id, owner=owner)
        if not turn.is_finished:
            following = self.follow(
                turn.conversation_id,
                0,
                until=TURN_END,
                turn_id=turn.id,
                timeout=timeout,
                log_interval=log_interval,
            )
            with contextlib.suppress(TimeoutError):
                for _ in following:
                    pass
        with self.engine.connect() as connection:
            turn = reads.read_turn(connection, turn.id)
            return FinishedTurn(turn, reads.turn_messages(connection, turn.id), turn.is_finished)

    def current_turn(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> TurnView | None:
        """The conversation's current (or last) turn; None before the first message."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.engine.connect() as connection:
            reads.check_owner(connection, conversation_id, owner)
            turn = reads.current_turn(connection, conversation_id)
            if turn is None:
                turns.status_of(connection, conversation_id)  # ConversationNotFound
            return turn

    def events(
        self,
        conversation_id: uuid.UUID | str,
        after: int = 0,
        limit: int = 100,
        *,
        owner: str | None = None,
    ) -> EventPage:
        """Committed events with `seq > after` (at most `limit`), oldest first; `InvalidCursor`
        for a negative cursor or one beyond the last event."""
        conversation_id = parse_conversation_id(conversation_id)
        after, limit = check_cursor(after, limit)
        with self.engine.connect() as connection:
            reads.check_owner(connection, conversation_id, owner)
            return reads.read_events(connection, conversation_id, after, limit)

    def wait_for_events(
        self,
        conversation_id: uuid.UUID | str,
        after: int = 0,
        limit: int = 100,
        *,
        wait: float = 0.0,
        log_interval: float | None = None,
        owner: str | None = None,
    ) -> EventPage:
        """`events`, but when none is committed after `after` yet, wait up to `wait` seconds
        for the first (a long poll; `log_interval` as `follow`'s); the page may still be
        empty."""
        page = self.events(conversation_id, after, limit, owner=owner)
        if page.events or wait <= 0:
            return page
        poll = min(1.0, wait)
        following = self.follow(
            conversation_id,
            after,
            until=None,
            timeout=wait,
            poll_interval=poll,
            log_interval=None if log_interval is None else max(log_interval, poll),
        )
        try:
            if not any(isinstance(item, EventView) for item in following):
                return page  # pragma: no cover (until=None: it ends by timing out)
        except TimeoutError:
            return page
        finally:
            following.close()
        return self.events(conversation_id, after, limit, owner=owner)

    def get_conversation(
        self,
        conversation_id: uuid.UUID | str,
        after_seq: int | None = None,
        *,
        owner: str | None = None,
    ) -> ConversationView:
        """Status, error, setup, counters and the messages with `seq > after_seq` (all if None)."""
        conversation_id = parse_conversation_id(conversation_id)
        with self.engine.connect() as connection:
            reads.check_owner(connection, conversation_id, owner)
            return reads.read_conversation(connection, conversation_id, after_seq)

    def list_tools(self) -> list[ToolInfo]:
        """The tools the workers' MCP servers offer (as the workers last published them)."""
        with self.engine.connect() as connection:
            return reads.read_catalogue(connection)

    def create_key(self, owner: str, name: str = "") -> tuple[ApiKeyView, str]:
        """A new API key for `owner`: its listing, and its text, shown this once."""
        with self.engine.begin() as connection:
            return api_keys.create_key(connection, owner, name)

    def list_keys(self, owner: str | None = None) -> list[ApiKeyView]:
        with self.engine.connect() as connection:
            return api_keys.list_keys(connection, owner)

    def revoke_key(self, key_id: uuid.UUID | str) -> ApiKeyView:
        """Revoke a key (from its next request on); harmless twice; `KeyNotFound`."""
        try:
            parsed = key_id if isinstance(key_id, uuid.UUID) else uuid.UUID(str(key_id))
        except ValueError:
            raise KeyNotFound(f"no API key {key_id!r} (a key id is a UUID)") from None
        with self.engine.begin() as connection:
            return api_keys.revoke_key(connection, parsed)

    def set_budget(
        self,
        *,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        period: str = "total",
        max_tokens: int | None = None,
        max_cost_usd: float | str | None = None,
    ) -> None:
        """Cap what an owner or one conversation may spend (`period`: `total` or `day`, UTC),
        in tokens, US dollars or both; replaces the subject's budget of that period. Past it,
        a turn fails before its next model call and a new message is `BudgetExceeded`."""
        parsed = None if conversation_id is None else parse_conversation_id(conversation_id)
        tokens, cost = check_budget(owner, parsed, period, max_tokens, max_cost_usd)
        with self.engine.begin() as connection:
            budgets.set_budget(
                connection,
                owner=owner,
                conversation_id=parsed,
                period=period,
                max_tokens=tokens,
                max_cost_usd=cost,
            )

    def remove_budget(
        self,
        *,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        period: str = "total",
    ) -> bool:
        """Remove a budget; whether there was one."""
        parsed = None if conversation_id is None else parse_conversation_id(conversation_id)
        check_budget_subject(owner, parsed, period)
        with self.engine.begin() as connection:
            return budgets.remove_budget(
                connection, owner=owner, conversation_id=parsed, period=period
            )

    def list_budgets(self, owner: str | None = None) -> list[BudgetView]:
        """Every budget, or an owner's (its own and its conversations')."""
        with self.engine.connect() as connection:
            return budgets.list_budgets(connection, owner)

    def add_webhook(
        self,
        url: str,
        *,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        event_types: Sequence[str] | None = None,
        description: str | None = None,
    ) -> WebhookView:
        """A webhook for the owner's conversations (or, with `conversation_id`, that one's):
        `turn.completed`, `turn.failed`, `turn.cancelled` and `turn.requires_action` (or the
        `event_types` given) are POSTed to `url`, signed by the Standard Webhooks scheme with
        the returned view's `secret`, which is not shown again."""
        parsed = None if conversation_id is None else parse_conversation_id(conversation_id)
        with self.engine.begin() as connection:
            return webhooks.add_webhook(
                connection,
                url=url,
                owner=owner,
                conversation_id=parsed,
                event_types=event_types,
                description=description,
            )

    def list_webhooks(self, *, owner: str | None = None) -> list[WebhookView]:
        with self.engine.connect() as connection:
            return webhooks.list_webhooks(connection, owner)

    def get_webhook(self, webhook_id: uuid.UUID | str, *, owner: str | None = None) -> WebhookView:
        with self.engine.connect() as connection:
            return webhooks.get_webhook(connection, parse_webhook_id(webhook_id), owner=owner)

    def remove_webhook(self, webhook_id: uuid.UUID | str, *, owner: str | None = None) -> None:
        """The webhook and its deliveries, pending ones included; `WebhookNotFound`."""
        with self.engine.begin() as connection:
            webhooks.remove_webhook(connection, parse_webhook_id(webhook_id), owner=owner)

    def list_deliveries(
        self,
        webhook_id: uuid.UUID | str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int = 50,
    ) -> list[DeliveryView]:
        """The webhook's deliveries, newest first (`status='failed'`: the given-up ones)."""
        with self.engine.connect() as connection:
            return webhooks.list_deliveries(
                connection, parse_webhook_id(webhook_id), owner=owner, status=status, limit=limit
            )

    def redeliver(
        self, webhook_id: uuid.UUID | str, delivery_id: int, *, owner: str | None = None
    ) -> DeliveryView:
        """Send a given-up delivery again, from now, with a fresh schedule."""
        if isinstance(delivery_id, bool) or not isinstance(delivery_id, int):
            raise WebhookNotFound(f"no delivery {delivery_id!r} (a delivery id is a number)")
        with self.engine.begin() as connection:
            return webhooks.redeliver(
                connection, parse_webhook_id(webhook_id), delivery_id, owner=owner
            )

    def owner_of_key(self, text: str) -> str:
        """The owner of a presented API key; `keys.KeyRefused` when it is not a live key."""
        with self.engine.connect() as connection:
            return api_keys.owner_of_key(connection, text)

    def check_ready(self) -> dict[str, str]:
        """'ok' or the error, for the database and the live channel (Redis) each."""
        found: dict[str, str] = {}
        try:
            with self.engine.connect() as connection:
                reads.ping(connection)
            found["database"] = "ok"
        except Exception as exc:
            found["database"] = type(exc).__name__
        try:
            self.live.ping()
            found["live"] = "ok"
        except Exception as exc:
            found["live"] = type(exc).__name__
        return found

    def close(self) -> None:
        if isinstance(self._enqueue, QueueRinger):
            self._enqueue.close()
        if self._live is not None:
            self._live.close()
        self.engine.dispose()

    @property
    def _limit(self) -> int:
        return self.settings.max_message_chars

    def _cancel(self, conversation_id: uuid.UUID, turn_id: uuid.UUID | None) -> TurnView | None:
        with self.engine.begin() as connection:
            outcome: CancelOutcome = cancel_turn(
                connection, conversation_id, turn_id, now=datetime.now(UTC)
            )
            if outcome.turn_id is None:
                return None
            # As the command left it: the worker told next may end it a moment later.
            turn = reads.read_turn(connection, outcome.turn_id)
        self._notify(conversation_id)
        if outcome.announce:
            self._announce_cancel(conversation_id)
        if outcome.ring and self._enqueue is not None:
            ring(self._enqueue, Submitted(conversation_id, None, enqueued=False))
        return turn

    def _notify(self, conversation_id: uuid.UUID) -> None:
        """Wake the conversation's followers: its log has grown (best effort: they also poll)."""
        self._best_effort(lambda: self.live.publish([(conversation_id, CommitNotice(0))]))

    def _announce_cancel(self, conversation_id: uuid.UUID) -> None:
        """Tell the worker holding the turn now; if it never hears, its next step or heartbeat
        reads the committed request."""
        self._best_effort(lambda: self.live.announce_cancel(conversation_id))

    def _best_effort(self, send: Any) -> None:
        try:
            send()
        except Exception as exc:  # the live channel is a shortcut, never the source of truth
            if not self._live_warned:
                log.warning("live channel unavailable (%s); readers fall back to polling", exc)
            self._live_warned = True

    @property
    def _owner_limit(self) -> int | None:
        """The owner limit a submit or a retry refuses past (policy `reject`), else None."""
        if self.settings.owner_limit_policy != "reject":
            return None
        return self.settings.owner_max_running_turns

    def _ring(self, conversation_id: uuid.UUID, turn: NewTurn) -> Submitted:
        submitted = Submitted(
            conversation_id,
            turn.message_seq,
            enqueued=False,
            turn_id=turn.id,
            turn_status=turn.status,
            repeated=turn.repeated,
        )
        if turn.waits:
            return replace(submitted, detail=WAITING)
        if turn.status != "queued" and not turn.resumes:
            return submitted  # a repeated submit of a turn that has started already
        return ring(self._enqueue, submitted)


def _describe(span: Any, conversation_id: uuid.UUID, turn_id: uuid.UUID) -> None:
    if span.is_recording():
        span.set_attribute("chatworker.conversation_id", str(conversation_id))
        span.set_attribute("chatworker.turn_id", str(turn_id))


class AsyncChatClient:
    """`ChatClient` for asyncio apps: every call runs in a worker thread, never on the loop.
    Each method takes the same arguments as `ChatClient`'s."""

    def __init__(self, client: ChatClient | None = None, **options: Any) -> None:
        self.sync = client or ChatClient(**options)

    async def create_conversation(self, **options: Any) -> uuid.UUID:
        return await asyncio.to_thread(lambda: self.sync.create_conversation(**options))

    async def submit_message(
        self, conversation_id: uuid.UUID | str, text: str, **options: Any
    ) -> Submitted:
        return await asyncio.to_thread(
            lambda: self.sync.submit_message(conversation_id, text, **options)
        )

    async def answer_actions(
        self, turn_id: uuid.UUID | str, outputs: Mapping[str, str] | None = None, **options: Any
    ) -> TurnView:
        return await asyncio.to_thread(
            lambda: self.sync.answer_actions(turn_id, outputs, **options)
        )

    async def get_turn(self, turn_id: uuid.UUID | str, **options: Any) -> TurnView:
        return await asyncio.to_thread(lambda: self.sync.get_turn(turn_id, **options))

    async def current_turn(
        self, conversation_id: uuid.UUID | str, **options: Any
    ) -> TurnView | None:
        return await asyncio.to_thread(lambda: self.sync.current_turn(conversation_id, **options))

    async def events(
        self, conversation_id: uuid.UUID | str, after: int = 0, limit: int = 100, **options: Any
    ) -> EventPage:
        return await asyncio.to_thread(
            lambda: self.sync.events(conversation_id, after, limit, **options)
        )

    async def retry_conversation(
        self, conversation_id: uuid.UUID | str, **options: Any
    ) -> Submitted:
        return await asyncio.to_thread(
            lambda: self.sync.retry_conversation(conversation_id, **options)
        )

    async def cancel(self, conversation_id: uuid.UUID | str, **options: Any) -> TurnView | None:
        return await asyncio.to_thread(lambda: self.sync.cancel(conversation_id, **options))

    async def cancel_turn(self, turn_id: uuid.UUID | str, **options: Any) -> TurnView:
        return await asyncio.to_thread(lambda: self.sync.cancel_turn(turn_id, **options))

    async def follow(
        self, conversation_id: uuid.UUID | str, after: Cursor | int | str = 0, **options: Any
    ) -> AsyncFollowing:
        following = await asyncio.to_thread(
            lambda: self.sync.follow(conversation_id, after, **options)
        )
        return AsyncFollowing(following)

    async def get_conversation(
        self, conversation_id: uuid.UUID | str, after_seq: int | None = None, **options: Any
    ) -> ConversationView:
        return await asyncio.to_thread(
            lambda: self.sync.get_conversation(conversation_id, after_seq, **options)
        )

    async def list_conversations(self, **options: Any) -> ConversationPage:
        return await asyncio.to_thread(lambda: self.sync.list_conversations(**options))

    async def delete_conversation(self, conversation_id: uuid.UUID | str, **options: Any) -> None:
        await asyncio.to_thread(lambda: self.sync.delete_conversation(conversation_id, **options))

    async def list_tools(self) -> list[ToolInfo]:
        return await asyncio.to_thread(self.sync.list_tools)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)
