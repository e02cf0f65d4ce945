"""Structured output and fallback models: a conversation (or a single message's turn) may ask
for an answer that matches a JSON Schema, and name the models a call falls back to when its
own provider is down; a message keeps the parsed answer, a turn the model it uses now (a
fallback's, committed, so a crash resumes on it), an answer that did not match keeps why
(`output_error`), and the `model.fallback` event says when a
turn moved to another model.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
# The CHECKs on `turns.kind` and `events.type` before and after, frozen.
TURN_KINDS = ("message", "retry", "regenerate", "steer")
EVENT_TYPES_BEFORE = (
    "turn.queued",
    "turn.started",
    "turn.resumed",
    "turn.completed",
    "turn.failed",
    "turn.cancelled",
    "turn.cancel_requested",
    "status.changed",
    "message.committed",
    "action.required",
    "context.compacted",
    "branch.switched",
)
EVENT_TYPES = (*EVENT_TYPES_BEFORE, "model.fallback")
# Migration 0014's webhook outbox trigger on SQLite, as it made it: a copy of `events` drops it.
SQLITE_OUTBOX = """
    CREATE TRIGGER events_webhook_outbox AFTER INSERT ON events FOR EACH ROW
    WHEN NEW.type IN ('turn.completed', 'turn.failed', 'turn.cancelled', 'action.required')
    BEGIN
    INSERT INTO webhook_deliveries
        (webhook_id, conversation_id, event_seq, turn_id, type, error, occurred_at)
    SELECT w.id, NEW.conversation_id, NEW.seq, NEW.turn_id,
        CASE NEW.type WHEN 'action.required' THEN 'turn.requires_action' ELSE NEW.type END,
        (SELECT t.error FROM turns t WHERE t.id = NEW.turn_id), NEW.created_at
    FROM webhooks w
    WHERE (
        w.conversation_id = NEW.conversation_id
        OR (
            w.conversation_id IS NULL
            AND w.owner IS (
                SELECT c.owner FROM conversations c WHERE c.id = NEW.conversation_id
            )
        )
    )
    AND w.event_types LIKE '% ' || (
        CASE NEW.type WHEN 'action.required' THEN 'turn.requires_action' ELSE NEW.type END
    ) || ' %';
    END
"""


def upgrade() -> None:
    op.add_column("conversations", sa.Column("output_schema", JSON, nullable=True))
    op.add_column("conversations", sa.Column("fallback_models", JSON, nullable=True))
    op.add_column("turns", sa.Column("output_schema", JSON, nullable=True))
    op.add_column("turns", sa.Column("model", sa.String(200), nullable=True))
    op.add_column("messages", sa.Column("output", JSON, nullable=True))
    op.add_column("messages", sa.Column("output_error", sa.Text(), nullable=True))
    _checks(TURN_KINDS, EVENT_TYPES)


def downgrade() -> None:
    op.execute("DELETE FROM events WHERE type = 'model.fallback'")
    _checks(TURN_KINDS, EVENT_TYPES_BEFORE)
    for table, column in (
        ("messages", "output_error"),
        ("messages", "output"),
        ("turns", "model"),
        ("turns", "output_schema"),
        ("conversations", "fallback_models"),
        ("conversations", "output_schema"),
    ):
        if op.get_context().dialect.name == "sqlite":
            op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        else:
            op.drop_column(table, column)


def _checks(turn_kinds: tuple[str, ...], event_types: tuple[str, ...]) -> None:
    """Replace the CHECKs on `turns.kind` and `events.type` (as migration 0019 did, the turns'
    unchanged). SQLite copies each table to do it, and migration 0014's webhook outbox trigger
    names both: it is dropped first and made again as 0014 made it."""
    sqlite = op.get_context().dialect.name == "sqlite"
    if sqlite:
        op.execute("DROP TRIGGER events_webhook_outbox")
    with op.batch_alter_table("turns") as batch:
        batch.drop_constraint(op.f("ck_turns_kind"), type_="check")
        batch.create_check_constraint("kind", _in("kind", turn_kinds))
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint(op.f("ck_events_type"), type_="check")
        batch.create_check_constraint("type", _in("type", event_types))
    if sqlite:
        op.execute(SQLITE_OUTBOX)


def _in(column: str, words: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(word) for word in words)})"
