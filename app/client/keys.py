"""API keys: made, listed, revoked, and checked when a request presents one.

A key's text is `cwk_<id>_<secret>`: the id (a UUID's 32 hex digits) finds the row in one primary-
key lookup, and the secret (32 random bytes, URL-safe) is compared with the stored SHA-256 in
constant time. The text is shown once, by `create_key`; nothing can show it again.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, insert, select, update

from app.client.views import ApiKeyView
from app.errors import InvalidRequest, KeyNotFound
from app.models import MAX_OWNER_CHARS, ApiKey

api_keys = cast(Table, ApiKey.__table__)

PREFIX = "cwk_"


def create_key(connection: Connection, owner: str, name: str = "") -> tuple[ApiKeyView, str]:
    """A new key for `owner`: its listing and its text (shown this once)."""
    owner = check_owner_name(owner)
    if len(name) > 200:
        raise InvalidRequest(f"a key's name is at most 200 characters, not {len(name)}")
    key_id = uuid.uuid4()
    secret = secrets.token_urlsafe(32)
    now = datetime.now(UTC)
    connection.execute(
        insert(api_keys).values(
            id=key_id, owner=owner, name=name, secret_sha256=_digest(secret), created_at=now
        )
    )
    return ApiKeyView(key_id, owner, name, now, None), f"{PREFIX}{key_id.hex}_{secret}"


def list_keys(connection: Connection, owner: str | None = None) -> list[ApiKeyView]:
    """Every key (or one owner's), oldest first, revoked ones included."""
    query = select(api_keys).order_by(api_keys.c.created_at, api_keys.c.id)
    if owner is not None:
        query = query.where(api_keys.c.owner == owner)
    return [_view(row) for row in connection.execute(query)]


def revoke_key(connection: Connection, key_id: uuid.UUID) -> ApiKeyView:
    """The key, revoked from now on (revoking twice keeps the first time); `KeyNotFound`."""
    connection.execute(
        update(api_keys)
        .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
        .values(revoked_at=datetime.now(UTC))
    )
    row = connection.execute(select(api_keys).where(api_keys.c.id == key_id)).one_or_none()
    if row is None:
        raise KeyNotFound(f"no API key {key_id}")
    return _view(row)


class KeyRefused(Exception):
    """A presented key is malformed, unknown, wrong or revoked (`reason` says which)."""

    def __init__(self, reason: str, code: str) -> None:
        super().__init__(reason)
        self.code = code


def owner_of_key(connection: Connection, text: str) -> str:
    """The owner of the key `text`; `KeyRefused` when it is not a live key."""
    key_id, secret = parse_key(text)
    row = connection.execute(
        select(api_keys.c.owner, api_keys.c.secret_sha256, api_keys.c.revoked_at).where(
            api_keys.c.id == key_id
        )
    ).one_or_none()
    if row is None or not hmac.compare_digest(row.secret_sha256, _digest(secret)):
        raise KeyRefused("the API key is not valid", "invalid_api_key")
    if row.revoked_at is not None:
        raise KeyRefused("the API key was revoked", "api_key_revoked")
    return str(row.owner)


def parse_key(text: str) -> tuple[uuid.UUID, str]:
    """The id and secret of a key's text; `KeyRefused` when it does not look like a key."""
    if not text.startswith(PREFIX):
        raise KeyRefused(f"an API key starts with {PREFIX!r}", "invalid_api_key")
    body = text[len(PREFIX) :]
    key_hex, _, secret = body.partition("_")
    try:
        key_id = uuid.UUID(hex=key_hex)
    except ValueError:
        raise KeyRefused("the API key is malformed", "invalid_api_key") from None
    if len(key_hex) != 32 or not secret:
        raise KeyRefused("the API key is malformed", "invalid_api_key")
    return key_id, secret


def check_owner_name(owner: str) -> str:
    """A non-empty owner name of printable characters, at most `MAX_OWNER_CHARS`."""
    if not isinstance(owner, str) or not owner.strip():
        raise InvalidRequest("an owner is a non-empty name")
    if len(owner) > MAX_OWNER_CHARS or not owner.isprintable():
        raise InvalidRequest(
            f"an owner is at most {MAX_OWNER_CHARS} printable characters: {owner[:40]!r}"
        )
    return owner


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _view(row: Any) -> ApiKeyView:
    revoked = None if row.revoked_at is None else _aware(row.revoked_at)
    return ApiKeyView(row.id, row.owner, row.name, _aware(row.created_at), revoked)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
