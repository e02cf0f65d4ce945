"""Files in user messages through the real litellm HTTP path, against the fake LLM server in both
wire formats, checking what arrived: an image as OpenAI's `image_url` and Anthropic's `image`
block, a PDF as OpenAI's `file` part and Anthropic's `document`, a text file as text; the bad
inputs refused with nothing written; a file stored once per owner, read back by its owner only,
and gone with the last conversation that uses it.
"""

from __future__ import annotations

import base64
import struct
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from app.client import ChatClient
from app.config import load_settings
from app.errors import FileNotFound, FileNotTaken, FileTooLarge, InvalidFile
from app.models.tables import file_uses, files
from app.testing import fakes
from app.testing.fake_llm import FakeLLMServer
from app.worker.lease_runner import Outcome
from app.worker.ports import ToolMedia, ToolResult
from tests.integration.test_loop import World
from tests.integration.test_structured_output import run
from tests.integration.test_user_in_the_loop import world_of

VISION = {"openai": "openai/gpt-4o-mini", "anthropic": "anthropic/claude-sonnet-4-5"}


def png(width: int = 2, height: int = 2, seed: int = 0) -> bytes:
    """A real PNG (grey pixels, `seed` making each one different)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + bytes([seed % 256]) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


@pytest.fixture
def world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, fakes.InMemoryTools({}))


def user_content(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts of the request's last user message, in either wire format."""
    (message,) = [m for m in body["messages"] if m["role"] == "user"][-1:]
    content: list[dict[str, Any]] = message["content"]
    return content


def counted(world: World, table: Any) -> int:
    with world.engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(table)).scalar_one())


@pytest.mark.parametrize("provider", VISION)
def test_an_image_and_a_pdf_reach_each_provider_as_it_takes_them(
    world: World, fake_llm: FakeLLMServer, provider: str
) -> None:
    model = VISION[provider]
    image = png(seed=7)
    fake_llm.script([{"text": "A grey square and a PDF."}])
    conversation_id = world.client.create_conversation(model=model)
    world.client.submit_message(
        conversation_id,
        "What are these?",
        files=[
            {"name": "square.png", "data": base64.b64encode(image).decode()},
            {"name": "invoice.pdf", "media_type": "application/pdf", "data": PDF},
            {"name": "notes.txt", "data": b"Ship by Friday."},
        ],
    )

    assert run(world, fake_llm, conversation_id, model) is Outcome.IDLE

    (request,) = fake_llm.requests()
    parts = user_content(request["body"])
    image_data = base64.b64encode(image).decode()
    pdf_data = base64.b64encode(PDF).decode()
    texts = [p["text"] for p in parts if p["type"] == "text"]
    assert texts[0] == "What are these?"
    assert "[file notes.txt]\nShip by Friday." in texts
    if provider == "openai":
        assert {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{image_data}"},
        } in parts
        (document,) = [p for p in parts if p["type"] == "file"]
        assert document["file"]["file_data"] == f"data:application/pdf;base64,{pdf_data}"
    else:
        (picture,) = [p for p in parts if p["type"] == "image"]
        assert picture["source"] == {
            "type": "base64",
            "media_type": "image/png",
            "data": image_data,
        }
        (document,) = [p for p in parts if p["type"] == "document"]
        assert document["source"]["data"] == pdf_data
    message = world.client.get_conversation(conversation_id).messages[0]
    assert [(f["name"], f["media_type"], f["size"]) for f in message.files] == [
        ("square.png", "image/png", len(image)),
        ("invoice.pdf", "application/pdf", len(PDF)),
        ("notes.txt", "text/plain", 15),
    ]
    stored = world.client.get_file(message.files[0]["id"])
    assert stored.data == image and stored.media_type == "image/png"


def test_a_queued_message_s_files_go_in_with_it(world: World, fake_llm: FakeLLMServer) -> None:
    model = VISION["openai"]
    fake_llm.script([{"text": "First."}, {"text": "Second."}])
    conversation_id = world.client.create_conversation(model=model)
    world.client.submit_message(conversation_id, "one")
    queued = world.client.submit_message(
        conversation_id, "two", on_busy="enqueue", files=[png(seed=3)]
    )
    assert queued.turn is not None and queued.turn.status == "queued"

    assert run(world, fake_llm, conversation_id, model) is Outcome.IDLE

    second = fake_llm.requests()[-1]["body"]
    assert [p["type"] for p in user_content(second)] == ["text", "image_url"]
    messages = world.client.get_conversation(conversation_id).messages
    assert [len(m.files) for m in messages] == [0, 0, 1, 0]


@pytest.mark.parametrize(
    ("files", "error", "says"),
    [
        ([{"data": PDF, "media_type": "image/png"}], InvalidFile, "says it is image/png, but"),
        ([{"data": png(), "media_type": "application/pdf"}], InvalidFile, "bytes are image/png"),
        ([{"data": b"\x00\x01\x02binary"}], InvalidFile, "none of the types taken"),
        ([{"data": "not base64!"}], InvalidFile, "is not base64"),
        ([{"data": b""}], InvalidFile, "files[0] is empty"),
        ([{"data": b"{oops", "media_type": "application/json"}], InvalidFile, "is not JSON"),
        ([{"data": png(), "name": "../etc/passwd"}], InvalidFile, "without a path"),
        ([{"data": png(), "size": 1}], InvalidFile, "unknown field(s) size"),
        ([png(seed=n) for n in range(4)], InvalidFile, "at most 3 files"),
        ([b"x" * 2_001], FileTooLarge, "over the 2,000 a file may be"),
        ([b"x" * 1_500, b"y" * 1_500], FileTooLarge, "over the 2,500 a message may carry"),
        ("a.png", InvalidFile, "files must be a list"),
    ],
)
def test_bad_files_are_refused_and_nothing_is_written(
    world: World, files: Any, error: type[Exception], says: str
) -> None:
    client = ChatClient(
        load_settings(
            database_url=str(world.engine.url.render_as_string(hide_password=False)),
            max_file_bytes=2_000,
            max_message_file_bytes=2_500,
            max_message_files=3,
        ),
        engine=world.engine,
        enqueue=lambda _: None,
    )
    conversation_id = client.create_conversation(model=VISION["openai"])
    with pytest.raises(error) as refused:
        client.submit_message(conversation_id, "look", files=files)
    assert says in str(refused.value)
    assert client.get_conversation(conversation_id).messages == []
    assert counted(world, files_table()) == 0


def files_table() -> Any:
    return files


@pytest.mark.parametrize(
    ("model", "kind"),
    [("openai/fake-model", "image/png"), ("openai/gpt-3.5-turbo", "application/pdf")],
)
def test_a_file_the_model_does_not_take_is_refused_naming_both(
    world: World, model: str, kind: str
) -> None:
    conversation_id = world.client.create_conversation(model=model)
    data = png() if kind == "image/png" else PDF
    with pytest.raises(FileNotTaken) as refused:
        world.client.submit_message(conversation_id, "look", files=[data])
    assert f"the model {model!r} does not take {kind} files" in str(refused.value)
    assert counted(world, files) == 0
    # a text file goes to any model, as text
    world.client.submit_message(conversation_id, "read", files=[b"plain words"])
    _rest(world, conversation_id)


def test_an_operator_may_say_what_an_unknown_model_takes(world: World) -> None:
    settings = load_settings(
        database_url=str(world.engine.url.render_as_string(hide_password=False)),
        model_file_kinds={"openai/fake-model": ["image"]},
    )
    client = ChatClient(settings, engine=world.engine, enqueue=lambda _: None)
    conversation_id = client.create_conversation(model="openai/fake-model")
    client.submit_message(conversation_id, "look", files=[png()])
    with pytest.raises(FileNotTaken):
        client.submit_message(conversation_id, "and this", files=[PDF], on_busy="enqueue")
    _rest(world, conversation_id)


def test_a_file_is_kept_once_per_owner_read_by_its_owner_and_goes_with_its_last_use(
    world: World,
) -> None:
    image = png(seed=9)
    first = world.client.create_conversation(model=VISION["openai"], owner="alice")
    second = world.client.create_conversation(model=VISION["openai"], owner="alice")
    other = world.client.create_conversation(model=VISION["openai"], owner="bob")
    world.client.submit_message(first, "a", files=[image])
    world.client.submit_message(second, "b", files=[image])
    world.client.submit_message(other, "c", files=[image])
    assert counted(world, files) == 2  # alice's once, bob's
    assert counted(world, file_uses) == 3
    (alice_file,) = world.client.get_conversation(first).messages[0].files
    assert world.client.get_file(alice_file["id"], owner="alice").data == image
    with pytest.raises(FileNotFound):
        world.client.get_file(alice_file["id"], owner="bob")
    with pytest.raises(FileNotFound):
        world.client.get_file("not-an-id", owner="alice")
    # a fork uses the file too; it goes only with the last conversation that uses it
    fork = world.client.fork_conversation(first, 1, owner="alice")
    for conversation_id in (first, second):
        _rest(world, conversation_id)
        world.client.delete_conversation(conversation_id)
    assert world.client.get_file(alice_file["id"], owner="alice").data == image
    _rest(world, fork.id)
    world.client.delete_conversation(fork.id)
    with pytest.raises(FileNotFound):
        world.client.get_file(alice_file["id"], owner="alice")
    assert counted(world, files) == 1  # bob's
    _rest(world, other)


def _rest(world: World, conversation_id: uuid.UUID) -> None:
    """Cancel the conversation's turn (no worker runs here), so it can be deleted."""
    view = world.client.get_conversation(conversation_id)
    if view.is_running:
        world.client.cancel(conversation_id)


# --- what tools return beside text --------------------------------------------------------------


def chart_tools() -> fakes.InMemoryTools:
    """A tool that returns a chart (an image) and its report (a PDF), as an MCP server's would
    (the MCP side of it: `tests/integration/test_mcp_provider.py`)."""

    def render_chart(label: str = "sales") -> ToolResult:
        return ToolResult(
            f"The {label} chart and its report. [image image/png, 70 bytes]",
            media=(ToolMedia("image/png", png(seed=5)), ToolMedia("application/pdf", PDF, "r.pdf")),
        )

    return fakes.InMemoryTools(
        {"render_chart": render_chart}, annotations={"render_chart": {"readOnlyHint": True}}
    )


@pytest.fixture
def chart_world(any_database_url: str) -> Iterator[World]:
    yield from world_of(any_database_url, chart_tools())


CHART_SCRIPT = [
    {"tool_calls": [{"id": "call_chart", "name": "render_chart", "arguments": {"label": "q3"}}]},
    {"text": "Sales rose in Q3."},
]


@pytest.mark.parametrize("provider", VISION)
def test_a_tool_s_image_reaches_a_vision_model_in_the_results_turn(
    chart_world: World, fake_llm: FakeLLMServer, provider: str
) -> None:
    world, model = chart_world, VISION[provider]
    fake_llm.script(CHART_SCRIPT)
    conversation_id = world.client.create_conversation(model=model, tools=["render_chart"])
    world.client.submit_message(conversation_id, "Chart Q3 sales.")

    assert run(world, fake_llm, conversation_id, model) is Outcome.IDLE

    _, second = (r["body"] for r in fake_llm.requests())
    image = base64.b64encode(png(seed=5)).decode()
    if provider == "openai":
        tool, media = second["messages"][-2:]
        assert tool["role"] == "tool" and "chart and its report" in tool["content"]
        assert media["role"] == "user"
        assert media["content"][1] == {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{image}"},
        }
        assert media["content"][2]["type"] == "file"
    else:  # (litellm puts the results and the media in one user turn, as Anthropic wants)
        turn = second["messages"][-1]
        assert turn["role"] == "user"
        kinds = [block["type"] for block in turn["content"]]
        assert kinds[0] == "tool_result" and "image" in kinds and "document" in kinds
        (picture,) = [b for b in turn["content"] if b["type"] == "image"]
        assert picture["source"]["data"] == image
    result = [
        m for m in world.client.get_conversation(conversation_id).messages if m.role == "tool"
    ]
    assert [f["media_type"] for f in result[0].files] == ["image/png", "application/pdf"]
    assert world.client.get_file(result[0].files[0]["id"]).data == png(seed=5)


def test_a_model_that_takes_no_image_reads_the_tool_s_description(
    chart_world: World, fake_llm: FakeLLMServer
) -> None:
    world, model = chart_world, "openai/fake-model"
    fake_llm.script(CHART_SCRIPT)
    conversation_id = world.client.create_conversation(model=model, tools=["render_chart"])
    world.client.submit_message(conversation_id, "Chart Q3 sales.")

    assert run(world, fake_llm, conversation_id, model) is Outcome.IDLE

    _, second = (r["body"] for r in fake_llm.requests())
    assert second["messages"][-1]["role"] == "tool"
    assert "[image image/png, 70 bytes]" in second["messages"][-1]["content"]
    assert "base64" not in str(second)


def test_an_edited_message_keeps_the_files_of_the_one_it_edits(world: World) -> None:
    conversation_id = world.client.create_conversation(model=VISION["openai"])
    world.client.submit_message(conversation_id, "What is this?", files=[png(seed=31)])
    _rest(world, conversation_id)
    edited = world.client.edit_message(conversation_id, 1, "What colour is this?")
    assert edited.turn is not None
    _rest(world, conversation_id)
    first, second = world.client.get_conversation(conversation_id, all_versions=True).messages
    assert second.content == "What colour is this?" and second.files == first.files
