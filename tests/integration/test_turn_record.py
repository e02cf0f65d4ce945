"""A turn's record (the turn, its conversation's setup, its events) is read as of one moment: a
commit landing between its statements is in none of them, so the turn's status and its events
always agree (a pause seen among the events of a turn still read as running made the AI SDK's
stream take the pause for an answered one, and never end)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from tests.rows import force_status


def test_a_commit_between_a_turn_record_s_statements_is_in_none_of_them(
    database_url: str,
) -> None:
    engine, other = make_engine(database_url), make_engine(database_url)
    client = ChatClient(load_settings(database_url=database_url), engine=engine, enqueue=print)
    try:
        conversation_id = client.create_conversation()
        turn_id = client.submit_message(conversation_id, "hello").turn_id
        assert turn_id is not None
        before = client.turn_record(turn_id)
        landed: list[bool] = []

        def between(*_args: Any) -> None:  # (after the record's first statement)
            if not landed:
                landed.append(True)
                force_status(other, conversation_id, "failed")  # the turn fails, logged

        event.listen(engine, "after_cursor_execute", between)
        try:
            record = client.turn_record(turn_id)
        finally:
            event.remove(engine, "after_cursor_execute", between)
        assert landed
        assert record.turn.status == before.turn.status
        assert [e.type for e in record.events] == [e.type for e in before.events]
        after = client.turn_record(turn_id)
        assert after.turn.status == "failed" and len(after.events) > len(before.events)
    finally:
        client.close()
        engine.dispose()
        other.dispose()
