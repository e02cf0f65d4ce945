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

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TURN_KINDS = "kind IN ('message', 'retry')"
TURN_KINDS_NOW = "kind IN ('message', 'retry', 'regenerate', 'steer')"
PARENT_IS_OLDER = "parent_seq IS NULL OR parent_seq < seq"


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
    _checks(TURN_KINDS_NOW, _previous().EVENT_TYPES_NOW[:-1] + ", 'branch.switched')")


def downgrade() -> None:
    op.execute("DELETE FROM events WHERE type = 'branch.switched'")
    # The inactive versions go: a single path stays, as before the tree.
    op.execute("DELETE FROM messages WHERE NOT active")  # (their kept outputs cascade)
    op.execute("DELETE FROM turns WHERE kind IN ('regenerate', 'steer')")
    _checks(TURN_KINDS, _previous().EVENT_TYPES_NOW)
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


def _checks(turn_kinds: str, event_types: str) -> None:
    """Replace the CHECKs on `turns.kind` and `events.type`. SQLite copies each table to do it,
    and migration 0014's webhook outbox trigger names both: it is dropped first and made again
    from 0014's own text."""
    sqlite = op.get_context().dialect.name == "sqlite"
    if sqlite:
        op.execute("DROP TRIGGER events_webhook_outbox")
    with op.batch_alter_table("turns") as batch:
        batch.drop_constraint(op.f("ck_turns_kind"), type_="check")
        batch.create_check_constraint("kind", turn_kinds)
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint(op.f("ck_events_type"), type_="check")
        batch.create_check_constraint("type", event_types)
    if sqlite:
        for statement in _previous()._webhooks_migration().SQLITE:
            op.execute(statement)


def _previous():  # type: ignore[no-untyped-def]
    """Migration 0018, whose list of event types this one extends."""
    path = Path(__file__).with_name("0018_context_compaction.py")
    spec = importlib.util.spec_from_file_location("chatworker_migration_0018", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
