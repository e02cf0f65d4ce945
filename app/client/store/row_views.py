"""The web side's rows made views: a conversation, a turn, a message, as every read returns them
(the times made aware: SQLite hands back naive ones, in UTC)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from app.client.views import ActionView, ConversationView, MessageView, TurnView
from app.files.media import shown


def conversation_view(row: Any, message_views: list[MessageView]) -> ConversationView:
    return ConversationView(
        id=row.id,
        owner=row.owner,
        status=row.status,
        error=row.error,
        model=row.model,
        instructions=row.instructions,
        tools=list(row.allowed_tools or []),
        tool_choice=row.tool_choice,
        forced_tool=row.forced_tool,
        context=row.context,
        client_tools=list(row.client_tools or []),
        approval_tools=list(row.approval_tools or []),
        clarify=bool(row.clarify),
        context_policy=row.context_policy,
        output_schema=row.output_schema,
        fallback_models=list(row.fallback_models or []),
        iterations=row.iterations,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        cost_usd=_dollars(row.cost_usd),
        cached_tokens=row.cached_tokens,
        turn_number=row.turn_number,
        created_at=aware(row.created_at),
        updated_at=aware(row.updated_at),
        messages=message_views,
        forked_from=row.forked_from,
        forked_at_seq=row.forked_at_seq,
    )


def _dollars(value: Decimal | float | None) -> float | None:
    """A stored cost as a number; None stays None (unknown, not zero)."""
    return None if value is None else float(value)


def turn_of_row(row: Any) -> TurnView:
    return TurnView(
        id=row["id"],
        conversation_id=row["conversation_id"],
        number=row["number"],
        status=row["status"],
        kind=row["kind"],
        message_seq=row["message_seq"],
        idempotency_key=row["idempotency_key"],
        error=row["error"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        cached_tokens=row["cached_tokens"],
        cost_usd=_dollars(row["cost_usd"]),
        created_at=aware(row["created_at"]),
        started_at=_maybe_aware(row["started_at"]),
        finished_at=_maybe_aware(row["finished_at"]),
        cancel_requested_at=_maybe_aware(row["cancel_requested_at"]),
        actions=tuple(
            ActionView(
                a["call_id"],
                a["kind"],
                a["name"],
                dict(a.get("arguments") or {}),
                decision=a.get("decision"),
                reason=a.get("reason"),
            )
            for a in row.get("actions") or ()
        ),
        metadata=row.get("caller_metadata"),
        output_schema=row.get("output_schema"),
        model=row.get("model"),
        echo=row.get("echo"),
    )


def _maybe_aware(moment: datetime | None) -> datetime | None:
    return None if moment is None else aware(moment)


def message_of_row(row: Any) -> MessageView:
    row = row if isinstance(row, dict) else row._mapping
    return MessageView(
        seq=row["seq"],
        role=row["role"],
        content=row["content"],
        tool_calls=list(row["tool_calls"] or []),
        tool_call_id=row["tool_call_id"],
        tool_name=row["tool_name"],
        is_error=row["is_error"],
        created_at=aware(row["created_at"]),
        reply_stream=row.get("reply_stream"),
        usage=row.get("usage"),
        parent_seq=row.get("parent_seq"),
        active=bool(row.get("active", True)),
        output=row.get("output"),
        files=[shown(entry) for entry in row.get("files") or ()],
    )


def aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; they are UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


__all__ = ["aware", "conversation_view", "message_of_row", "turn_of_row"]
