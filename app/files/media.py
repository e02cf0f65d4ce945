"""What a file is, read from its bytes: its media type (`sniff`), its kind, whether a file name's
extension agrees with it (`named_type`), and a file checked and ready to keep. No I/O.

    kind    media types (from the bytes)                     names that say so
    ------  -----------------------------------------------  ---------------------------------
    image   image/png, image/jpeg, image/gif, image/webp     .png .jpg .jpeg .gif .webp
    pdf     application/pdf                                  .pdf
    text    text/plain, text/markdown, text/csv,             .txt .md .markdown .csv .json
            application/json (UTF-8, no NUL)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

IMAGE, PDF, TEXT = "image", "pdf", "text"
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
TEXT_TYPES = ("text/plain", "text/markdown", "text/csv", "application/json")

# The first bytes of each binary type taken (WebP: RIFF, a size, then WEBP).
MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)

# The media type a name's extension says (its text types all read as text/plain from bytes).
EXTENSIONS = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "pdf": "application/pdf",
    "txt": "text/plain",
    "md": "text/markdown",
    "markdown": "text/markdown",
    "csv": "text/csv",
    "json": "application/json",
}


@dataclass(frozen=True)
class CheckedFile:
    """A file ready to store: its bytes, their hash, the media type read from them, its name."""

    data: bytes
    sha256: str
    media_type: str
    name: str | None

    @property
    def kind(self) -> str:
        return kind_of(self.media_type)

    def reference(self, file_id: str, name_id: str) -> dict[str, Any]:
        """What a message keeps of it (`messages.files`): the stored bytes' id (what the worker
        reads), the id of the name it was sent under (what the owner is shown and reads back)."""
        return {
            "id": file_id,
            "name_id": name_id,
            "media_type": self.media_type,
            "name": self.name,
            "size": len(self.data),
        }


def shown(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A message's file as its owner is shown it: `id` the id of the name it was sent under
    (what `GET /v1/files/{id}` serves it as; the file's own id for an entry kept before names
    had ids), its media type, name and size. The stored bytes' id stays inside."""
    return {
        "id": entry.get("name_id") or entry["id"],
        "media_type": entry.get("media_type"),
        "name": entry.get("name"),
        "size": entry.get("size"),
    }


def kind_of(media_type: str) -> str:
    if media_type in IMAGE_TYPES:
        return IMAGE
    if media_type == "application/pdf":
        return PDF
    return TEXT


def sniff(data: bytes) -> str | None:
    """The media type the bytes themselves show, or None for none taken here."""
    for magic, media_type in MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if b"\x00" in data:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return "text/plain"


def named_type(name: str | None) -> str | None:
    """The media type a file name's extension says (`photo.PNG`: image/png), or None when it
    names none of the types taken (no extension, `.log`, `.py`: the bytes alone decide)."""
    if not name or "." not in name:
        return None
    return EXTENSIONS.get(name.rsplit(".", 1)[1].lower())


def agrees(found: str, said: str) -> bool:
    """Whether bytes read as `found` may be what `said` says: the same type, or text said to be
    a kind of text."""
    return found == said or (found == "text/plain" and said in TEXT_TYPES)


__all__ = [
    "IMAGE",
    "IMAGE_TYPES",
    "PDF",
    "TEXT",
    "TEXT_TYPES",
    "CheckedFile",
    "agrees",
    "kind_of",
    "named_type",
    "shown",
    "sniff",
]
