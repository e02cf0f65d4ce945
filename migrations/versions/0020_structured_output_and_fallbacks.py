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

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("conversations", sa.Column("output_schema", JSON, nullable=True))
    op.add_column("conversations", sa.Column("fallback_models", JSON, nullable=True))
    op.add_column("turns", sa.Column("output_schema", JSON, nullable=True))
    op.add_column("turns", sa.Column("model", sa.String(200), nullable=True))
    op.add_column("messages", sa.Column("output", JSON, nullable=True))
    op.add_column("messages", sa.Column("output_error", sa.Text(), nullable=True))
    previous = _previous()
    previous._checks(previous.TURN_KINDS_NOW, _event_types(previous) + ", 'model.fallback')")


def downgrade() -> None:
    op.execute("DELETE FROM events WHERE type = 'model.fallback'")
    previous = _previous()
    previous._checks(previous.TURN_KINDS_NOW, _event_types(previous) + ")")
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


def _event_types(previous) -> str:  # type: ignore[no-untyped-def]
    """The event types CHECK of migration 0019, without its closing parenthesis."""
    return str(previous._previous().EVENT_TYPES_NOW[:-1] + ", 'branch.switched'")


def _previous():  # type: ignore[no-untyped-def]
    """Migration 0019, whose CHECKs (and SQLite's trigger dance) this one extends."""
    path = Path(__file__).with_name("0019_message_tree.py")
    spec = importlib.util.spec_from_file_location("chatworker_migration_0019", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
