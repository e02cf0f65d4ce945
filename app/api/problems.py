"""One error shape for every failure: RFC 9457 `application/problem+json`, with a stable `code`.

    status  code                      raised by
    ------  ------------------------  -----------------------------------------------------------
    400     malformed_json            a body that is not JSON
    400     invalid_request           a value the client layer refuses (`InvalidRequest`)
    400     invalid_message           an empty message, or one with a NUL character
    400     invalid_cursor            `after` / `Last-Event-ID` malformed, negative or past the end
    400     unknown_tool              a tool name no worker offers
    401     unauthenticated           no credentials
    401     invalid_token             a bearer token that is malformed or badly signed
    401     token_expired             a bearer token past its `exp`
    401     invalid_api_key           an API key that is malformed or unknown
    401     api_key_revoked           an API key that was revoked
    403     operator_credential       an operator's credential on an owner's route (it holds no
                                      conversation: the operator routes are /v1/admin)
    404     conversation_not_found    no such conversation, or another owner's
    404     turn_not_found            no such turn, or another owner's
    404     response_not_found        no such response (/v1/responses: OpenAI's error shape)
    404     action_not_found          the turn never waited for that call id
    404     webhook_not_found         no such webhook or delivery, or another owner's
    404     not_found                 no such route
    405     method_not_allowed        a route that does not take that method
    408     request_timeout           a body not sent within `CHATWORKER_API_BODY_TIMEOUT_SECONDS`
    404     message_not_found         the conversation has no message with that seq
    400     invalid_output_schema     an `output_schema` that is not a JSON Schema of an object (its
                                      own error and where), a `$ref` outside it, too large
    400     invalid_file              a message's file: its bytes are not the media type it says,
                                      empty, not base64, or of a type not taken
    400     file_not_taken            the conversation's model takes no such file (an image, a PDF):
                                      the model and the media type named
    404     file_not_found            no such file, or another owner's
    413     file_too_large            a file over `CHATWORKER_MAX_FILE_BYTES`, or a message's files
                                      over `CHATWORKER_MAX_MESSAGE_FILE_BYTES` together
    409     conversation_busy         a turn runs (`on_busy=reject`, delete, switch): `turn_id`
                                      names it
    409     not_branchable            the message cannot take it (an edit of an answer, a fork
                                      at unanswered calls, a steer into a turn that waits)
    409     conversation_conflict     a chosen conversation id is taken by another setup
    409     not_retryable             retry of a conversation that has not failed
    409     action_already_answered   the call has another answer already (or was cancelled)
    413     message_too_large         a message over `CHATWORKER_MAX_MESSAGE_CHARS`
    413     larger_than_storage_quota a message's new files, or a fork, alone hold more than the
                                      owner's whole `CHATWORKER_OWNER_STORAGE_BYTES`
    413     request_too_large         a body over its route's limit (`gate.py`), or JSON of more
                                      values than any request needs (`bounded_json.py`)
    415     unsupported_media_type    a body that is not `application/json`
    422     validation_failed         wrong types, unknown fields, bad values: `errors` says where
    422     idempotency_key_reused    the `Idempotency-Key` was used with another message
    429     budget_exceeded           the conversation's or its owner's budget is used up
    429     storage_quota_exceeded    a message's new files, or a fork, would take the owner's
                                      stored bytes past `CHATWORKER_OWNER_STORAGE_BYTES`
    429     too_many_running_turns    the owner runs its limit of turns; `Retry-After`
    429     rate_limited              this key's request rate is spent; `Retry-After`
    429     too_many_owner_streams    the owner holds `CHATWORKER_API_MAX_STREAMS_PER_OWNER`
                                      streams and long polls on this process; `Retry-After`
    503     database_unavailable      the database did not answer; `Retry-After`
    503     too_many_streams          this process serves `CHATWORKER_API_MAX_STREAMS` streams
    502     turn_failed               a chat completion's turn failed: its error
                                      (/v1/chat/completions: OpenAI's error shape)
    504     turn_still_running        a chat completion's turn did not rest within five of the
                                      server's longest waits: the same request waits again
    500     internal_error            a bug: logged with its traceback, never shown

A refused request wrote nothing (the client layer's contract); a 503 may be retried as it is (with
the same `Idempotency-Key`, a submit is never run twice).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from app.errors import (
    ActionAlreadyAnswered,
    ActionNotFound,
    BudgetExceeded,
    ConversationBusy,
    ConversationConflict,
    ConversationNotFound,
    DatabaseUnavailable,
    FileNotFound,
    FileNotTaken,
    FileTooLarge,
    IdempotencyKeyReused,
    InvalidCursor,
    InvalidFile,
    InvalidMessage,
    InvalidOutputSchema,
    InvalidRequest,
    KeyNotFound,
    LargerThanStorageQuota,
    MessageNotFound,
    MessageTooLarge,
    NotBranchable,
    NotRetryable,
    StorageQuotaExceeded,
    TooManyRunningTurns,
    TurnNotFound,
    UnknownTool,
    WebhookNotFound,
)

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"
RETRY_AFTER_SECONDS = 2

#: The client layer's refusals, most specific first (looked up along the exception's MRO).
REFUSALS: dict[type[InvalidRequest], tuple[int, str]] = {
    ConversationNotFound: (404, "conversation_not_found"),
    TurnNotFound: (404, "turn_not_found"),
    ActionNotFound: (404, "action_not_found"),
    ActionAlreadyAnswered: (409, "action_already_answered"),
    KeyNotFound: (404, "key_not_found"),
    WebhookNotFound: (404, "webhook_not_found"),
    TooManyRunningTurns: (429, "too_many_running_turns"),
    MessageNotFound: (404, "message_not_found"),
    ConversationBusy: (409, "conversation_busy"),
    NotBranchable: (409, "not_branchable"),
    BudgetExceeded: (429, "budget_exceeded"),
    LargerThanStorageQuota: (413, "larger_than_storage_quota"),
    StorageQuotaExceeded: (429, "storage_quota_exceeded"),
    ConversationConflict: (409, "conversation_conflict"),
    NotRetryable: (409, "not_retryable"),
    MessageTooLarge: (413, "message_too_large"),
    IdempotencyKeyReused: (422, "idempotency_key_reused"),
    InvalidCursor: (400, "invalid_cursor"),
    InvalidMessage: (400, "invalid_message"),
    UnknownTool: (400, "unknown_tool"),
    InvalidOutputSchema: (400, "invalid_output_schema"),
    FileNotFound: (404, "file_not_found"),
    FileTooLarge: (413, "file_too_large"),
    FileNotTaken: (400, "file_not_taken"),
    InvalidFile: (400, "invalid_file"),
    InvalidRequest: (400, "invalid_request"),
}

#: How a dialect writes an error: (status, code, detail, headers, **fields) -> the response.
ErrorShape = Callable[..., JSONResponse]
#: The paths whose errors a dialect writes in its own shape (`speaks`): (prefix, shape).
_SHAPES: list[tuple[str, ErrorShape]] = []

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class FieldError(BaseModel):
    loc: list[str | int] = Field(description="where: body, query, header or path, then the field")
    msg: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details, with this API's stable `code`."""

    type: str = Field("about:blank", description="always about:blank: `code` names the problem")
    title: str = Field(description="the HTTP status's phrase")
    status: int
    code: str = Field(description="stable and machine-readable, e.g. conversation_busy")
    detail: str = Field(description="what went wrong and what to do, for a human")
    instance: str | None = Field(None, description="the request's path")
    turn_id: str | None = Field(None, description="conversation_busy: the turn that runs")
    errors: list[FieldError] | None = Field(None, description="validation_failed: each field")


class ApiProblem(Exception):
    """Raised by the API's own code to answer with a problem (auth, limits, media types)."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra


def speaks(
    prefix: str,
    shape: ErrorShape,
    refusals: Mapping[type[InvalidRequest], tuple[int, str]] | None = None,
) -> None:
    """A dialect's errors, declared by its router module: every answer of a failure on `prefix`
    (and the paths under it) written by `shape` instead of as a problem; its own refusals (the
    client layer's subclasses it raises) with their status and code."""
    if all(known != prefix for known, _ in _SHAPES):
        _SHAPES.append((prefix, shape))
    REFUSALS.update(refusals or {})


def _shape(path: str) -> ErrorShape | None:
    for prefix, shape in _SHAPES:
        if path == prefix or path.startswith(prefix + "/"):
            return shape
    return None


def problem_response(
    request: Request | None,
    status: int,
    code: str,
    detail: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    shape = None if request is None else _shape(request.url.path)
    if shape is not None:
        return shape(status, code, detail, headers, **extra)
    extra.pop("param", None)
    body = Problem(
        title=_TITLES.get(status, "Error"),
        status=status,
        code=code,
        detail=detail,
        instance=None if request is None else request.url.path,
        **extra,
    )
    return JSONResponse(
        body.model_dump(exclude_none=True), status, headers=headers, media_type=MEDIA_TYPE
    )


def refusal(exc: InvalidRequest) -> tuple[int, str]:
    for kind in type(exc).__mro__:
        if kind in REFUSALS:
            return REFUSALS[kind]
    return 400, "invalid_request"  # pragma: no cover (InvalidRequest is in the table)


def documented(
    *statuses: int, also: dict[int | str, dict[str, Any]] | None = None
) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route: each status answered with a `Problem` (and `also`). A route
    that takes a caller (401) refuses an operator's credential too (403 `operator_credential`)."""
    if 401 in statuses and 403 not in statuses:
        statuses = (*statuses, 403)
    return dict(also or {}) | {
        status: {
            "model": Problem,
            "description": _TITLES.get(status, "Error"),
            "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


def is_json(content_type: str | None) -> bool:
    """A JSON media type, as FastAPI decides whether to parse a body (else it hands the route
    bytes, which no body model accepts)."""
    media = (content_type or "").split(";")[0].strip().lower()
    kind, _, subtype = media.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> set[str]:
    """Every method some route (not a mount) takes at the request's path."""
    routes = [route for route in request.app.router.routes if not isinstance(route, Mount)]
    return {
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes
        )
    }


def install_handlers(app: FastAPI) -> None:
    """Every failure of `app` answered as a problem."""

    async def on_refusal(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, InvalidRequest)
        status, code = refusal(exc)
        extra: dict[str, Any] = {}
        headers: dict[str, str] = {}
        if isinstance(exc, ConversationBusy) and exc.turn_id is not None:
            extra["turn_id"] = str(exc.turn_id)
        if isinstance(exc, TooManyRunningTurns):
            headers["Retry-After"] = str(exc.retry_after)
        param = getattr(exc, "param", None)  # (a dialect's refusal may name its field)
        if param is not None:
            extra["param"] = param
        return problem_response(request, status, code, str(exc), headers, **extra)

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiProblem)
        return problem_response(request, exc.status, exc.code, exc.detail, exc.headers, **exc.extra)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        if any(error.get("type") == "json_invalid" for error in errors):
            return problem_response(
                request, 400, "malformed_json", "the request body is not valid JSON"
            )
        if not is_json(request.headers.get("content-type")) and any(
            tuple(error["loc"])[:1] == ("body",) and error.get("type") != "missing"
            for error in errors
        ):
            return problem_response(
                request,
                415,
                "unsupported_media_type",
                "send the body as JSON, with Content-Type: application/json",
            )
        fields = [
            FieldError(
                loc=[str(part) if not isinstance(part, int) else part for part in e["loc"]],
                msg=str(e["msg"]),
                type=str(e["type"]),
            )
            for e in errors
        ]
        summary = "; ".join(f"{'.'.join(map(str, f.loc))}: {f.msg}" for f in fields[:5])
        return problem_response(request, 422, "validation_failed", summary, errors=fields)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        # FastAPI answers a body it cannot read (JSON that is not UTF-8, a broken form) with
        # a 400 of its own: a body that is not JSON.
        codes = {400: "malformed_json", 404: "not_found", 405: "method_not_allowed"}
        detail = exc.detail if isinstance(exc.detail, str) else "the request was refused"
        if exc.status_code == 400:
            detail = "the request body is not valid JSON"
        if exc.status_code == 404:
            detail = f"no route {request.method} {request.url.path}"
        headers = dict(exc.headers or {})
        allowed = _allowed_methods(request) if exc.status_code == 405 else set()
        if allowed:
            # Starlette's Allow names the methods of the first route of the path only (GET and
            # POST /v1/conversations are two routes): every method the path takes.
            headers["Allow"] = ", ".join(sorted(allowed))
        return problem_response(
            request, exc.status_code, codes.get(exc.status_code, "http_error"), detail, headers
        )

    async def on_database(request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        return problem_response(
            request,
            503,
            "database_unavailable",
            "the database did not answer; retry in a moment (a submit with the same "
            "Idempotency-Key is never run twice)",
            {"Retry-After": str(RETRY_AFTER_SECONDS)},
        )

    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return problem_response(
            request, 500, "internal_error", "an unexpected error; it was logged"
        )

    app.add_exception_handler(InvalidRequest, on_refusal)
    app.add_exception_handler(ApiProblem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(DatabaseUnavailable, on_database)  # (the client's word for it)
    app.add_exception_handler(Exception, on_bug)
