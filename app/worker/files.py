"""A user message's files in what the model is sent. Pure, no I/O: the transcript writes each
file as a part that names it (`parts`): a `FileRef`, an object no text can become, so a user's or
a model's text that looks like a reference is sent as the text it is. The step loop, once it has
read the bytes (the store: only files of the conversation's owner that the conversation uses),
puts them in (`resolve`), so the transcript never holds a file's bytes.

    the file            its part (the form litellm takes for every provider)
    ------------------  ------------------------------------------------------------------
    an image            {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}
    a PDF               {"type": "file", "file": {"file_data": "data:application/pdf;...",
                         "filename": ...}}
    a text file         {"type": "text", "text": "[file name.txt]\\n<its text>"}
    one no longer kept  {"type": "text", "text": "[file name.txt: no longer kept]"}
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
PDF = "application/pdf"
FILE_PART = "chatworker_file"  # a part's placeholder, holding a `FileRef` (never sent)
# What a file costs in the estimate of a request (the providers count an image by its pixels:
# ~1,600 tokens for a 1,092 x 1,092 image at Anthropic, up to ~1,100 at OpenAI; a PDF's pages
# are sent as text and images).
IMAGE_TOKENS = 1_600
PDF_BYTES_PER_TOKEN = 50
TEXT_BYTES_PER_TOKEN = 3

Part = dict[str, Any]


@dataclass(frozen=True)
class FileRef:
    """A file a message carries, as its entry in `messages.files` names it: the stored bytes'
    id, and the media type and name it was sent as."""

    id: str
    media_type: str
    name: str | None

    @classmethod
    def of(cls, file: Mapping[str, Any]) -> FileRef:
        name = file.get("name")
        media_type = str(file.get("media_type", ""))
        return cls(str(file["id"]), media_type, None if name is None else str(name))

    @property
    def file_id(self) -> uuid.UUID | None:
        """The stored bytes' id; None for an entry that names none (never read)."""
        try:
            return uuid.UUID(self.id)
        except ValueError:
            return None


def parts(text: str | None, files: Sequence[Mapping[str, Any]]) -> list[Part]:
    """A user message's content as parts: its text, then a part per file naming it."""
    found: list[Part] = [{"type": "text", "text": text or ""}]
    found.extend({"type": FILE_PART, "file": FileRef.of(file)} for file in files)
    return found


# The first part of the message that shows the model what its tool calls returned beside text
# (a tool message holds text only at OpenAI): dropped for a model that takes no image.
TOOL_MEDIA = "The images and documents the tool calls above returned, in order:"


class ToolMediaParts(list[Part]):
    """The content of a tool media message: known by its type, never by its text."""


def tool_media(files: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The user message that carries the images and PDFs of a round of tool results (right
    after them: the form OpenAI takes, and Anthropic's, litellm merging it into the results'
    turn); None when they returned none."""
    shown = [file for file in files if _shown(file)]
    if not shown:
        return None
    return {"role": "user", "content": ToolMediaParts(parts(TOOL_MEDIA, shown))}


def _shown(file: Mapping[str, Any]) -> bool:
    media_type = str(file.get("media_type", ""))
    return media_type in IMAGE_TYPES or media_type == PDF


def tokens(files: Iterable[Mapping[str, Any]]) -> int:
    """The estimate of what the files add to a request."""
    total = 0
    for file in files:
        media_type, size = str(file.get("media_type", "")), int(file.get("size") or 0)
        if media_type in IMAGE_TYPES:
            total += IMAGE_TOKENS
        elif media_type == PDF:
            total += max(IMAGE_TOKENS, size // PDF_BYTES_PER_TOKEN)
        else:
            total += size // TEXT_BYTES_PER_TOKEN
    return total


def wanted(messages: Iterable[Mapping[str, Any]], *, media: bool = True) -> set[FileRef]:
    """The files the messages carry (without `media`: but the tools' media)."""
    chosen = (m for m in messages if media or not _is_tool_media(m.get("content")))
    return set(_references(chosen))


def _references(messages: Iterable[Mapping[str, Any]]) -> Iterable[FileRef]:
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                found = _reference(part)
                if found is not None:
                    yield found


def _reference(part: Mapping[str, Any]) -> FileRef | None:
    """The file a part is the placeholder of: only a `FileRef` object, never text."""
    found = part.get("file") if part.get("type") == FILE_PART else None
    return found if isinstance(found, FileRef) else None


def inline(media_type: str, name: str | None, data: bytes) -> str:
    """What a file's reference becomes: a data URL, or a text file's text with its name."""
    if media_type in IMAGE_TYPES or media_type == PDF:
        return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
    return f"[file {name or 'untitled'}]\n{data.decode('utf-8', errors='replace')}"


def resolve(
    messages: list[dict[str, Any]], inlined: Mapping[FileRef, str | None], *, media: bool = True
) -> list[dict[str, Any]]:
    """`messages` with every file's part made from `inlined[ref]` (None: a file not read, no
    longer kept or not the conversation's owner's, said in text); a message with none is
    the same dict (the transcript's are shared: those with files are copied). Without `media`
    (a model that takes no image), the tools' media messages are left out: their results'
    text describes them."""
    out = []
    for message in messages:
        content = message.get("content")
        if not media and _is_tool_media(content):
            continue
        if isinstance(content, list) and any(_reference(part) for part in content):
            out.append({**message, "content": [_resolved(part, inlined) for part in content]})
        else:
            out.append(message)
    return out


def _is_tool_media(content: Any) -> bool:
    return isinstance(content, ToolMediaParts)


def _resolved(part: Part, inlined: Mapping[FileRef, str | None]) -> Part:
    ref = _reference(part)
    if ref is None:
        return part
    value = inlined.get(ref)
    if value is None:
        return {"type": "text", "text": f"[file {ref.name or 'untitled'}: no longer kept]"}
    if ref.media_type in IMAGE_TYPES:
        return {"type": "image_url", "image_url": {"url": value}}
    if ref.media_type == PDF:
        return {
            "type": "file",
            "file": {"file_data": value, "filename": ref.name or "document.pdf"},
        }
    return {"type": "text", "text": value}


__all__ = [
    "FILE_PART",
    "TOOL_MEDIA",
    "FileRef",
    "inline",
    "parts",
    "resolve",
    "tokens",
    "tool_media",
    "wanted",
]
