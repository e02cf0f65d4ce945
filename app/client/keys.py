"""An API key's text: `cwk_<id>_<secret>` (an owner's) or `cwo_<id>_<secret>` (an operator's),
parsed, and its secret hashed; the owner names keys are made for. The rows are `store/api_keys`'.

The prefix says which kind a key is, and the row must agree: an owner's key given the operator's
prefix is refused, so a key cannot be made more than it is. (Its kind shows in the text too, as a
secret scanner wants it.)

The id (a UUID's 32 hex digits) finds the row in one primary-key lookup, and the secret (32 random
bytes, URL-safe) is compared with the stored SHA-256 in constant time. The text is shown once, by
`create_key`; nothing can show it again.
"""

from __future__ import annotations

import hashlib
import uuid

from app.errors import InvalidRequest
from app.models import MAX_OWNER_CHARS

PREFIX = "cwk_"
OPERATOR_PREFIX = "cwo_"


class KeyRefused(Exception):
    """A presented key is malformed, unknown, wrong or revoked (`reason` says which)."""

    def __init__(self, reason: str, code: str) -> None:
        super().__init__(reason)
        self.code = code


def parse_key(text: str) -> tuple[uuid.UUID, str, bool]:
    """The id and secret of a key's text, and whether it is an operator's; `KeyRefused` when it
    does not look like a key."""
    operator = text.startswith(OPERATOR_PREFIX)
    if not (operator or text.startswith(PREFIX)):
        raise KeyRefused(f"an API key starts with {PREFIX!r}", "invalid_api_key")
    body = text[len(PREFIX) :]
    key_hex, _, secret = body.partition("_")
    try:
        key_id = uuid.UUID(hex=key_hex)
    except ValueError:
        raise KeyRefused("the API key is malformed", "invalid_api_key") from None
    if len(key_hex) != 32 or not secret:
        raise KeyRefused("the API key is malformed", "invalid_api_key")
    return key_id, secret, operator


def check_owner_name(owner: str) -> str:
    """A non-empty owner name of printable characters, at most `MAX_OWNER_CHARS`."""
    if not isinstance(owner, str) or not owner.strip():
        raise InvalidRequest("an owner is a non-empty name")
    if len(owner) > MAX_OWNER_CHARS or not owner.isprintable():
        raise InvalidRequest(
            f"an owner is at most {MAX_OWNER_CHARS} printable characters: {owner[:40]!r}"
        )
    return owner


def digest(secret: str) -> str:
    """The stored form of a key's secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def is_key(text: str) -> bool:
    """The text is meant as an API key (either kind), not a token."""
    return text.startswith((PREFIX, OPERATOR_PREFIX))


__all__ = [
    "OPERATOR_PREFIX",
    "PREFIX",
    "KeyRefused",
    "check_owner_name",
    "digest",
    "is_key",
    "parse_key",
]
