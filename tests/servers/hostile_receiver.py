"""A webhook receiver that tries to hurt its sender, on a free port of 127.0.0.1 (raw sockets, a
thread per connection): `huge` answers 500 with a chunked body of `megabytes` MB, `trickle` sends
its answer one byte every `interval` seconds, `hang` reads the request and never answers,
`redirect` answers 302 to another URL. It counts the requests and the bytes it managed to send."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field

CHUNK = b"x" * 65536


@dataclass
class HostileReceiver:
    mode: str
    megabytes: int = 200
    interval: float = 0.5
    requests: int = 0
    bytes_sent: int = 0
    closed: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.socket.getsockname()[1]}/hooks"

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                connection, _ = self.socket.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with contextlib.suppress(OSError), connection:
            connection.settimeout(30)
            request = b""
            while b"\r\n\r\n" not in request:
                piece = connection.recv(65536)
                if not piece:
                    return
                request += piece
            self.requests += 1
            getattr(self, f"_{self.mode}")(connection)

    def _send(self, connection: socket.socket, data: bytes) -> None:
        connection.sendall(data)
        self.bytes_sent += len(data)

    def _huge(self, connection: socket.socket) -> None:
        self._send(connection, b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(self.megabytes * 16):
            if self.closed.is_set():
                return
            self._send(connection, b"10000\r\n" + CHUNK + b"\r\n")
        self._send(connection, b"0\r\n\r\n")

    def _trickle(self, connection: socket.socket) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok":
            if self.closed.is_set():
                return
            self._send(connection, bytes([byte]))
            time.sleep(self.interval)

    def _hang(self, connection: socket.socket) -> None:
        self.closed.wait(60)

    def _redirect(self, connection: socket.socket) -> None:
        self._send(
            connection,
            b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/elsewhere\r\n"
            b"Content-Length: 0\r\n\r\n",
        )

    def close(self) -> None:
        self.closed.set()
        self.socket.close()
        self.thread.join(timeout=5)


__all__ = ["HostileReceiver"]
