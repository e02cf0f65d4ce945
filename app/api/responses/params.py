"""What both of OpenAI's dialects (Responses, Chat Completions) read the same way from a request
body: its parameters screened (taken, or refused naming the parameter), its model, a flag, its
metadata. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from app.api.responses.errors import Unsupported
from app.client.checks import check_metadata
from app.errors import InvalidRequest


def screen(body: Any, taken: Collection[str], unsupported: Mapping[str, Any]) -> dict[str, Any]:
    """The body, a JSON object whose every parameter is `taken`, or `unsupported` with its
    default value (anything else: a 400 naming it)."""
    if not isinstance(body, dict):
        raise Unsupported("the body must be a JSON object")
    for name in body:
        if name in taken:
            continue
        if name in unsupported:
            if body[name] is not None and body[name] != unsupported[name]:
                raise Unsupported(f"{name} is not supported by this server", param=name)
            continue
        raise Unsupported(f"unknown parameter {name!r}", param=name)
    return body


def read_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise Unsupported("model is required (a string)", param="model")
    return model


def read_flag(body: dict[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise Unsupported(f"{name} must be true or false", param=name)
    return value


def read_metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    try:
        return check_metadata(value)
    except InvalidRequest as exc:
        raise Unsupported(str(exc), param="metadata") from None


__all__ = ["read_flag", "read_metadata", "read_model", "screen"]
