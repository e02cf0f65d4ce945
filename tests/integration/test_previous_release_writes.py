"""What the previous release's processes write beside this schema: the columns they do not know
are derived by the database (PostgreSQL, where they run during an upgrade; migration 0023), and
what migration 0019 let them write wrong is repaired by 0023, on PostgreSQL and on SQLite.

The rows are written as the previous release's statements write them (the columns it names, and
no others); `tests/integration/test_upgrade.py` runs that release's real processes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, text

from app.migrate import alembic_config, upgrade
from tests.invariants import tree_violations

pytestmark = pytest.mark.raw_rows  # (rows by hand: no event log to check afterwards)

REPAIR = "0023"  # the migration that derives what the previous release leaves out, and repairs


@pytest.fixture
def conversation(engine: Engine) -> Iterator[uuid.UUID]:
    conversation_id = uuid.uuid4()
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO conversations (id, model, allowed_tools) VALUES (:id, 'm', '[]')"),
            {"id": conversation_id},
        )
    return conversation_id


def message(connection: Connection, cid: uuid.UUID, seq: int, role: str = "user") -> None:
    """A message as the previous release inserts one: no parent, no `active`."""
    connection.execute(
        text(
            "INSERT INTO messages (conversation_id, seq, role, content, is_error)"
            " VALUES (:c, :seq, :role, 'x', false)"
        ),
        {"c": cid, "seq": seq, "role": role},
    )


def placed(
    connection: Connection, cid: uuid.UUID, seq: int, parent: int | None, active: bool = True
) -> None:
    """A message as this release inserts one: its parent named (None: a root)."""
    connection.execute(
        text(
            "INSERT INTO messages (conversation_id, seq, parent_seq, active, role, content,"
            " is_error) VALUES (:c, :seq, :parent, :active, 'user', 'x', false)"
        ),
        {"c": cid, "seq": seq, "parent": parent, "active": active},
    )


def tree(connection: Connection, cid: uuid.UUID) -> list[tuple[int, int | None, bool]]:
    rows = connection.execute(
        text(
            "SELECT seq, parent_seq, active FROM messages WHERE conversation_id = :c ORDER BY seq"
        ),
        {"c": cid},
    ).all()
    return [(seq, parent, bool(active)) for seq, parent, active in rows]


def test_a_message_that_names_no_parent_hangs_below_the_leaf(
    engine: Engine, conversation: uuid.UUID
) -> None:
    """The previous release appends where the leaf is: its first message is a root, each
    other one hangs below the newest active message (not below an inactive newer version); a
    root this release writes (NULL, by name) stays a root."""
    with engine.begin() as connection:
        message(connection, conversation, 1)
        message(connection, conversation, 2, "assistant")
        placed(connection, conversation, 3, 2, active=False)  # an edited-away version
        placed(connection, conversation, 4, 3, active=False)
        placed(connection, conversation, 5, 2)  # the edit: the path is 1 2 5
        message(connection, conversation, 6, "assistant")
        placed(connection, conversation, 7, None, active=False)  # a new root, by name
        found = tree(connection, conversation)
    assert found == [
        (1, None, True),
        (2, 1, True),
        (3, 2, False),
        (4, 3, False),
        (5, 2, True),
        (6, 5, True),
        (7, None, False),
    ]


def test_a_turn_that_names_no_parent_hangs_where_its_message_goes(
    engine: Engine, conversation: uuid.UUID
) -> None:
    """A submit at rest (the turn, then its message), a queued message and a retry, written and
    started as the previous release does: each turn says where its messages hang (0: a root),
    and a queued one says nothing until it starts."""
    first, second, queued, retry = (uuid.uuid4() for _ in range(4))
    with engine.begin() as connection:

        def turn(turn_id: uuid.UUID, number: int, kind: str, seq: int | None) -> None:
            connection.execute(
                text(
                    "INSERT INTO turns (id, conversation_id, number, kind, message_seq, input)"
                    " VALUES (:id, :c, :n, :kind, :seq, :input)"
                ),
                {
                    "id": turn_id,
                    "c": conversation,
                    "n": number,
                    "kind": kind,
                    "seq": seq,
                    "input": "later" if kind == "message" and seq is None else None,
                },
            )

        def start(turn_id: uuid.UUID, seq: int | None) -> None:  # the previous release's claim
            connection.execute(
                text(
                    "UPDATE turns SET status = 'running', started_at = CURRENT_TIMESTAMP,"
                    " input = NULL, message_seq = COALESCE(message_seq, :seq) WHERE id = :id"
                ),
                {"id": turn_id, "seq": seq},
            )

        turn(first, 1, "message", 1)
        message(connection, conversation, 1)
        start(first, None)
        message(connection, conversation, 2, "assistant")
        turn(second, 2, "message", 3)
        message(connection, conversation, 3)
        turn(queued, 3, "message", None)
        start(second, None)
        message(connection, conversation, 4, "assistant")
        start(queued, 5)
        message(connection, conversation, 5)
        message(connection, conversation, 6, "assistant")
        turn(retry, 4, "retry", None)
        start(retry, None)
        parents = dict(
            connection.execute(
                text("SELECT number, parent_seq FROM turns WHERE conversation_id = :c"),
                {"c": conversation},
            ).all()
        )
    assert parents == {1: 0, 2: 2, 3: 4, 4: 6}


def test_a_queued_turn_says_nothing_until_it_starts(
    engine: Engine, conversation: uuid.UUID
) -> None:
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO turns (id, conversation_id, number, kind, input)"
                " VALUES (:id, :c, 1, 'message', 'later')"
            ),
            {"id": uuid.uuid4(), "c": conversation},
        )
        connection.execute(
            text("UPDATE turns SET status = 'cancelled' WHERE conversation_id = :c"),
            {"c": conversation},
        )
        parent = connection.execute(
            text("SELECT parent_seq FROM turns WHERE conversation_id = :c"), {"c": conversation}
        ).scalar_one()
    assert parent is None


def test_a_lease_that_changes_hands_with_its_last_holders_token_loses_it(
    engine: Engine, conversation: uuid.UUID
) -> None:
    """A claim or a release that knows no tokens leaves none behind; this release's claims,
    heartbeats and token moves keep theirs."""

    def lease(values: str) -> tuple[Any, Any]:
        with engine.begin() as connection:
            row = connection.execute(
                text(
                    f"UPDATE conversations SET {values} WHERE id = :c"
                    " RETURNING lease_owner, lease_token"
                ),
                {"c": conversation},
            ).one()
        return row.lease_owner, row.lease_token

    claim = "lease_epoch = lease_epoch + 1, lease_expires_at = CURRENT_TIMESTAMP"
    assert lease(f"lease_owner = 'new-a', lease_token = 41, {claim}") == ("new-a", 41)
    assert lease("lease_expires_at = CURRENT_TIMESTAMP") == ("new-a", 41)  # a heartbeat
    assert lease("lease_owner = 'new-a', lease_token = 42") == ("new-a", 42)  # a token moved
    assert lease(f"lease_owner = 'old-b', {claim}") == ("old-b", None)  # the previous release
    assert lease(f"lease_owner = 'new-c', lease_token = 43, {claim}") == ("new-c", 43)
    assert lease("lease_owner = NULL, lease_expires_at = NULL") == (None, None)


# --- the repair of what 0019 let through ---------------------------------------------------------


class History:
    """A conversation's rows as 0019's schema holds them, written in commit order: messages
    (the previous release's with no parent) with their `message.committed`, branch switches."""

    def __init__(self, connection: Connection, sqlite: bool) -> None:
        self.connection, self.sqlite = connection, sqlite
        self.id = uuid.uuid4()
        self.events = 0
        connection.execute(
            text("INSERT INTO conversations (id, model, allowed_tools) VALUES (:id, 'm', '[]')"),
            {"id": self.key(self.id)},
        )

    def key(self, value: uuid.UUID) -> Any:
        return value.hex if self.sqlite else value

    def log(self, kind: str, seq: int | None, turn: uuid.UUID | None = None) -> None:
        self.events += 1
        self.connection.execute(
            text(
                "INSERT INTO events (conversation_id, seq, type, message_seq, turn_id)"
                " VALUES (:c, :n, :type, :seq, :turn)"
            ),
            {
                "c": self.key(self.id),
                "n": self.events,
                "type": kind,
                "seq": seq,
                "turn": None if turn is None else self.key(turn),
            },
        )
        self.connection.execute(
            text("UPDATE conversations SET event_seq = :n WHERE id = :c"),
            {"c": self.key(self.id), "n": self.events},
        )

    def message(
        self, seq: int, parent: int | None, turn: uuid.UUID | None = None, role: str = "user"
    ) -> None:
        self.connection.execute(
            text(
                "INSERT INTO messages (conversation_id, seq, parent_seq, role, content, is_error)"
                " VALUES (:c, :seq, :parent, :role, 'x', false)"
            ),
            {"c": self.key(self.id), "seq": seq, "parent": parent, "role": role},
        )
        self.log("message.committed", seq, turn)

    def switch(self, leaf: int | None, active: list[int]) -> None:
        """The path moved to `leaf` (the web side's switch or edit), `active` on it after."""
        self.connection.execute(
            text(
                f"UPDATE messages SET active = (seq IN ({', '.join(map(str, active)) or 0}))"
                " WHERE conversation_id = :c"
            ),
            {"c": self.key(self.id)},
        )
        self.log("branch.switched", leaf)

    def turn(
        self, number: int, kind: str, seq: int | None, parent: int | None, **more: Any
    ) -> uuid.UUID:
        turn_id = uuid.uuid4()
        self.connection.execute(
            text(
                "INSERT INTO turns (id, conversation_id, number, kind, status, message_seq,"
                " parent_seq) VALUES (:id, :c, :n, :kind, :status, :seq, :parent)"
            ),
            {
                "id": self.key(turn_id),
                "c": self.key(self.id),
                "n": number,
                "kind": kind,
                "status": more.get("status", "completed"),
                "seq": seq,
                "parent": parent,
            },
        )
        return turn_id

    def rows(self, connection: Connection) -> list[tuple[int, int | None, bool]]:
        found = connection.execute(
            text(
                "SELECT seq, parent_seq, active FROM messages WHERE conversation_id = :c"
                " ORDER BY seq"
            ),
            {"c": self.key(self.id)},
        ).all()
        return [(seq, parent, bool(active)) for seq, parent, active in found]

    def turn_parents(self, connection: Connection) -> dict[int, int | None]:
        return dict(
            connection.execute(
                text("SELECT number, parent_seq FROM turns WHERE conversation_id = :c"),
                {"c": self.key(self.id)},
            ).all()
        )


@pytest.fixture(params=["postgresql", "sqlite"])
def before_repair(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """A database at the migration before 0023's repair (0019's tree, as it was)."""
    fixture = "empty_database_url" if request.param == "postgresql" else "sqlite_url"
    url = str(request.getfixturevalue(fixture))
    script = ScriptDirectory.from_config(alembic_config(url))
    upgrade(url, str(script.get_revision(REPAIR).down_revision))
    engine = create_engine(url)
    yield engine
    engine.dispose()


def test_messages_0019_let_in_without_a_parent_hang_where_the_leaf_was(
    before_repair: Engine,
) -> None:
    """Four conversations as an upgrade under 0019 left them: the previous release appended
    below the leaf but wrote no parent (each such message a root to the new release), before and
    after the new web side moved the path. The repair hangs each where the leaf was when it was
    committed (the event log says), makes every active path one path from a root again, keeps
    a root this release made, and says where each turn hangs."""
    sqlite = before_repair.dialect.name == "sqlite"
    with before_repair.begin() as connection:
        # Plain: 1-4 before the upgrade (0019 gave them parents), 5-8 by the previous release.
        plain = History(connection, sqlite)
        first = plain.turn(1, "message", 1, 1)  # started by the new release: "its own message"
        second = plain.turn(2, "message", 5, None)  # started by the previous release
        retry = plain.turn(3, "retry", None, None, status="failed")
        plain.message(1, None, first)
        for seq in (2, 3, 4):
            plain.message(seq, seq - 1, first, "assistant" if seq % 2 == 0 else "user")
        plain.message(5, None, second)
        plain.message(6, None, second, "assistant")
        plain.message(7, None, retry, "assistant")
        plain.message(8, None, retry, "assistant")
        # Switched: the new web side edited 3 (5, 6), switched back to 4, then the previous
        # release's API and worker added 7 and 8 below 4.
        switched = History(connection, sqlite)
        for seq in (1, 2, 3, 4):
            switched.message(seq, seq - 1 or None)
        switched.switch(2, [1, 2])
        switched.message(5, 2)
        switched.message(6, 5)
        switched.switch(4, [1, 2, 3, 4])
        switched.message(7, None)
        switched.message(8, None)
        # Walked: every message after the first by the previous release, then the new web side
        # switched to 2 over the broken links (the path it walked up from 2 stopped at once).
        walked = History(connection, sqlite)
        walked.message(1, None)
        for seq in (2, 3, 4):
            walked.message(seq, None)
        walked.switch(2, [2])
        # Rooted: an edit of the first message is a root this release made (its turn says 0).
        rooted = History(connection, sqlite)
        rooted.message(1, None)
        rooted.message(2, 1)
        edit = rooted.turn(2, "message", 3, 0)
        rooted.switch(None, [])
        rooted.message(3, None, edit)
        rooted.message(4, 3, edit)
        connection.execute(
            text("UPDATE conversations SET lease_token = 7, lease_owner = NULL WHERE id = :c"),
            {"c": plain.key(plain.id)},
        )
    upgrade(str(before_repair.url.render_as_string(hide_password=False)))
    with before_repair.connect() as connection:
        assert plain.rows(connection) == [(seq, seq - 1 or None, True) for seq in range(1, 9)]
        assert switched.rows(connection) == [
            (1, None, True),
            (2, 1, True),
            (3, 2, True),
            (4, 3, True),
            (5, 2, False),
            (6, 5, False),
            (7, 4, True),
            (8, 7, True),
        ]
        assert walked.rows(connection) == [
            (1, None, True),
            (2, 1, True),
            (3, 2, False),
            (4, 3, False),
        ]
        assert rooted.rows(connection) == [
            (1, None, False),
            (2, 1, False),
            (3, None, True),
            (4, 3, True),
        ]
        for history in (plain, switched, walked, rooted):
            rows = [
                (seq, "user", "x", None, None, parent, active)
                for seq, parent, active in history.rows(connection)
            ]
            assert tree_violations(rows) == []
        assert plain.turn_parents(connection) == {1: 0, 2: 4, 3: 6}
        assert rooted.turn_parents(connection) == {2: 0}
        token = connection.execute(
            text("SELECT lease_token FROM conversations WHERE id = :c"),
            {"c": plain.key(plain.id)},
        ).scalar_one()
    assert token is None
