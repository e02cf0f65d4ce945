"""Errors in OpenAI's shape on the dialect's routes: `{"error": {"message", "type", "param",
"code"}}`, with the same statuses as the rest of the API (`problems.py` decides the status and the
code; this module only writes them as OpenAI's SDKs read them; `routes.py` declares them to
`problems.speaks`).

A 409 carries `x-should-retry: false`: the SDKs retry a 409 by default, and a busy conversation
stays busy until its turn ends.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.errors import InvalidRequest, TurnNotFound

#: The paths that answer errors in OpenAI's shape (and those under it).
PREFIX = "/v1/responses"

_INVALID = "invalid_request_error"
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable_error",
}


class Unsupported(InvalidRequest):
    """A request this dialect does not take (yet): `param` names the field."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ResponseNotFound(TurnNotFound):
    """No such response (its turn does not exist, is another owner's, or has fewer parts)."""


#: The dialect's own refusals: their status and code.
REFUSALS: dict[type[InvalidRequest], tuple[int, str]] = {
    ResponseNotFound: (404, "response_not_found")
}


class OpenAIErrorDetail(BaseModel):
    message: str = Field(description="what went wrong and what to do, for a human")
    type: str = Field(description="the error's class, e.g. invalid_request_error")
    param: str | None = Field(None, description="the request's parameter at fault")
    code: str | None = Field(None, description="stable and machine-readable, as our problems'")


class OpenAIError(BaseModel):
    """An error in OpenAI's shape, as the dialect's routes answer one."""

    error: OpenAIErrorDetail


def documented_openai(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a dialect's route: each status answered in OpenAI's error shape (a
    route that takes a caller refuses an operator's credential too: 403)."""
    if 401 in statuses and 403 not in statuses:
        statuses = (*statuses, 403)
    return {
        status: {"model": OpenAIError, "description": _TYPES.get(status, "server_error")}
        for status in statuses
    }


def openai_error(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    param: str | None = None,
    **_extra: Any,
) -> JSONResponse:
    headers = dict(headers or {})
    if status == 409:
        headers["x-should-retry"] = "false"
    body = {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "server_error" if status >= 500 else _INVALID),
            "param": param,
            "code": code,
        }
    }
    return JSONResponse(body, status, headers=headers)
