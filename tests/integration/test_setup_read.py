"""A conversation read for its setup alone (`messages=False`): what the dialects check a request
against, without reading a long transcript."""

from __future__ import annotations

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine


def test_a_conversation_read_without_its_messages_has_its_setup_and_no_message(
    database_url: str,
) -> None:
    engine = make_engine(database_url)
    client = ChatClient(load_settings(database_url=database_url), engine=engine)
    try:
        conversation_id = client.create_conversation(instructions="be brief", owner="ann")
        client.submit_message(conversation_id, "hello", owner="ann")
        whole = client.get_conversation(conversation_id, owner="ann")
        setup = client.get_conversation(conversation_id, owner="ann", messages=False)
        assert [m.content for m in whole.messages] == ["hello"]
        assert setup.messages == []
        assert setup.instructions == "be brief" and setup.id == conversation_id
        assert setup.status == whole.status and setup.model == whole.model
    finally:
        client.close()
        engine.dispose()
