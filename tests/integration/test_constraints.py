"""Each database constraint rejects what it must, on PostgreSQL and on SQLite.

A rejected write raises IntegrityError and leaves nothing behind: the transaction rolls back whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db import make_engine
from app.models import Conversation, Message

pytestmark = pytest.mark.raw_rows  # these tests build invalid transcripts on purpose


@pytest.fixture
def db(any_database_url: str) -> Iterator[Engine]:
    engine = make_engine(any_database_url)
    yield engine
    engine.dispose()


def new_conversation(engine: Engine, **fields: Any) -> uuid.UUID:
    with Session(engine) as session:
        conversation = Conversation(model="demo/offline", **fields)
        session.add(conversation)
        session.commit()
        return conversation.id


def add_messages(engine: Engine, *messages: Message) -> None:
    with Session(engine) as session:
        session.add_all(messages)
        session.commit()


def message_count(engine: Engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(Message)) or 0


def test_a_valid_transcript_is_accepted(db: Engine) -> None:
    cid = new_conversation(db, allowed_tools=["add"], context={"user": 7})
    add_messages(
        db,
        Message(conversation_id=cid, seq=1, role="user", content="1+2?"),
        Message(
            conversation_id=cid,
            seq=2,
            role="assistant",
            tool_calls=[{"id": "c1", "name": "add", "arguments": '{"a": 1,'}],
        ),
        Message(conversation_id=cid, seq=3, role="tool", tool_call_id="c1", content="3"),
        Message(conversation_id=cid, seq=4, role="assistant", content="3"),
    )
    with Session(db) as session:
        conversation = session.get_one(Conversation, cid)
        assert conversation.status == "idle"
        assert conversation.tool_choice == "auto"
        assert conversation.context == {"user": 7}
        assert conversation.lease_epoch == 0
        assert conversation.heartbeat_at is not None
        stored = session.scalars(select(Message).order_by(Message.seq)).all()
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    # Invalid JSON from the model is kept as the raw text it was.
    assert stored[1].tool_calls == [{"id": "c1", "name": "add", "arguments": '{"a": 1,'}]


def test_duplicate_seq_is_rejected(db: Engine) -> None:
    cid = new_conversation(db)
    add_messages(db, Message(conversation_id=cid, seq=1, role="user", content="a"))
    with pytest.raises(IntegrityError):
        add_messages(db, Message(conversation_id=cid, seq=1, role="user", content="b"))
    assert message_count(db) == 1


def test_same_seq_in_two_conversations_is_fine(db: Engine) -> None:
    first, second = new_conversation(db), new_conversation(db)
    add_messages(
        db,
        Message(conversation_id=first, seq=1, role="user", content="a"),
        Message(conversation_id=second, seq=1, role="user", content="b"),
    )
    assert message_count(db) == 2


def test_second_result_for_one_tool_call_is_rejected(db: Engine) -> None:
    cid = new_conversation(db)
    add_messages(
        db,
        Message(conversation_id=cid, seq=1, role="tool", tool_call_id="call_1", content="ok"),
    )
    with pytest.raises(IntegrityError):
        add_messages(
            db,
            Message(
                conversation_id=cid, seq=2, role="tool", tool_call_id="call_1", content="again"
            ),
        )
    assert message_count(db) == 1


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"role": "robot", "content": "x"}, "unknown role"),
        ({"role": "tool", "content": "x"}, "tool result without a call id"),
        ({"role": "user", "content": "x", "tool_call_id": "c1"}, "call id on a non-tool message"),
        ({"role": "user", "content": "x", "seq": 0}, "seq below 1"),
    ],
)
def test_message_checks_reject(db: Engine, fields: dict[str, Any], why: str) -> None:
    cid = new_conversation(db)
    fields = {"seq": 1, **fields}
    with pytest.raises(IntegrityError):
        add_messages(db, Message(conversation_id=cid, **fields))
    assert message_count(db) == 0, why


def test_message_of_unknown_conversation_is_rejected(db: Engine) -> None:
    with pytest.raises(IntegrityError):
        add_messages(db, Message(conversation_id=uuid.uuid4(), seq=1, role="user", content="x"))


@pytest.mark.parametrize(
    "fields",
    [
        {"status": "running"},
        {"status": "IDLE"},
        {"tool_choice": "sometimes"},
        {"iterations": -1},
        {"attempts": -1},
    ],
)
def test_conversation_checks_reject(db: Engine, fields: dict[str, Any]) -> None:
    with pytest.raises(IntegrityError):
        new_conversation(db, **fields)


def test_deleting_a_conversation_deletes_its_messages(db: Engine) -> None:
    cid = new_conversation(db)
    add_messages(db, Message(conversation_id=cid, seq=1, role="user", content="a"))
    with Session(db) as session:
        session.delete(session.get_one(Conversation, cid))
        session.commit()
    assert message_count(db) == 0
