"""At the door, requests larger than the largest route's limit are refused before they are read
into memory (413 `request_too_large`; each route holds its own, smaller or not, `gate.py`), and a
body sent slower than `CHATWORKER_API_BODY_TIMEOUT_SECONDS` allows is cut off (408
`request_timeout`): a pure ASGI middleware, so streaming responses are untouched (the deadline
ends with the body: a stream's wait for its client's disconnect is not bounded)."""

from __future__ import annotations

import asyncio
import json
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import MEDIA_TYPE


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, send)
            return
        received = 0
        too_large = False
        started = False
        refused = False
        body_done = False
        too_slow = False
        deadline = time.monotonic() + self.timeout

        async def limited() -> Message:
            nonlocal received, too_large, too_slow, body_done
            if body_done:
                return await receive()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                too_large = too_slow = True  # (the app's answer is dropped for ours)
                raise _TooSlow from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.max_bytes:
                    too_large = True
                    raise _TooLarge
            return message

        async def guarded(message: Message) -> None:
            nonlocal started, refused
            if too_large and not started:
                # The app caught the refusal while reading (FastAPI answers a failed body read
                # with a 400): the 413 goes out instead of its answer.
                if not refused:
                    refused = True
                    await self._refuse(scope, send, slow=too_slow)
                return
            started = True
            await send(message)

        try:
            await self.app(scope, limited, guarded)
        except _TooLarge:
            if not started and not refused:
                refused = True
                await self._refuse(scope, send)
        except _TooSlow:
            if not started and not refused:
                refused = True
                await self._refuse(scope, send, slow=True)

    async def _refuse(self, scope: Scope, send: Send, *, slow: bool = False) -> None:
        status, title, code, detail = (
            (408, "Request Timeout", "request_timeout", f"the body took over {self.timeout:g} s")
            if slow
            else (
                413,
                "Content Too Large",
                "request_too_large",
                f"the request body is over {self.max_bytes} bytes",
            )
        )
        body = json.dumps(
            {
                "type": "about:blank",
                "title": title,
                "status": status,
                "code": code,
                "detail": detail,
                "instance": scope.get("path"),
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", MEDIA_TYPE.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


class _TooSlow(Exception):
    pass
