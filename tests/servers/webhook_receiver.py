"""A real webhook receiver for tests: an HTTP server on a free port, in a thread, that verifies
each POST's Standard Webhooks signature (the maintained library, as a receiver would), keeps
every request, deduplicates by `webhook-id`, and answers as its script says: a status, or
silence for a while (a timeout on the sender's side)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook as Verifier
from standardwebhooks.webhooks import WebhookVerificationError


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    verified: bool  # the signature matched the secret
    answered: int | None  # the status it got (None: the receiver kept silent)

    @property
    def id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def payload(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """`script`: what the next requests get, in order (an int: that status; a float: sleep that
    long, then 200); when it runs out, 200."""

    def __init__(self, secret: str = "") -> None:
        self.secret = secret
        self.script: list[int | float] = []
        self.received: list[Received] = []
        self.seen: set[str] = set()  # the webhook-ids it acted on (its deduplication)
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver._lock:
                    step = receiver.script.pop(0) if receiver.script else 200
                verified = receiver._verify(body, headers)
                answered: int | None = step if isinstance(step, int) else None
                record = Received(headers, body, verified, answered)
                if isinstance(step, float):
                    with receiver._lock:
                        receiver.received.append(record)
                    time.sleep(step)
                    with contextlib.suppress(OSError):  # the sender gave up waiting
                        self._answer(200)
                    return
                with receiver._lock:
                    receiver.received.append(record)
                    if answered == 200 and verified:
                        receiver.seen.add(headers.get("webhook-id", ""))
                self._answer(answered or 200)

            def _answer(self, status: int) -> None:
                text = b"ok" if status < 300 else b"receiver says no"
                self.send_response(status)
                self.send_header("content-length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def _verify(self, body: bytes, headers: dict[str, str]) -> bool:
        if not self.secret:
            return False
        try:
            Verifier(self.secret).verify(body, headers)
        except WebhookVerificationError:
            return False
        return True

    def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.05)
        raise AssertionError(f"{len(self.received)} of {count} requests after {timeout} s")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def receiving(secret: str = "") -> Iterator[Receiver]:
    receiver = Receiver(secret)
    yield receiver
    receiver.close()


__all__ = ["Received", "Receiver", "receiving"]
