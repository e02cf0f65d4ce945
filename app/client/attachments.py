"""The files a user message carries, checked before anything is written: their bytes (given as
bytes, base64 or a `data:` URL), their media type read from the bytes (`app/files/media.py`: a
name, or a claimed type, that the bytes belie is refused), the size caps, and whether the
conversation's model takes that kind of file (`app/model_profile.py`). No I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app import model_profile
from app.errors import FileNotTaken, FileTooLarge, InvalidFile
from app.files.media import TEXT, TEXT_TYPES, CheckedFile, agrees, named_type, sniff
from app.models import MAX_FILE_NAME_CHARS

_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?(;[\w-]+=[\w.-]+)*;base64,(.*)$", re.DOTALL)
_FIELDS = frozenset({"name", "media_type", "data"})


@dataclass(frozen=True)
class Limits:
    """The settings a message's files are checked against."""

    file_bytes: int
    message_bytes: int
    files: int
    # model -> the file kinds it takes (`CHATWORKER_MODEL_FILE_KINDS`), over litellm's map
    declared: Mapping[str, Sequence[str]] = field(default_factory=dict)


def check_files(files: Sequence[Any] | None, limits: Limits) -> tuple[CheckedFile, ...]:
    """Each file checked (`InvalidFile`, `FileTooLarge` name it by its place); () for none.
    Whether the model takes them is `check_taken`'s."""
    if not files:
        return ()
    if isinstance(files, str | bytes | Mapping) or not isinstance(files, Sequence):
        raise InvalidFile("files must be a list of files ({name, media_type, data})")
    if len(files) > limits.files:
        raise InvalidFile(f"files: at most {limits.files} files a message, not {len(files)}")
    checked = [_check(item, f"files[{index}]", limits) for index, item in enumerate(files)]
    total = sum(len(item.data) for item in checked)
    if total > limits.message_bytes:
        raise FileTooLarge(
            f"files: {total:,} bytes together, over the {limits.message_bytes:,} a message may "
            "carry (CHATWORKER_MAX_MESSAGE_FILE_BYTES)"
        )
    return tuple(checked)


def check_taken(checked: Sequence[CheckedFile], model: str, limits: Limits) -> None:
    """`FileNotTaken` naming the model and the media type of a file the model does not take."""
    for index, item in enumerate(checked):
        if item.kind != TEXT and not model_profile.takes(model, item.kind, limits.declared):
            raise FileNotTaken(
                f"files[{index}]: the model {model!r} does not take {item.media_type} files "
                f"(litellm's model map says it has no {model_profile.FEATURES[item.kind]}); use a "
                "model that does, or send the file's content as text"
            )


def _check(item: Any, where: str, limits: Limits) -> CheckedFile:
    if isinstance(item, bytes):
        item = {"data": item}
    if not isinstance(item, Mapping):
        raise InvalidFile(f"{where} must be an object: {{name, media_type, data}}")
    unknown = set(item) - _FIELDS
    if unknown:
        raise InvalidFile(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    name = item.get("name")
    if name is not None and (
        not isinstance(name, str)
        or not name.strip()
        or len(name) > MAX_FILE_NAME_CHARS
        or not name.isprintable()
        or any(mark in name for mark in "/\\")
    ):
        raise InvalidFile(
            f"{where}.name must be a file name of 1-{MAX_FILE_NAME_CHARS} printable characters, "
            "without a path"
        )
    claimed = item.get("media_type")
    if claimed is not None and not isinstance(claimed, str):
        raise InvalidFile(f"{where}.media_type must be a string such as image/png")
    data, in_url = _bytes(item.get("data"), where)
    claimed = claimed or in_url
    if not data:
        raise InvalidFile(f"{where} is empty")
    if len(data) > limits.file_bytes:
        raise FileTooLarge(
            f"{where} is {len(data):,} bytes, over the {limits.file_bytes:,} a file may be "
            "(CHATWORKER_MAX_FILE_BYTES)"
        )
    found = sniff(data)
    if found is None:
        raise InvalidFile(
            f"{where}: its bytes are none of the types taken (PNG, JPEG, GIF or WebP images, "
            "PDF, UTF-8 text)"
        )
    said = named_type(name)
    if said is not None and not agrees(found, said):
        raise InvalidFile(
            f"{where}: its name {name!r} says {said}, but its bytes are {_described(found)}: "
            "name it for what it is"
        )
    if claimed is None and said is not None and found == "text/plain":
        claimed = said  # (data.csv: text/csv)
    media_type = _agreed(found, claimed, data, where)
    return CheckedFile(data, hashlib.sha256(data).hexdigest(), media_type, name)


def _bytes(data: Any, where: str) -> tuple[bytes, str | None]:
    """The file's bytes, and the media type a data URL named."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data), None
    if not isinstance(data, str):
        raise InvalidFile(f"{where}.data must be the file's bytes in base64, or a data: URL")
    media_type = None
    url = _DATA_URL.match(data)
    if url is not None:
        media_type, data = url.group(1), url.group(3)
    elif data.startswith("data:"):
        raise InvalidFile(f"{where}.data is a data: URL without ;base64")
    try:
        return base64.b64decode(data, validate=True), media_type
    except (binascii.Error, ValueError):
        raise InvalidFile(f"{where}.data is not base64 (nor a data: URL)") from None


def _agreed(found: str, claimed: str | None, data: bytes, where: str) -> str:
    """The media type to keep: the one the bytes show; a claim they belie is refused (a text
    file may say which text it is)."""
    if claimed is None:
        return found
    claimed = claimed.split(";", 1)[0].strip().lower()
    if found == "text/plain" and claimed in TEXT_TYPES:
        if claimed == "application/json":
            try:
                json.loads(data)
            except (ValueError, RecursionError):  # (nested past the parser)
                raise InvalidFile(f"{where} says it is application/json, but is not JSON") from None
        return claimed
    if claimed != found:
        raise InvalidFile(
            f"{where} says it is {claimed}, but its bytes are {_described(found)}: send it "
            "with its real media type"
        )
    return found


def _described(media_type: str) -> str:
    return "text" if media_type == "text/plain" else media_type


__all__ = ["Limits", "check_files", "check_taken"]
