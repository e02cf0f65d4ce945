"""A lean HTTP/1.1 load generator on raw asyncio streams (uvloop when installed), for the API
benchmarks: keep-alive requests at a fixed concurrency, and server-sent event streams by the
thousand.

httpx costs a few hundred microseconds of CPU per request and per streamed chunk; on a 2-core
machine that shares its cores with the server under test, the client would be the bottleneck
(and its cost would land in the server's latency). This client writes the request bytes itself
and parses only what it needs: the status, `Content-Length` or chunked framing, and SSE fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

Request = tuple[str, str, bytes | None]  # method, path (with the query), JSON body or None


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on uvloop when it is installed (it is uvicorn's own loop)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover (uvicorn[standard] installs it)
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


class HttpError(RuntimeError):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:300]!r}")
        self.status = status
        self.body = body


# uvicorn closes a keep-alive connection idle for 5 s (its `timeout_keep_alive`): a request sent
# on one idle longer may meet that close (an empty response). Such a connection is opened anew.
IDLE_REOPEN_S = 4.0


class Connection:
    """One keep-alive HTTP/1.1 connection (opened again before a request after 4 s idle)."""

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host = host
        self.port = port
        self.head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": host, **headers}.items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.used = 0.0  # time.monotonic() of its opening or of the last response read

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(
            self.host, self.port, limit=1 << 20
        )
        self.used = time.monotonic()
        return self

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None

    def send(self, method: str, path: str, body: bytes | None = None) -> None:
        assert self.writer is not None
        if body is None:
            start = f"{method} {path} HTTP/1.1\r\n{self.head}\r\n"
            self.writer.write(start.encode())
        else:
            start = (
                f"{method} {path} HTTP/1.1\r\n{self.head}Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            self.writer.write(start.encode() + body)

    async def head_of_response(self) -> tuple[int, dict[bytes, bytes]]:
        assert self.reader is not None
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw[:-4].split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return status, headers

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """The status and body of one request (a whole body: Content-Length or chunked)."""
        if self.writer is not None and time.monotonic() - self.used > IDLE_REOPEN_S:
            self.close()
        if self.writer is None:
            await self.open()
        assert self.reader is not None
        self.send(method, path, body)
        status, headers = await self.head_of_response()
        if b"content-length" in headers:
            data = await self.reader.readexactly(int(headers[b"content-length"]))
        elif headers.get(b"transfer-encoding") == b"chunked":
            pieces = []
            while piece := await self.chunk():
                pieces.append(piece)
            data = b"".join(pieces)
        else:
            data = await self.reader.read()
        self.used = time.monotonic()
        if headers.get(b"connection") == b"close":
            self.close()
        return status, data

    async def chunk(self) -> bytes:
        """The next piece of a chunked body (b"" at its end)."""
        assert self.reader is not None
        size = int((await self.reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
        data = await self.reader.readexactly(size + 2)
        return data[:-2]


async def call(conn: Connection, request: Request, expect: int) -> bytes:
    status, body = await conn.request(*request)
    if status != expect:
        raise HttpError(status, body)
    return body


# --- a closed loop at fixed concurrency ----------------------------------------------------------


@dataclass
class Load:
    """What a closed-loop run did: every request's latency (ms), in `seconds` of wall clock, and
    the CPU this process spent meanwhile."""

    latencies_ms: list[float]
    seconds: float
    client_cpu_seconds: float

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.seconds

    @property
    def client_cpu_fraction(self) -> float:
        return self.client_cpu_seconds / self.seconds


async def closed_loop(
    host: str,
    port: int,
    headers: dict[str, str],
    requests: Callable[[int], Request | None],
    *,
    expect: int,
    concurrency: int,
    seconds: float,
    on_body: Callable[[bytes], None] | None = None,
) -> Load:
    """`concurrency` connections, each sending the next request as soon as its last answered,
    for `seconds` or until `requests(n)` returns None (the n-th request of the run); `on_body`
    is given each response's body."""
    counter = itertools.count()
    latencies: list[float] = []
    connections = [await Connection(host, port, headers).open() for _ in range(concurrency)]
    deadline = time.perf_counter() + seconds

    async def loop(conn: Connection) -> None:
        while time.perf_counter() < deadline:
            request = requests(next(counter))
            if request is None:
                return
            sent = time.perf_counter()
            body = await call(conn, request, expect)
            latencies.append((time.perf_counter() - sent) * 1000)
            if on_body is not None:
                on_body(body)

    cpu = time.process_time()
    started = time.perf_counter()
    try:
        await asyncio.gather(*(loop(conn) for conn in connections))
    finally:
        for conn in connections:
            conn.close()
    return Load(latencies, time.perf_counter() - started, time.process_time() - cpu)


# --- server-sent events --------------------------------------------------------------------------


@dataclass
class Sse:
    event: str
    data: str
    received: float  # time.time() when its last byte arrived


@dataclass
class SseStream:
    """One open event stream; `on_event` is called for every event as it arrives."""

    conn: Connection
    on_event: Callable[[Sse], None]
    events: int = 0
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    async def open(self, path: str, method: str = "GET", body: bytes | None = None) -> None:
        """Send the request (a GET, or a POST whose answer is a stream) and wait for the
        response's head (the server follows from then on)."""
        await self.conn.open()
        self.conn.send(method, path, body)
        status, _ = await self.conn.head_of_response()
        if status != 200:
            assert self.conn.reader is not None
            raise HttpError(status, await self.conn.reader.read(2000))
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        buffer = b""
        while piece := await self.conn.chunk():
            now = time.time()
            buffer += piece
            *complete, buffer = buffer.split(b"\r\n\r\n")
            for block in complete:
                event, data = "message", []
                for line in block.split(b"\r\n"):
                    if line.startswith(b"data: "):
                        data.append(line[6:].decode())
                    elif line.startswith(b"event: "):
                        event = line[7:].decode()
                if data:
                    self.events += 1
                    self.on_event(Sse(event, "\n".join(data), now))

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        self.conn.close()


async def bounded(concurrency: int, jobs: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run `jobs` at most `concurrency` at a time; their results in order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await job()

    return list(await asyncio.gather(*(one(job) for job in jobs)))
