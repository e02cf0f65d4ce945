"""The limits `chatworker serve` applies to each connection, whatever proxy is in front: uvicorn's
httptools protocol with a cap on a request's line and headers (431, `CHATWORKER_API_MAX_HEADER_
BYTES`) and a deadline for sending them once begun (408, `CHATWORKER_API_HEADER_TIMEOUT_SECONDS`),
so a client that sends a huge or a trickling request head holds nothing for long. The idle
keep-alive timeout is uvicorn's (5 s); a body is bounded by its route (`gate.py`) and at the door
(`body_limit.py`), and the rest of one answered before it was read (a 401, a 413) is dropped as it
arrives for at most `CHATWORKER_API_BODY_TIMEOUT_SECONDS`, then the connection is closed (closing
at once would reset the client before it read its answer)."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config import get_settings

STATUS = {
    408: b"HTTP/1.1 408 Request Timeout\r\n",
    431: b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
}


class GuardedHttpTools(HttpToolsProtocol):
    """`HttpToolsProtocol` with a request head's size and time bounded (the settings are read
    once per process: uvicorn makes one instance per connection)."""

    max_head_bytes: int | None = None
    head_timeout: float = 10.0
    body_timeout: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if GuardedHttpTools.max_head_bytes is None:
            settings = get_settings()
            GuardedHttpTools.max_head_bytes = settings.api_max_header_bytes
            GuardedHttpTools.head_timeout = settings.api_header_timeout_seconds
            GuardedHttpTools.body_timeout = settings.api_body_timeout_seconds
        self._head_bytes = 0
        self._in_head = True  # between a request's first byte (or none yet) and its blank line
        self._head_timer: asyncio.TimerHandle | None = None
        self._unread_timer: asyncio.TimerHandle | None = None
        self._refused = False

    # --- the head's deadline: from its first byte to its end ------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head_timer()  # a connection that sends nothing is not held either

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_head_timer()

    def on_headers_complete(self) -> None:
        self._stop_head_timer()
        self._in_head = False
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        self._stop_unread_timer()
        super().connection_lost(exc)

    def _start_head_timer(self) -> None:
        self._stop_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_too_slow)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        self._refuse(408, "the request's headers were not sent in time")

    # --- the head's size: the bytes before its blank line, counted as they arrive -------------

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_head:
            end = data.find(b"\r\n\r\n")
            self._head_bytes += len(data) if end < 0 else end
            limit = self.max_head_bytes or 0
            if self._head_bytes > limit:
                self._refuse(431, f"the request's line and headers are over {limit} bytes")
                return
        super().data_received(data)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True  # the next request's head, if any
        self._head_bytes = 0
        if self._unread_timer is not None and not self.transport.is_closing():
            # The rest of a body answered early has come: an idle keep-alive connection again
            # (uvicorn armed its timeout at the answer, and each byte since cancelled it).
            self._stop_unread_timer()
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    # --- the rest of a body answered before it was read: dropped, within the body's deadline --

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._in_head and not self.transport.is_closing():  # (its body still comes)
            self._unread_timer = self.loop.call_later(self.body_timeout, self._unread_too_slow)

    def _stop_unread_timer(self) -> None:
        if self._unread_timer is not None:
            self._unread_timer.cancel()
            self._unread_timer = None

    def _unread_too_slow(self) -> None:
        self._unread_timer = None
        self.transport.close()

    def _refuse(self, status: int, message: str) -> None:
        if self._refused or self.transport.is_closing():
            return
        self._refused = True
        self._stop_head_timer()
        body = message.encode()
        self.transport.write(
            STATUS[status]
            + b"content-type: text/plain; charset=utf-8\r\n"
            + b"content-length: "
            + str(len(body)).encode()
            + b"\r\nconnection: close\r\n\r\n"
            + body
        )
        self.transport.close()


__all__ = ["GuardedHttpTools"]
