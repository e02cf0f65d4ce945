"""A file reaches a model only through its owner's message: text that looks like a file reference
(a user's, a model's) is sent as the text it is; the worker reads only files of the
conversation's owner that the conversation uses; file ids are random; another owner's file is
not found without its bytes being read; a name its bytes belie is refused; each upload is served
under its own name; and the owner's storage quota refuses a message's files or a fork past it,
writing nothing. (Through the HTTP API and its dialects: `tests/api/test_file_isolation.py`.)
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, func, select, update

from app.client import ChatClient
from app.config import load_settings
from app.errors import FileNotFound, InvalidFile, LargerThanStorageQuota, StorageQuotaExceeded
from app.models import RUNNING_STATUSES
from app.models.tables import conversations, file_names, file_uses, files, messages
from app.testing import fakes
from app.testing.fake_llm import FakeLLMServer
from app.worker.lease_runner import Outcome
from tests.integration.test_files import PDF, VISION, png
from tests.integration.test_loop import World
from tests.integration.test_structured_output import run
from tests.integration.test_user_in_the_loop import world_of

MODEL = VISION["openai"]
SECRET = "alice's secret notes: the vault code is 4711"


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    found = world_of(any_database_url, fakes.InMemoryTools({}))
    world = next(found)
    yield world
    while running := _running(world):  # (no worker ran them: each waiting turn cancelled)
        for conversation_id in running:
            world.client.cancel(conversation_id)
    next(found, None)


def _running(world: World) -> list[uuid.UUID]:
    with world.engine.connect() as connection:
        return list(
            connection.execute(
                select(conversations.c.id).where(conversations.c.status.in_(RUNNING_STATUSES))
            ).scalars()
        )


def client_with(world: World, **settings: Any) -> ChatClient:
    url = world.engine.url.render_as_string(hide_password=False)
    return ChatClient(
        load_settings(database_url=url, **settings), engine=world.engine, enqueue=lambda _: None
    )


def alices_files(world: World) -> tuple[uuid.UUID, dict[str, Any], uuid.UUID]:
    """Alice's conversation with her notes and a picture; the notes as her message shows them,
    and their stored id (what the worker reads)."""
    conversation_id = world.client.create_conversation(model=MODEL, owner="alice")
    world.client.submit_message(
        conversation_id,
        "keep these",
        owner="alice",
        files=[{"name": "notes.txt", "data": SECRET.encode()}, png(seed=77)],
    )
    notes = world.client.get_conversation(conversation_id).messages[0].files[0]
    with world.engine.connect() as connection:
        stored = connection.execute(
            select(files.c.id).where(files.c.owner == "alice", files.c.size == len(SECRET))
        ).scalar_one()
    return conversation_id, notes, stored


def leaked(body: Any) -> bool:
    """Whether a request carried any of Alice's bytes."""
    text = json.dumps(body)
    return SECRET in text or base64.b64encode(png(seed=77)).decode() in text


def rows(world: World) -> dict[str, int]:
    counts = {}
    with world.engine.connect() as connection:
        for table in (conversations, messages, files, file_names, file_uses):
            found = connection.execute(select(func.count()).select_from(table)).scalar_one()
            counts[table.name] = int(found)
    return counts


# --- references are structural --------------------------------------------------------------------


@pytest.mark.parametrize("which", ["shown id", "stored id", "not a uuid"])
def test_text_that_looks_like_a_file_reference_is_sent_as_text_and_reads_no_one_s_file(
    world: World, fake_llm: FakeLLMServer, which: str
) -> None:
    _, notes, stored = alices_files(world)
    target = {"shown id": notes["id"], "stored id": str(stored), "not a uuid": "not-a-uuid"}
    text = f"chatworker-file:{target[which]}"
    fake_llm.script([{"text": "Noted."}])
    bob = world.client.create_conversation(model=MODEL, owner="bob")
    world.client.submit_message(bob, text, owner="bob", files=[b"bob's own list"])

    assert run(world, fake_llm, bob, MODEL) is Outcome.IDLE

    (request,) = fake_llm.requests()
    parts = request["body"]["messages"][-1]["content"]
    assert parts[0] == {"type": "text", "text": text}
    assert {"type": "text", "text": "[file untitled]\nbob's own list"} in parts
    assert not leaked(request["body"])


def test_a_model_s_text_that_looks_like_a_file_reference_is_sent_back_as_text(
    world: World, fake_llm: FakeLLMServer
) -> None:
    _, _, stored = alices_files(world)
    echoed = f"chatworker-file:{stored}"
    fake_llm.script([{"text": echoed}, {"text": "Done."}])
    bob = world.client.create_conversation(model=MODEL, owner="bob")
    world.client.submit_message(bob, "say it", owner="bob")
    assert run(world, fake_llm, bob, MODEL) is Outcome.IDLE
    world.client.submit_message(bob, "and this?", owner="bob", files=[png(seed=5)])
    assert run(world, fake_llm, bob, MODEL) is Outcome.IDLE

    second = fake_llm.requests()[-1]["body"]
    assert {"role": "assistant", "content": echoed} in second["messages"]
    assert not leaked(second)


def test_the_worker_reads_only_files_of_the_conversation_s_owner_that_it_uses(
    world: World, fake_llm: FakeLLMServer
) -> None:
    alice, _, stored = alices_files(world)
    other = world.client.create_conversation(model=MODEL, owner="alice")
    bob = world.client.create_conversation(model=MODEL, owner="bob")

    assert world.store.read_files(alice, {stored}) == {stored: SECRET.encode()}
    assert world.store.read_files(other, {stored}) == {}  # hers, but this one does not use it
    assert world.store.read_files(bob, {stored}) == {}

    # A message row that names her file anyway (written by hand): the model is told the file
    # is not kept, and never gets its bytes.
    world.client.submit_message(bob, "look", owner="bob", files=[b"bob's"])
    with world.engine.begin() as connection:
        entry = {"id": str(stored), "media_type": "text/plain", "name": "notes.txt", "size": 1}
        connection.execute(
            update(messages).where(messages.c.conversation_id == bob).values(files=[entry])
        )
    fake_llm.script([{"text": "Nothing there."}])
    assert run(world, fake_llm, bob, MODEL) is Outcome.IDLE
    (request,) = fake_llm.requests()
    parts = request["body"]["messages"][-1]["content"]
    assert {"type": "text", "text": "[file notes.txt: no longer kept]"} in parts
    assert not leaked(request["body"])


# --- ids, names, not found -----------------------------------------------------------------------


def test_ids_are_random_bytes_are_kept_once_per_owner_and_each_upload_keeps_its_name(
    world: World,
) -> None:
    data = b"the same bytes"
    first = world.client.create_conversation(model=MODEL, owner="alice")
    world.client.submit_message(first, "a", owner="alice", files=[{"name": "a.txt", "data": data}])
    world.client.submit_message(
        first,
        "b",
        owner="alice",
        on_busy="enqueue",
        files=[{"name": "b.md", "data": data}, {"name": "a.txt", "data": data}],
    )
    bob = world.client.create_conversation(model=MODEL, owner="bob")
    world.client.submit_message(bob, "c", owner="bob", files=[{"name": "a.txt", "data": data}])

    with world.engine.connect() as connection:
        kept = connection.execute(select(files.c.id, files.c.owner)).all()
    assert sorted(owner for _, owner in kept) == ["alice", "bob"]  # once per owner
    assert all(uuid.UUID(str(found)).version == 4 for found, _ in kept)
    (shown,) = world.client.get_conversation(first).messages[0].files
    (bobs,) = world.client.get_conversation(bob).messages[0].files
    assert shown["id"] != bobs["id"]
    assert world.client.get_file(shown["id"], owner="alice").name == "a.txt"
    with pytest.raises(FileNotFound):
        world.client.get_file(shown["id"], owner="bob")
    names = {row.name: row.id for row in _names(world)}  # (a.txt sent twice: one name)
    assert set(names) == {"a.txt", "b.md"}
    markdown = world.client.get_file(names["b.md"], owner="alice")
    assert (markdown.name, markdown.media_type, markdown.data) == ("b.md", "text/markdown", data)


def _names(world: World) -> list[Any]:
    with world.engine.connect() as connection:
        return list(
            connection.execute(
                select(file_names.c.id, file_names.c.name)
                .join(files, files.c.id == file_names.c.file_id)
                .where(files.c.owner == "alice")
            ).all()
        )


def test_another_owner_s_file_is_not_found_without_its_bytes_being_read(world: World) -> None:
    _, notes, stored = alices_files(world)
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(world.engine, "before_cursor_execute", seen)
    try:
        for found in (notes["id"], stored, uuid.uuid4()):
            with pytest.raises(FileNotFound):
                world.client.get_file(found, owner="bob")
        refused = list(statements)
        statements.clear()
        assert world.client.get_file(notes["id"], owner="alice").data == SECRET.encode()
    finally:
        event.remove(world.engine, "before_cursor_execute", seen)
    assert refused and all("files.data" not in statement for statement in refused)
    assert all("files.owner" in statement for statement in refused)
    assert any("files.data" in statement for statement in statements)  # (the check can see it)


# --- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        (
            "photo.png",
            PDF,
            "its name 'photo.png' says image/png, but its bytes are application/pdf",
        ),
        ("report.pdf", b"plain words", "says application/pdf, but its bytes are text"),
        ("notes.TXT", png(), "says text/plain, but its bytes are image/png"),
        ("data.json", b"{oops", "says it is application/json, but is not JSON"),
    ],
)
def test_a_name_its_bytes_belie_is_refused_and_nothing_is_written(
    world: World, name: str, data: bytes, says: str
) -> None:
    conversation_id = world.client.create_conversation(model=MODEL)
    before = rows(world)
    with pytest.raises(InvalidFile) as refused:
        world.client.submit_message(conversation_id, "look", files=[{"name": name, "data": data}])
    assert says in str(refused.value)
    assert rows(world) == before


def test_a_name_that_agrees_with_its_bytes_says_which_text_it_is(world: World) -> None:
    conversation_id = world.client.create_conversation(model=MODEL)
    world.client.submit_message(
        conversation_id,
        "look",
        files=[
            {"name": "table.csv", "data": b"a,b\n1,2\n"},
            {"name": "server.log", "data": b"started"},
            {"name": "scan.PDF", "data": PDF},
        ],
    )
    shown = world.client.get_conversation(conversation_id).messages[0].files
    assert [f["media_type"] for f in shown] == ["text/csv", "text/plain", "application/pdf"]


# --- the storage quota -------------------------------------------------------------------------


def test_files_past_the_owner_s_storage_quota_are_refused_and_nothing_is_written(
    world: World,
) -> None:
    client = client_with(world, owner_storage_bytes=1_000)
    conversation_id = client.create_conversation(model=MODEL, owner="carol")
    before = rows(world)
    with pytest.raises(LargerThanStorageQuota) as alone:
        client.submit_message(conversation_id, "big", owner="carol", files=[b"x" * 1_001])
    assert "holds 1,001 bytes, more than the 1,000" in str(alone.value)
    assert "CHATWORKER_OWNER_STORAGE_BYTES" in str(alone.value)
    assert rows(world) == before

    client.submit_message(conversation_id, "one", owner="carol", files=[b"a" * 600])
    before = rows(world)
    with pytest.raises(StorageQuotaExceeded) as past:
        client.submit_message(
            conversation_id, "two", owner="carol", on_busy="enqueue", files=[b"b" * 500]
        )
    assert not isinstance(past.value, LargerThanStorageQuota)
    assert "would add 500 bytes to the 603 the owner stores" in str(past.value)
    assert rows(world) == before
    # bytes the owner keeps already add nothing: sent again, they are taken
    client.submit_message(
        conversation_id, "again", owner="carol", on_busy="enqueue", files=[b"a" * 600]
    )
    # another owner has room of its own
    other = client.create_conversation(model=MODEL, owner="dave")
    client.submit_message(other, "mine", owner="dave", files=[b"b" * 500])


def test_a_fork_past_the_owner_s_storage_quota_is_refused_and_nothing_is_written(
    world: World,
) -> None:
    client = client_with(world, owner_storage_bytes=1_000)
    conversation_id = client.create_conversation(model=MODEL, owner="erin")
    client.submit_message(conversation_id, "x" * 400, owner="erin")
    client.cancel(conversation_id)
    client.fork_conversation(conversation_id, 1, owner="erin")  # 800 bytes stored
    before = rows(world)
    with pytest.raises(StorageQuotaExceeded) as past:
        client.fork_conversation(conversation_id, 1, owner="erin")
    assert "the fork would add 400 bytes to the 800 the owner stores" in str(past.value)
    assert rows(world) == before

    large = client.create_conversation(model=MODEL, owner="frank")
    client.submit_message(large, "y" * 1_200, owner="frank")  # (a message is not a fork)
    client.cancel(large)
    before = rows(world)
    with pytest.raises(LargerThanStorageQuota):
        client.fork_conversation(large, owner="frank")
    assert rows(world) == before
