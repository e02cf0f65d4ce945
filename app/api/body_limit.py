"""Requests larger than any valid one are refused before they are read into memory (413
`request_too_large`): a pure ASGI middleware, so streaming responses are untouched."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import MEDIA_TYPE


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

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

        async def limited() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
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
                    await self._refuse(scope, send)
                return
            started = True
            await send(message)

        try:
            await self.app(scope, limited, guarded)
        except _TooLarge:
            if not started and not refused:
                refused = True
                await self._refuse(scope, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        body = json.dumps(
            {
                "type": "about:blank",
                "title": "Content Too Large",
                "status": 413,
                "code": "request_too_large",
                "detail": f"the request body is over {self.max_bytes} bytes",
                "instance": scope.get("path"),
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
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
