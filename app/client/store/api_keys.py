"""API keys' rows: a key made (its text returned this once), listed, revoked, and the holder of a
presented key looked up (its text is parsed and hashed by `keys`): an owner, or an operator."""

from __future__ import annotations

import hmac
import secrets
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from app.client.keys import (
    OPERATOR_PREFIX,
    PREFIX,
    KeyRefused,
    check_owner_name,
    digest,
    parse_key,
)
from app.client.views import ApiKeyView
from app.errors import InvalidRequest, KeyNotFound
from app.models.tables import api_keys


def create_key(
    connection: Connection, owner: str, name: str = "", *, operator: bool = False
) -> tuple[ApiKeyView, str]:
    """A new key for `owner` (with `operator`, an operator's key, `owner` the operator's name):
    its listing and its text (shown this once)."""
    owner = check_owner_name(owner)
    if len(name) > 200:
        raise InvalidRequest(f"a key's name is at most 200 characters, not {len(name)}")
    key_id = uuid.uuid4()
    secret = secrets.token_urlsafe(32)
    now = datetime.now(UTC)
    connection.execute(
        insert(api_keys).values(
            id=key_id,
            owner=owner,
            name=name,
            secret_sha256=digest(secret),
            created_at=now,
            operator=operator,
        )
    )
    prefix = OPERATOR_PREFIX if operator else PREFIX
    view = ApiKeyView(key_id, owner, name, now, None, operator)
    return view, f"{prefix}{key_id.hex}_{secret}"


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


def owner_of_key(connection: Connection, text: str) -> str:
    """The owner of the key `text` (an operator's key: the operator's name; its text says which
    kind it is, and the row must agree); `KeyRefused` when it is not a live key."""
    key_id, secret, operator = parse_key(text)
    row = connection.execute(
        select(
            api_keys.c.owner, api_keys.c.secret_sha256, api_keys.c.revoked_at, api_keys.c.operator
        ).where(api_keys.c.id == key_id)
    ).one_or_none()
    if (
        row is None
        or not hmac.compare_digest(row.secret_sha256, digest(secret))
        or bool(row.operator) != operator
    ):
        raise KeyRefused("the API key is not valid", "invalid_api_key")
    if row.revoked_at is not None:
        raise KeyRefused("the API key was revoked", "api_key_revoked")
    return str(row.owner)


def _view(row: Any) -> ApiKeyView:
    revoked = None if row.revoked_at is None else _aware(row.revoked_at)
    return ApiKeyView(
        row.id, row.owner, row.name, _aware(row.created_at), revoked, bool(row.operator)
    )


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


__all__ = ["create_key", "list_keys", "owner_of_key", "revoke_key"]
