"""A database that does not answer is the client's `DatabaseUnavailable` (its callers, the API
first, need no SQLAlchemy), on the client's own uses of an engine only: another user of the same
engine still sees SQLAlchemy's errors."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.client import ChatClient
from app.config import load_settings
from app.db import make_engine
from app.errors import DatabaseUnavailable

UNREACHABLE = "postgresql+psycopg://postgres@127.0.0.1:1/nothing"


def test_an_unreachable_database_is_unavailable_to_the_client_only() -> None:
    engine = make_engine(UNREACHABLE, connect_args={"connect_timeout": 2})
    client = ChatClient(load_settings(database_url=UNREACHABLE), engine=engine)
    try:
        with pytest.raises(DatabaseUnavailable) as raised:
            client.get_conversation(uuid.uuid4())
        assert isinstance(raised.value.__cause__, Exception)  # (the driver's error kept)
        with pytest.raises(DatabaseUnavailable):
            client.create_conversation()
        with pytest.raises(DatabaseUnavailable):
            client.admin.list_tools()
        with pytest.raises(OperationalError), engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    finally:
        client.close()
        engine.dispose()


def test_no_free_connection_in_time_is_unavailable_and_the_rest_is_unchanged(
    database_url: str,
) -> None:
    engine = make_engine(database_url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    client = ChatClient(load_settings(database_url=database_url), engine=engine)
    try:
        conversation_id = client.create_conversation()
        with engine.connect():  # (the pool's one connection, held)
            with pytest.raises(DatabaseUnavailable):
                client.get_conversation(conversation_id)
            with pytest.raises(PoolTimeout), engine.connect():
                pass
        assert client.get_conversation(conversation_id).id == conversation_id
    finally:
        client.close()
        engine.dispose()
