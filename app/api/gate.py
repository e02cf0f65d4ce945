"""A route's request taken in the order that bounds it: the caller first, from the headers alone
(a 401 before a byte of the body is read), then the body within the route's own limit (413
`request_too_large`: at once from a Content-Length over it, or as a chunked body streams past
it), then its JSON within a bound on what it builds (`bounded_json`); only then FastAPI's own
reading, the route's dependencies and the route.

    route                                                   limit
    ------------------------------------------------------  ------------------------------------
    every route (a new one too)                             `CHATWORKER_API_MAX_BODY_BYTES`, and
                                                            at least a message's text escaped
    the routes files go to, `openapi_extra=TAKES_FILES`:    that, plus a message's files in
    a message, /v1/responses, /v1/ai-sdk/chat               base64 (`..._MESSAGE_FILE_BYTES`)
    the answers to a turn's actions, `TAKES_OUTPUTS`         that, plus the most outputs one
                                                            answer takes, each a message's text

Every router of the API is made with `route_class=GuardedRoute`; the OpenAPI document states each
operation's limit in bytes (`x-max-body-bytes`). A route without `Authenticated` (health,
readiness) reads no caller. The connection stays open after an early refusal: the server drops
the rest of the body as it arrives, holding none of it, within the body's deadline
(`connection_limits.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from app.api import bounded_json
from app.api.auth import admit, authenticate
from app.api.problems import ApiProblem, is_json
from app.api.state import get_state
from app.client.checks import MAX_OUTPUTS
from app.config import Settings

LIMIT = "x-body-limit"  # (a route's kind of body in its `openapi_extra`; bytes in the document)
SMALL, FILES, OUTPUTS = "small", "files", "outputs"
TAKES_FILES: dict[str, Any] = {LIMIT: FILES}
TAKES_OUTPUTS: dict[str, Any] = {LIMIT: OUTPUTS}
#: Beyond the largest message's text, its JSON escaping and the other fields.
BODY_OVERHEAD_BYTES = 64 * 1024

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
_UNREAD = object()


def body_limits(settings: Settings) -> dict[str, int]:
    """The byte limit of each kind of route."""
    small = max(settings.api_max_body_bytes, settings.max_message_chars * 6 + BODY_OVERHEAD_BYTES)
    # (files come base64-encoded: 4 characters for 3 bytes, and their JSON around them)
    files = settings.max_message_file_bytes * 4 // 3 + settings.max_message_files * 1_000
    # (a client tool's output is text of up to a message's length: counted a byte a character)
    outputs = MAX_OUTPUTS * settings.max_message_chars
    return {SMALL: small, FILES: small + files, OUTPUTS: small + outputs}


class GuardedRoute(APIRoute):
    """An API route whose handler admits the caller and reads the body within its limit before
    FastAPI's own handler runs (the documented way to customise a route's request handling)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **options: Any) -> None:
        options["openapi_extra"] = {LIMIT: SMALL, **(options.get("openapi_extra") or {})}
        super().__init__(path, endpoint, **options)

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        assert self.openapi_extra is not None
        kind = str(self.openapi_extra[LIMIT])
        admits = _needs_caller(self.dependant)
        reads = self.body_field is not None

        async def guarded(request: Request) -> Response:
            api = await get_state(request)
            if admits:
                await admit(request, api)
            limit = body_limits(api.settings)[kind]
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise _too_large(limit)
            if reads:
                request = await _read(request, limit)
            return await handler(request)

        return guarded


def document_limits(schema: dict[str, Any], settings: Settings) -> None:
    """Each operation's body limit in the OpenAPI document, in bytes (`x-max-body-bytes`)."""
    limits = body_limits(settings)
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict) and LIMIT in operation:
                operation["x-max-body-bytes"] = limits[operation.pop(LIMIT)]


class _Read(Request):
    """The request as FastAPI reads it, its body (and its JSON) already read within bounds."""

    def __init__(self, request: Request, body: bytes, parsed: Any) -> None:
        super().__init__(request.scope, request.receive)
        self._read = body
        self._parsed = parsed

    async def body(self) -> bytes:
        return self._read

    async def json(self) -> Any:
        if self._parsed is _UNREAD:  # (FastAPI asks only of a JSON body: read as one then)
            self._parsed = bounded_json.parse(self._read)
        return self._parsed


async def _read(request: Request, limit: int) -> Request:
    """The request with its body read, counted as it streams in, and parsed when it is JSON."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    body = b"".join(chunks)
    del chunks
    parsed: Any = _UNREAD
    if body and is_json(request.headers.get("content-type")):
        if bounded_json.values_at_most(body) <= bounded_json.MAX_VALUES:
            parsed = _parsed(body)
        else:  # (the Python scanner, a second at worst: off the event loop)
            parsed = await run_in_threadpool(_parsed, body)
        if isinstance(parsed, ApiProblem):
            raise parsed  # (raised here, not where the parse failed: nothing of it is kept)
    return _Read(request, body, parsed)


def _parsed(body: bytes) -> Any:
    """The JSON of `body`, or the problem that refuses it (returned: an exception raised in the
    parse holds its frames, the text and what was built, for as long as it lives)."""
    try:
        return bounded_json.parse(body)
    except bounded_json.TooComplex as exc:
        return ApiProblem(413, "request_too_large", f"the request body is refused: {exc}")
    except ValueError:
        return ApiProblem(400, "malformed_json", "the request body is not valid JSON")


def _too_large(limit: int) -> ApiProblem:
    return ApiProblem(
        413, "request_too_large", f"the request body is over {limit:,} bytes, this route's limit"
    )


def _needs_caller(dependant: Dependant) -> bool:
    return any(
        dependency.call is authenticate or _needs_caller(dependency)
        for dependency in dependant.dependencies
    )


__all__ = [
    "FILES",
    "OUTPUTS",
    "SMALL",
    "TAKES_FILES",
    "TAKES_OUTPUTS",
    "GuardedRoute",
    "body_limits",
    "document_limits",
]
