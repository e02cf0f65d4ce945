"""Turns and the event log; the conversation's turn and event counters.

Existing conversations get one turn (its status from the conversation's) and an event log that
tells their story so far: one `message.committed` per message, then the turn's terminal event and
the conversation's status, so the log's invariants hold for old rows too.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
NOW = sa.text("CURRENT_TIMESTAMP")
TURN_STATUSES = "status IN ('queued', 'running', 'completed', 'failed', 'cancelled')"
EVENT_TYPES = (
    "type IN ('turn.queued', 'turn.started', 'turn.resumed', 'turn.completed', 'turn.failed', "
    "'turn.cancelled', 'turn.cancel_requested', 'status.changed', 'message.committed')"
)
TURN_OF_STATUS = {"idle": "completed", "failed": "failed"}  # a running status: running
TERMINAL_OF_TURN = {"completed": "turn.completed", "failed": "turn.failed"}


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        for column in ("turn_number", "turn_count", "event_seq"):
            batch.add_column(sa.Column(column, sa.Integer(), server_default="0", nullable=False))
        batch.create_check_constraint("turn_number_submitted", "turn_number <= turn_count")
    op.create_table(
        "turns",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), server_default="queued", nullable=False),
        sa.Column("kind", sa.String(16), server_default="message", nullable=False),
        sa.Column("message_seq", sa.Integer(), nullable=True),
        sa.Column("input", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("prompt_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(TURN_STATUSES, name=op.f("ck_turns_status")),
        sa.CheckConstraint("kind IN ('message', 'retry')", name=op.f("ck_turns_kind")),
        sa.CheckConstraint("number >= 1", name=op.f("ck_turns_number_positive")),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_turns_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_turns")),
        sa.UniqueConstraint(
            "conversation_id", "number", name=op.f("uq_turns_conversation_id_number")
        ),
        sa.UniqueConstraint(
            "conversation_id",
            "idempotency_key",
            name=op.f("uq_turns_conversation_id_idempotency_key"),
        ),
    )
    op.create_table(
        "events",
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("turn_id", sa.Uuid(), nullable=True),
        sa.Column("message_seq", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("data", JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.CheckConstraint(EVENT_TYPES, name=op.f("ck_events_type")),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_events_seq_positive")),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_events_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["turn_id"], ["turns.id"], name=op.f("fk_events_turn_id_turns"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("conversation_id", "seq", name=op.f("pk_events")),
    )
    _backfill(op.get_bind())


def _backfill(connection: sa.Connection) -> None:
    meta = sa.MetaData()
    conversations = sa.Table("conversations", meta, autoload_with=connection)
    messages = sa.Table("messages", meta, autoload_with=connection)
    turns = sa.Table("turns", meta, autoload_with=connection)
    events = sa.Table("events", meta, autoload_with=connection)
    rows = connection.execute(
        sa.select(conversations.c.id, conversations.c.status, conversations.c.error).where(
            sa.exists().where(messages.c.conversation_id == conversations.c.id)
        )
    ).all()
    for conversation_id, status, error in rows:
        seqs = connection.execute(
            sa.select(messages.c.seq, messages.c.role)
            .where(messages.c.conversation_id == conversation_id)
            .order_by(messages.c.seq)
        ).all()
        turn_id = uuid.uuid4()
        turn_status = TURN_OF_STATUS.get(status, "running")
        first_user = next((seq for seq, role in seqs if role == "user"), None)
        connection.execute(
            turns.insert().values(
                id=turn_id,
                conversation_id=conversation_id,
                number=1,
                status=turn_status,
                message_seq=first_user,
                error=error if turn_status == "failed" else None,
                started_at=sa.func.current_timestamp(),
                finished_at=sa.func.current_timestamp() if turn_status != "running" else None,
            )
        )
        log = [{"type": "message.committed", "message_seq": seq} for seq, _ in seqs]
        if turn_status in TERMINAL_OF_TURN:
            log.append({"type": TERMINAL_OF_TURN[turn_status]})
        log.append({"type": "status.changed", "status": status})
        connection.execute(
            events.insert(),
            [
                {"conversation_id": conversation_id, "seq": n, "turn_id": turn_id, **event}
                for n, event in enumerate(log, start=1)
            ],
        )
        connection.execute(
            conversations.update()
            .where(conversations.c.id == conversation_id)
            .values(turn_number=1, turn_count=1, event_seq=len(log))
        )


def downgrade() -> None:
    op.drop_table("events")
    op.drop_table("turns")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_constraint(op.f("ck_conversations_turn_number_submitted"), type_="check")
        for column in ("event_seq", "turn_count", "turn_number"):
            batch.drop_column(column)
