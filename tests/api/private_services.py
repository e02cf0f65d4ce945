"""Services a test may stop and start again, and a server-sent-event reader for the API tests.

`PrivatePostgres` is a PostgreSQL cluster of its own (initdb into a temp dir, a free port, trust
auth, no fsync) and `PrivateRedis` a `redis-server` without persistence: a test restarts them
at will and never touches the machine's shared servers. Both are children of the test process
that die with it (`setpriv --pdeathsig KILL`, where util-linux has it), so a killed test run
leaves no server behind.

`boot` starts a deployment's API and worker processes side by side; `read_sse` reads a stream
into `Item`s (id, event, data), stopping wherever the test says.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from httpx_sse import connect_sse

from app.testing import services
from app.testing.api_process import ApiProcess, free_port
from tests.api.conftest import Deployment
from tests.worker_process import REPO, WorkerProcess

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
START_TIMEOUT_S = 30
BOOT_TIMEOUT_S = 180  # a worker boots in seconds, in more than a minute on a loaded machine


def boot(deployment: Deployment, apis: int = 1, workers: int = 1) -> None:
    """Start API and worker processes for `deployment`, side by side, and wait until each is
    ready (`deployment.close()` stops them, even one that never got ready)."""
    made_apis = [
        ApiProcess(deployment.env, deployment.tmp / f"api{n}.log", cwd=REPO) for n in range(apis)
    ]
    made_workers = [
        WorkerProcess(deployment.env, deployment.tmp / f"worker{n}.log") for n in range(workers)
    ]
    deployment.apis.extend(made_apis)
    deployment.workers.extend(made_workers)
    with ThreadPoolExecutor(apis + workers) as pool:
        started: list[Future[Any]] = [pool.submit(api.start, BOOT_TIMEOUT_S) for api in made_apis]
        started += [pool.submit(worker.start, True, BOOT_TIMEOUT_S) for worker in made_workers]
        for future in started:
            future.result()


def postgres_bin() -> Path | None:
    """The directory of `initdb` and `postgres` (the newest installed), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    return Path(candidates[-1]).parent if candidates else None


def _version(path: str) -> float:
    try:
        return float(Path(path).parent.parent.name)
    except ValueError:
        return 0.0


def _as_postgres_user() -> list[str]:
    """PostgreSQL refuses to run as root: a command prefix that drops to the `postgres` user."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError("running as root without util-linux setpriv: cannot start PostgreSQL")
    return [setpriv, "--reuid=postgres", "--regid=postgres", "--init-groups"]


def _die_with_parent() -> list[str]:
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []


def _chown_to_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster of this test only, restartable on the same port and data."""

    bindir: Path
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="chatworker-pg-")))
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> PrivatePostgres:
        _chown_to_postgres(self.root)
        subprocess.run(
            [*_as_postgres_user(), str(self.bindir / "initdb"), "-D", str(self.data),
             "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        return self

    def start(self) -> None:
        # fsync=off is safe for a server whose machine does not crash: a commit is written to
        # the OS before it returns. synchronous_commit stays on: off, an `immediate` stop loses
        # the last commits a client was told of (a turn.started read, then gone after restart).
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            # (the death signal is set after the user change, which would clear it)
            [*_as_postgres_user(), *_die_with_parent(), str(self.bindir / "postgres"),
             "-D", str(self.data), "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
             "-c", f"unix_socket_directories={self.root}", "-c", "fsync=off",
             "-c", "full_page_writes=off",
             "-c", "max_connections=100", "-c", "shared_buffers=32MB"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited early:\n{self.log()}")
            if services.postgres_answers(self.url()):
                return
            time.sleep(0.1)
        raise RuntimeError(f"postgres not ready after {START_TIMEOUT_S} s:\n{self.log()}")

    def stop(self, mode: str = "immediate") -> None:
        """`immediate` (SIGQUIT: every backend dies at once, crash recovery at the next start)
        or `fast` (SIGINT: sessions are ended, a clean shutdown)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGQUIT if mode == "immediate" else signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def create_database(self, name: str) -> str:
        with psycopg.connect(services.libpq_dsn(self.url()), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class PrivateRedis:
    """A `redis-server` of this test only (no persistence), restartable on the same port."""

    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.workdir / f"redis-{self.port}.log").open("ab")
        self.process = subprocess.Popen(
            [*_die_with_parent(), REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited early on port {self.port}")
            if services.redis_answers(self.url):
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server not ready on port {self.port}")

    def kill(self) -> None:
        """SIGKILL: connections drop at once, everything it held is gone."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)


# --- reading server-sent events -------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One server-sent event as the reader got it."""

    id: str
    event: str
    data: dict[str, Any]

    @property
    def committed(self) -> bool:
        return self.event not in ("message.delta", "message.discarded", "stream.end")

    @property
    def seq(self) -> int:
        return int(self.data["seq"])


def read_sse(
    http: httpx.Client,
    conversation_id: str,
    *,
    after: str | None = None,
    last_event_id: str | None = None,
    until: str = "rest",
    stop: Callable[[list[Item]], bool] = lambda _items: False,
    on_item: Callable[[Item], None] = lambda _item: None,
) -> list[Item]:
    """The stream's items until it ends or `stop(items so far)` holds (asked at each item and
    each ping), then the connection is dropped. A connection the server breaks ends the read
    too (with the items got so far)."""
    query = f"?until={until}" + ("" if after is None else f"&after={after}")
    headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
    items: list[Item] = []
    with (
        contextlib.suppress(httpx.TransportError),
        connect_sse(
            http, "GET", f"/v1/conversations/{conversation_id}/stream{query}", headers=headers
        ) as source,
    ):
        assert source.response.status_code == 200, source.response.read()
        for sse in source.iter_sse():
            if sse.event == "message" and not sse.data:
                # a ping (httpx-sse makes an empty event of a comment once ids came)
                if stop(items):
                    break
                continue
            # (stream.end has no id of its own: the client's last id stays as it was)
            known = "" if sse.event == "stream.end" else sse.id
            item = Item(known, sse.event, json.loads(sse.data))
            items.append(item)
            on_item(item)
            if item.event == "stream.end" or stop(items):
                break
    return items


def after_items(count: int) -> Callable[[list[Item]], bool]:
    """A `stop` for `read_sse`: once `count` items came."""
    return lambda items: len(items) >= count


def committed_of(items: list[Item]) -> list[Item]:
    return [item for item in items if item.committed]


def without_turn(items: list[Item]) -> list[tuple[str, str, dict[str, Any]]]:
    """The committed events as comparable across reads made at different times: a `turn.*`
    event carries its turn as it is when read (running, then completed), and a live reader's
    id of an event committed while a reply was forming also says where it stood in that reply
    ("5:2:1a67b41b:0"), a replay's just the seq ("5")."""
    return [
        (item.id.split(":")[0], item.event, {k: v for k, v in item.data.items() if k != "turn"})
        for item in committed_of(items)
    ]


def deltas_of(items: list[Item]) -> list[Item]:
    return [item for item in items if item.event == "message.delta"]


def assert_each_event_once(items: list[Item]) -> None:
    """The committed events in order, each once, none missing; each id resumes after its seq."""
    seqs = [item.seq for item in committed_of(items)]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    assert all(item.id.split(":")[0] == str(item.seq) for item in committed_of(items))


def assert_deltas_consistent(items: list[Item]) -> None:
    """Each stream's deltas shown once each, from 0 up, none skipped; none after its
    message's commit or its own discard."""
    shown: dict[tuple[int, str], int] = {}
    closed: set[tuple[int, str]] = set()
    committed: set[int] = set()
    for item in items:
        data = item.data
        if item.event == "message.delta":
            key = (data["message_seq"], data["stream"])
            assert key not in closed and data["message_seq"] not in committed, item
            assert data["index"] == shown.get(key, -1) + 1, (item, shown)
            shown[key] = data["index"]
        elif item.event == "message.discarded":
            closed.update(k for k in shown if k[0] == data["message_seq"])
        elif item.event == "message.committed":
            committed.add(data["message_seq"])


def answer_of(items: list[Item]) -> str | None:
    """The last committed assistant message without tool calls."""
    answers = [
        item.data["message"].get("content")
        for item in committed_of(items)
        if item.event == "message.committed"
        and item.data["message"]["role"] == "assistant"
        and not item.data["message"].get("tool_calls")
    ]
    return answers[-1] if answers else None


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    bindir = postgres_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries (initdb, postgres) not found")
    server = PrivatePostgres(bindir).init()
    try:
        server.start()
        yield server
    finally:
        server.remove()
