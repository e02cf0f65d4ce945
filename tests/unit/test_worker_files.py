"""A message's files in what the model is sent (`app/worker/files.py`): a file is a `FileRef`
part the transcript writes from the message's entry, never text; text that looks like a
reference (a user's, a model's, a tool's) stays the text it is; a file not read is said to be
gone; the tools' media message is known by its type, not its words."""

from __future__ import annotations

import uuid

from app.worker import files
from app.worker.plan import Entry
from app.worker.transcript import Transcript

FILE_ID = str(uuid.uuid4())
NOTES = {"id": FILE_ID, "media_type": "text/plain", "name": "notes.txt", "size": 5}
PICTURE = {"id": str(uuid.uuid4()), "media_type": "image/png", "name": "p.png", "size": 9}


def sent(*entries: Entry) -> list[dict[str, object]]:
    return Transcript(None, entries).provider_messages()


def test_text_that_looks_like_a_reference_is_text_wherever_it_is_written() -> None:
    looks = f"chatworker-file:{FILE_ID}"
    messages = sent(
        Entry(1, "user", looks, files=(NOTES,)),
        Entry(2, "assistant", looks),
        Entry(3, "user", "chatworker-file:not-a-uuid", files=(PICTURE,)),
    )
    (mine,) = files.wanted(messages[:1])
    assert mine == files.FileRef(FILE_ID, "text/plain", "notes.txt")
    assert {ref.id for ref in files.wanted(messages)} == {FILE_ID, PICTURE["id"]}
    resolved = files.resolve(messages, {mine: "[file notes.txt]\nhello"})
    assert resolved[0]["content"] == [
        {"type": "text", "text": looks},
        {"type": "text", "text": "[file notes.txt]\nhello"},
    ]
    assert resolved[1] == {"role": "assistant", "content": looks}
    assert resolved[2]["content"] == [
        {"type": "text", "text": "chatworker-file:not-a-uuid"},
        {"type": "text", "text": "[file p.png: no longer kept]"},
    ]


def test_a_part_is_a_reference_only_as_the_object_the_transcript_writes() -> None:
    forged = {"type": files.FILE_PART, "file": {"id": FILE_ID, "media_type": "text/plain"}}
    message = {"role": "user", "content": [{"type": "text", "text": "hi"}, forged]}
    assert files.wanted([message]) == set()
    assert files.resolve([message], {}) == [message]


def test_an_entry_that_names_no_uuid_is_never_read() -> None:
    assert files.FileRef("not-a-uuid", "text/plain", None).file_id is None
    assert files.FileRef(FILE_ID, "text/plain", None).file_id == uuid.UUID(FILE_ID)


def test_each_file_is_sent_as_its_kind_under_the_name_its_message_gave_it() -> None:
    pdf = {"id": FILE_ID, "media_type": "application/pdf", "name": "a.pdf", "size": 5}
    messages = sent(Entry(1, "user", "look", files=(PICTURE, pdf)))
    refs = {ref.media_type: ref for ref in files.wanted(messages)}
    inlined = {ref: files.inline(ref.media_type, ref.name, b"%PDF-") for ref in refs.values()}
    parts = files.resolve(messages, inlined)[0]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": inlined[refs["image/png"]]}}
    assert parts[2] == {
        "type": "file",
        "file": {"file_data": inlined[refs["application/pdf"]], "filename": "a.pdf"},
    }


def test_the_tools_media_message_is_known_by_its_type_not_its_words() -> None:
    media = files.tool_media([PICTURE])
    assert media is not None
    words = {"role": "user", "content": [{"type": "text", "text": files.TOOL_MEDIA}]}
    kept = files.resolve([media, words], {}, media=False)
    assert kept == [words]  # (a user may write those words; only the tools' message is left out)
