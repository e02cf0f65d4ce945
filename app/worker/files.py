"""A user message's files in what the model is sent. Pure, no I/O: the transcript writes each
file as a part that names it (`parts`), and the step loop, once it has read the bytes (the
store), puts them in (`resolve`), so the transcript never holds a file's bytes.

    the file            its part (the form litellm takes for every provider)
    ------------------  ------------------------------------------------------------------
    an image            {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}
    a PDF               {"type": "file", "file": {"file_data": "data:application/pdf;...",
                         "filename": ...}}
    a text file         {"type": "text", "text": "[file name.txt]\\n<its text>"}
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
PDF = "application/pdf"
REFERENCE = "chatworker-file:"  # a part's placeholder: the file's id follows
# What a file costs in the estimate of a request (the providers count an image by its pixels:
# ~1,600 tokens for a 1,092 x 1,092 image at Anthropic, up to ~1,100 at OpenAI; a PDF's pages
# are sent as text and images).
IMAGE_TOKENS = 1_600
PDF_BYTES_PER_TOKEN = 50
TEXT_BYTES_PER_TOKEN = 3

Part = dict[str, Any]
# What a reference becomes when its file is gone (it cannot be while a conversation uses it).
GONE = "data:text/plain;base64," + base64.b64encode(b"[this file is no longer kept]").decode()


def parts(text: str | None, files: Sequence[Mapping[str, Any]]) -> list[Part]:
    """A user message's content as parts: its text, then a part per file naming it."""
    found: list[Part] = [{"type": "text", "text": text or ""}]
    for file in files:
        reference = REFERENCE + str(file["id"])
        media_type = str(file.get("media_type", ""))
        if media_type in IMAGE_TYPES:
            found.append({"type": "image_url", "image_url": {"url": reference}})
        elif media_type == PDF:
            document = {"file_data": reference, "filename": file.get("name") or "document.pdf"}
            found.append({"type": "file", "file": document})
        else:
            found.append({"type": "text", "text": reference})
    return found


# The first part of the message that shows the model what its tool calls returned beside text
# (a tool message holds text only at OpenAI): dropped for a model that takes no image.
TOOL_MEDIA = "The images and documents the tool calls above returned, in order:"


def tool_media(files: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The user message that carries the images and PDFs of a round of tool results (right
    after them: the form OpenAI takes, and Anthropic's, litellm merging it into the results'
    turn); None when they returned none."""
    shown = [file for file in files if _shown(file)]
    if not shown:
        return None
    return {"role": "user", "content": parts(TOOL_MEDIA, shown)}


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


def wanted(messages: Iterable[Mapping[str, Any]], *, media: bool = True) -> set[str]:
    """The ids of the files the messages name (without `media`: but the tools' media)."""
    chosen = (m for m in messages if media or not _is_tool_media(m.get("content")))
    return {reference[len(REFERENCE) :] for reference in _references(chosen)}


def _references(messages: Iterable[Mapping[str, Any]]) -> Iterable[str]:
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                found = _reference(part)
                if found is not None:
                    yield found


def _reference(part: Mapping[str, Any]) -> str | None:
    kind = part.get("type")
    if kind == "image_url":
        url = part["image_url"]["url"]
    elif kind == "file":
        url = part["file"]["file_data"]
    elif kind == "text":
        url = part.get("text")
    else:
        return None
    return url if isinstance(url, str) and url.startswith(REFERENCE) else None


def inline(media_type: str, name: str | None, data: bytes) -> str:
    """What a file's reference becomes: a data URL, or a text file's text with its name."""
    if media_type in IMAGE_TYPES or media_type == PDF:
        return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
    return f"[file {name or 'untitled'}]\n{data.decode('utf-8', errors='replace')}"


def resolve(
    messages: list[dict[str, Any]], inlined: Mapping[str, str], *, media: bool = True
) -> list[dict[str, Any]]:
    """`messages` with every file reference replaced by `inlined[id]`; a message with none is
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
    return isinstance(content, list) and bool(content) and content[0].get("text") == TOOL_MEDIA


def _resolved(part: Part, inlined: Mapping[str, str]) -> Part:
    reference = _reference(part)
    if reference is None:
        return part
    value = inlined[reference[len(REFERENCE) :]]
    kind = part["type"]
    if kind == "image_url":
        return {"type": "image_url", "image_url": {**part["image_url"], "url": value}}
    if kind == "file":
        return {"type": "file", "file": {**part["file"], "file_data": value}}
    return {"type": "text", "text": value}


__all__ = [
    "REFERENCE",
    "TOOL_MEDIA",
    "inline",
    "parts",
    "resolve",
    "tokens",
    "tool_media",
    "wanted",
]
