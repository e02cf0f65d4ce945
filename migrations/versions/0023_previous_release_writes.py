"""The previous release beside this schema: what its processes do not write is derived by the
database, and what they already wrote wrong under migration 0019 is repaired.

During an upgrade the previous release's workers and API run on the migrated schema for a while
(docs/OPERATIONS.md, "Upgrading"). They know nothing of the message tree, so on PostgreSQL,
where they run, three triggers fill in what they leave out:

- `messages.parent_seq`: a writer that does not name the column (the previous release) gets its
  default, -1 ("not said"), which the trigger replaces by the conversation's leaf, its newest
  active message: where such a writer appends. A writer of this release names it always, NULL
  for a root (an edit of the first message), so a root is never mistaken for an omission.
- `turns.parent_seq`, where a turn's messages hang: NULL once its message is placed (a submit at
  rest) or once it starts (a claim) means the previous release wrote it; it becomes the leaf
  below which the message went (or, for a retry, the leaf it starts from; 0 for none).
- `conversations.lease_token`: a lease that changes hands but keeps its last holder's token (a
  claim or release of a writer that knows no tokens) loses it; its holder is judged by the TTL.

Repaired once, on every database: a message 0019 let in without a parent that is no root (not a
first message, not the message of a turn that starts a new root, `turns.parent_seq` 0) hangs
below the message that was the leaf when it was committed, read from the event log (the last
`message.committed` or `branch.switched` before its own `message.committed`, else the message
before it); each conversation so repaired has its active path made again, from its leaf up; a
turn that started without saying where it hangs (or that said its own message) hangs where its
first message does; a released lease keeps no token.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: `messages.parent_seq` of a writer that does not name it (PostgreSQL's default; it never stays).
NOT_SAID = -1

POSTGRESQL = [
    """
    CREATE FUNCTION chatworker_message_parent() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.parent_seq := (
            SELECT max(m.seq) FROM messages m
            WHERE m.conversation_id = NEW.conversation_id AND m.active AND m.seq < NEW.seq
        );
        RETURN NEW;
    END
    $$
    """,
    f"""
    CREATE TRIGGER messages_parent_derived BEFORE INSERT ON messages FOR EACH ROW
    WHEN (NEW.parent_seq = {NOT_SAID}) EXECUTE FUNCTION chatworker_message_parent()
    """,
    f"ALTER TABLE messages ALTER COLUMN parent_seq SET DEFAULT {NOT_SAID}",
    """
    CREATE FUNCTION chatworker_turn_parent() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.parent_seq := COALESCE((
            SELECT max(m.seq) FROM messages m
            WHERE m.conversation_id = NEW.conversation_id AND m.active
            AND (NEW.message_seq IS NULL OR m.seq < NEW.message_seq)
        ), 0);
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER turns_parent_derived BEFORE INSERT OR UPDATE OF status, message_seq ON turns
    FOR EACH ROW WHEN (
        NEW.parent_seq IS NULL AND (NEW.message_seq IS NOT NULL OR NEW.status = 'running')
    ) EXECUTE FUNCTION chatworker_turn_parent()
    """,
    """
    CREATE FUNCTION chatworker_lease_token() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.lease_token := NULL;
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER conversations_lease_token_kept BEFORE UPDATE OF lease_owner ON conversations
    FOR EACH ROW WHEN (
        NEW.lease_owner IS DISTINCT FROM OLD.lease_owner AND NEW.lease_token = OLD.lease_token
    ) EXECUTE FUNCTION chatworker_lease_token()
    """,
]

# A message with no parent that is no root: not a first message, nor the message of a turn that
# starts a new root (an edit of the first message, a rollback of the first turn).
_UNSAID = """
    {m}.parent_seq IS NULL AND {m}.seq > 1 AND NOT EXISTS (
        SELECT 1 FROM turns t WHERE t.conversation_id = {m}.conversation_id
        AND t.message_seq = {m}.seq AND t.parent_seq = 0
    )
"""
# The leaf when the message was committed: what the last event that moved it named.
_LEAF_THEN = """
    SELECT before.message_seq FROM events before
    WHERE before.conversation_id = messages.conversation_id
    AND before.type IN ('message.committed', 'branch.switched')
    AND before.seq < (
        SELECT committed.seq FROM events committed
        WHERE committed.conversation_id = messages.conversation_id
        AND committed.type = 'message.committed' AND committed.message_seq = messages.seq
    )
    ORDER BY before.seq DESC LIMIT 1
"""
REPAIR = [
    "CREATE TEMPORARY TABLE repaired_conversations AS SELECT DISTINCT m.conversation_id"
    f" FROM messages m WHERE {_UNSAID.format(m='m')}",
    f"""
    UPDATE messages SET parent_seq = COALESCE(NULLIF(({_LEAF_THEN}), 0), messages.seq - 1)
    WHERE {_UNSAID.format(m="messages")}
    """,
    # The active path of each repaired conversation: from its leaf up to its root.
    """
    WITH RECURSIVE path (conversation_id, seq, parent_seq) AS (
        SELECT m.conversation_id, m.seq, m.parent_seq FROM messages m
        WHERE m.conversation_id IN (SELECT conversation_id FROM repaired_conversations)
        AND m.seq = (
            SELECT max(leaf.seq) FROM messages leaf
            WHERE leaf.conversation_id = m.conversation_id AND leaf.active
        )
        UNION ALL
        SELECT m.conversation_id, m.seq, m.parent_seq FROM messages m
        JOIN path p ON m.conversation_id = p.conversation_id AND m.seq = p.parent_seq
    )
    UPDATE messages SET active = EXISTS (
        SELECT 1 FROM path p
        WHERE p.conversation_id = messages.conversation_id AND p.seq = messages.seq
    )
    WHERE conversation_id IN (SELECT conversation_id FROM repaired_conversations)
    """,
    "DROP TABLE repaired_conversations",
    # A turn the new release started from the previous one's submit at rest named its own
    # message as where it hangs (the leaf it saw): it hangs where that message does.
    """
    UPDATE turns SET parent_seq = COALESCE((
        SELECT m.parent_seq FROM messages m
        WHERE m.conversation_id = turns.conversation_id AND m.seq = turns.message_seq
    ), 0)
    WHERE kind <> 'regenerate' AND parent_seq = message_seq
    """,
    # A turn the previous release started says nothing: where its message, or else the first
    # message it committed, hangs (a retry that committed nothing hangs at the leaf: NULL).
    """
    UPDATE turns SET parent_seq = (
        SELECT COALESCE(m.parent_seq, 0) FROM messages m
        WHERE m.conversation_id = turns.conversation_id AND m.seq = COALESCE(
            turns.message_seq,
            (
                SELECT min(e.message_seq) FROM events e
                WHERE e.conversation_id = turns.conversation_id AND e.turn_id = turns.id
                AND e.type = 'message.committed'
            )
        )
    )
    WHERE parent_seq IS NULL AND (message_seq IS NOT NULL OR status <> 'queued')
    """,
    "UPDATE conversations SET lease_token = NULL"
    " WHERE lease_owner IS NULL AND lease_token IS NOT NULL",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRESQL:
            op.execute(statement)
    for statement in REPAIR:
        op.execute(statement)


def downgrade() -> None:
    # (the repairs stay: they are what the rows meant)
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER conversations_lease_token_kept ON conversations")
    op.execute("DROP FUNCTION chatworker_lease_token()")
    op.execute("DROP TRIGGER turns_parent_derived ON turns")
    op.execute("DROP FUNCTION chatworker_turn_parent()")
    op.execute("ALTER TABLE messages ALTER COLUMN parent_seq DROP DEFAULT")
    op.execute("DROP TRIGGER messages_parent_derived ON messages")
    op.execute("DROP FUNCTION chatworker_message_parent()")
