"""Conversations as a tree: each message names its parent and whether it is on the active path;
a turn says where its messages hang (edits, regenerates, rollbacks); the `regenerate` and `steer`
turn kinds; the `branch.switched` event; a fork remembers where it came from, and the session
cache's outputs copied into it have no turn.

Existing conversations become a single path: each message's parent is the one before it, and
every message is active. Nothing is lost.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The CHECKs on `turns.kind` and `events.type` before and after, frozen.
TURN_KINDS_BEFORE = ("message", "retry")
TURN_KINDS = (*TURN_KINDS_BEFORE, "regenerate", "steer")
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
)
EVENT_TYPES = (*EVENT_TYPES_BEFORE, "branch.switched")
PARENT_IS_OLDER = "parent_seq IS NULL OR parent_seq < seq"
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
    # Not a batch on SQLite: copying `messages` would drop it, and the foreign key of
    # `tool_outputs` would delete the session cache with it. SQLite adds a column in place, its
    # CHECK with it.
    if op.get_context().dialect.name == "sqlite":
        op.execute(
            "ALTER TABLE messages ADD COLUMN parent_seq INTEGER CONSTRAINT "
            f"ck_messages_parent_is_older CHECK ({PARENT_IS_OLDER})"
        )
    else:
        op.add_column("messages", sa.Column("parent_seq", sa.Integer(), nullable=True))
        op.create_check_constraint("parent_is_older", "messages", PARENT_IS_OLDER)
    op.add_column(
        "messages",
        sa.Column("active", sa.Boolean(), server_default=sa.text("true"), nullable=False),
    )
    op.execute(
        "UPDATE messages SET parent_seq = (SELECT max(older.seq) FROM messages AS older "
        "WHERE older.conversation_id = messages.conversation_id AND older.seq < messages.seq)"
    )
    op.create_index(
        "ix_messages_active_path",
        "messages",
        ["conversation_id", "seq"],
        postgresql_where=sa.text("active"),
        sqlite_where=sa.text("active"),
    )
    op.create_index(
        "ix_messages_inactive",
        "messages",
        ["conversation_id", "tool_call_id"],
        postgresql_where=sa.text("NOT active"),
        sqlite_where=sa.text("NOT active"),
    )
    op.add_column("turns", sa.Column("parent_seq", sa.Integer(), nullable=True))
    with op.batch_alter_table("tool_outputs") as batch:  # (a fork's copies have no turn)
        batch.alter_column("turn_id", existing_type=sa.Uuid(), nullable=True)
    op.add_column("conversations", sa.Column("forked_from", sa.Uuid(), nullable=True))
    op.add_column("conversations", sa.Column("forked_at_seq", sa.Integer(), nullable=True))
    _checks(TURN_KINDS, EVENT_TYPES)


def downgrade() -> None:
    op.execute("DELETE FROM events WHERE type = 'branch.switched'")
    # The inactive versions go: a single path stays, as before the tree.
    op.execute("DELETE FROM messages WHERE NOT active")  # (their kept outputs cascade)
    op.execute("DELETE FROM turns WHERE kind IN ('regenerate', 'steer')")
    _checks(TURN_KINDS_BEFORE, EVENT_TYPES_BEFORE)
    op.execute("DELETE FROM tool_outputs WHERE turn_id IS NULL")
    with op.batch_alter_table("tool_outputs") as batch:
        batch.alter_column("turn_id", existing_type=sa.Uuid(), nullable=False)
    op.drop_index("ix_messages_inactive", table_name="messages")
    op.drop_index("ix_messages_active_path", table_name="messages")
    if op.get_context().dialect.name != "sqlite":  # (SQLite's goes with its column)
        op.drop_constraint(op.f("ck_messages_parent_is_older"), "messages", type_="check")
    for table, column in (
        ("messages", "active"),
        ("messages", "parent_seq"),
        ("turns", "parent_seq"),
        ("conversations", "forked_at_seq"),
        ("conversations", "forked_from"),
    ):
        if op.get_context().dialect.name == "sqlite":
            op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        else:
            op.drop_column(table, column)


def _checks(turn_kinds: tuple[str, ...], event_types: tuple[str, ...]) -> None:
    """Replace the CHECKs on `turns.kind` and `events.type`. SQLite copies each table to do it,
    and migration 0014's webhook outbox trigger names both: it is dropped first and made again
    as 0014 made it."""
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
