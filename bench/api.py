"""The HTTP API under load: one API process (`chatworker serve`, uvicorn, 1 process) with API-key
auth (the production path: every request looks its key up), against the database, Redis, a
worker process and the fake LLM of the other process benchmarks. The client is `bench.loadgen`
(raw asyncio HTTP/1.1 on uvloop, so this process is not the bottleneck; its CPU is reported).

- `api`: requests per second and latency at a fixed concurrency, for the product's routes and,
  in the same run, a floor: a bare FastAPI route in a second uvicorn process with the same
  settings (`bench/floor_server.py`), loaded by the same client.
- `sse`: N event streams open at once (one per conversation; N grows step by step) while a
  worker runs a turn in each; the delay from each commit to the event reaching the client, and
  the API process's threads, memory and CPU, idle and busy.
- `ttft`: from `POST .../messages` to the reply's first `message.delta` on an event stream
  opened before it, with an idle worker and a model that streams at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import redis
from sqlalchemy import text

from app.client import ChatClient
from app.db import make_engine
from app.live import LiveChannel, open_channel
from app.models import TERMINAL_EVENTS
from app.testing.api_process import ApiProcess, free_port
from app.testing.worker_process import WorkerProcess
from bench import loadgen
from bench.loadgen import Connection, Load, Request, SseStream
from bench.stats import Row, median, p95, single
from bench.workers import Rig, cpu_seconds, dramatiq_child, rig, rss_mb

REPO = Path(__file__).resolve().parents[1]
OWNER = "bench"
AUTH = "api_key"  # CHATWORKER_API_AUTH of the API process: each request presents a key
CONCURRENCY = 16


# --- the deployment ------------------------------------------------------------------------------


@dataclass
class Deployment:
    rig: Rig
    api: ApiProcess
    key: str
    worker: WorkerProcess | None = None
    setup_seconds: float = 0.0  # the API's start, and the worker's

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def pid(self) -> int:
        """The API's one process (`serve --workers 1` runs uvicorn in place)."""
        assert self.api.process is not None
        return self.api.process.pid

    def connection(self) -> Connection:
        return Connection(self.host, self.api.port, self.headers)


@contextlib.contextmanager
def deployment(
    database_url: str,
    redis_url: str,
    workdir: Path,
    answer: dict[str, Any],
    *,
    worker: bool,
    extra_env: dict[str, str] | None = None,
    worker_env: dict[str, str] | None = None,
) -> Iterator[Deployment]:
    """The fake LLM answering `answer`, an API process with API keys (a key for `OWNER`), and a
    worker process when `worker` (started while the API starts; `worker_env` added to its
    environment)."""
    with rig(database_url, redis_url, workdir, answer) as bench:
        key = bench.client.admin.create_key(OWNER, "bench")[1]
        env = {**bench.env, "CHATWORKER_API_AUTH": AUTH, **(extra_env or {})}
        api = ApiProcess(env, workdir / "api.log", cwd=REPO)
        process = bench.worker(**(worker_env or {})) if worker else None
        try:
            started = time.perf_counter()
            if process is not None:
                process.start(ready=False)  # its cold start overlaps the API's
            api.start()
            if process is not None:
                process.wait_until_ready()
            yield Deployment(bench, api, key, process, time.perf_counter() - started)
        finally:
            api.stop()
            if process is not None:
                process.stop(timeout=10)


def log_warnings(path: Path) -> dict[str, int]:
    """The API log's warnings and errors, by their start, ids and times left out: what went
    wrong, and how often."""
    found: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        for level in ("WARNING", "ERROR"):
            if line.startswith(level) or f" {level} " in line:
                said = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "<id>", line.split(level, 1)[1])
                found[f"{level}{said[:100]}"] += 1
                break
    return dict(found.most_common(8))


def _problem_code(exc: loadgen.HttpError) -> str:
    try:
        return f"{exc.status} {json.loads(exc.body)['code']}"
    except (ValueError, KeyError, TypeError):
        return str(exc.status)


# --- /proc ---------------------------------------------------------------------------------------


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError(f"no Threads for {pid}")


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every core since boot (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


@dataclass
class Usage:
    """CPU (fraction of one core) of some processes and of the whole machine over an interval."""

    pids: dict[str, int]
    seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    machine_busy: float = 0.0  # 0..1 of all cores
    _start: tuple[float, dict[str, float], float, tuple[int, int]] | None = None

    def __enter__(self) -> Usage:
        self._start = (
            time.perf_counter(),
            {name: cpu_seconds(pid) for name, pid in self.pids.items()},
            time.process_time(),
            machine_ticks(),
        )
        return self

    def __exit__(self, *_: object) -> None:
        assert self._start is not None
        wall, before, own, (busy, total) = self._start
        self.seconds = time.perf_counter() - wall
        self.cpu = {
            name: (cpu_seconds(pid) - before[name]) / self.seconds
            for name, pid in self.pids.items()
        }
        self.cpu["bench process (client)"] = (time.process_time() - own) / self.seconds
        busy_now, total_now = machine_ticks()
        self.machine_busy = (busy_now - busy) / max(1, total_now - total)

    def summary(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "cpu_fraction_of_a_core": self.cpu,
            "machine_busy_fraction": self.machine_busy,
        }


def database_transactions(client: Any) -> int:
    """Committed and rolled back transactions of this (throwaway) database so far."""
    query = text(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database "
        "WHERE datname = current_database()"
    )
    with client.engine.connect() as connection:
        connection.execute(text("SELECT pg_stat_clear_snapshot()"))
        return int(connection.execute(query).scalar_one())


def redis_clients(redis_url: str) -> int:
    """Connections to this (claimed) Redis logical database."""
    db = int(redis_url.rsplit("/", 1)[1])
    with contextlib.closing(redis.Redis.from_url(redis_url)) as r:
        clients: list[dict[str, Any]] = r.client_list()
    return sum(1 for c in clients if int(c.get("db", -1)) == db)


# --- api: requests per second beside a floor -----------------------------------------------------


class FloorServer:
    """`python -m bench.floor_server PORT` in its own process."""

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        log = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.floor_server", str(self.port)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def wait_until_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("the floor server exited early")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/floor", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the floor server never answered")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


EVENTS_PER_CONVERSATION_SUBMITS = 8  # a turn and 7 queued behind it: 3 + 7 events


def measure_api(
    database_url: str, redis_url: str, workdir: Path, seconds: float, rounds: int
) -> tuple[list[Row], dict[str, Any]]:
    """Each route for `seconds` in all at `CONCURRENCY`, in `rounds` (every route once a round,
    the floor first), after a warm-up of a fifth of that: a machine whose load drifts weighs on
    every route alike, and each round's ratio to the floor is of the same moment."""
    floor = FloorServer(workdir / "floor.log")
    try:
        with deployment(database_url, redis_url, workdir, {"text": "ok"}, worker=False) as d:
            floor.wait_until_ready()
            setup = d.setup_seconds
            plan = _api_plan(d, floor)
            loadgen.run(_api_rounds(plan, d.headers, seconds, rounds))
    finally:
        floor.stop()
    phases = {phase.name: phase.summary() for phase in plan}
    rows: list[Row] = []
    for name, phase in phases.items():
        rows.append((f"{name}: latency", phase["p50_ms"], phase["p95_ms"], "ms"))
        rows.append(single(f"{name}: throughput", phase["requests_per_second"], "req/s"))
        rows.append(single(f"{name}: server CPU", phase["server_cpu_ms_per_request"], "ms/req"))
    base = plan[0]
    extra = {
        "auth": AUTH,
        "concurrency": CONCURRENCY,
        "seconds": seconds,
        "rounds": rounds,
        "setup_seconds": setup,
        "load_average": os.getloadavg(),  # the machine is shared: how busy it was
        "phases": phases,
        "ratio_to_floor": {  # the median of the rounds' ratios
            phase.name: median([r / f for r, f in zip(phase.rates, base.rates, strict=True)])
            for phase in plan[1:]
        },
    }
    return rows, extra


FLOOR = "api: floor, bare FastAPI GET /floor"


async def _api_rounds(
    plan: list[Phase], headers: dict[str, str], seconds: float, rounds: int
) -> None:
    for phase in plan:
        await phase.load(headers, seconds / 5)
    for _ in range(rounds):
        for phase in plan:
            await phase.measure(headers, seconds / rounds)


def _api_plan(d: Deployment, floor: FloorServer) -> list[Phase]:
    client = d.rig.client
    # Conversations with a few events for GET .../events: a turn, and turns queued behind it
    # (nobody runs them: no worker in this measure).
    read_ids = [client.create_conversation(owner=OWNER) for _ in range(CONCURRENCY)]
    for conversation_id in read_ids:
        for n in range(EVENTS_PER_CONVERSATION_SUBMITS):
            client.submit_message(conversation_id, f"message {n}", on_busy="enqueue", owner=OWNER)
    events_each = len(client.events(read_ids[0], limit=1000, owner=OWNER).events)
    turn_ids = [client.current_turn(c, owner=OWNER).id for c in read_ids]  # type: ignore[union-attr]
    created: list[str] = []

    def created_one(body: bytes) -> None:
        created.append(json.loads(body)["id"])

    def floor_request(_: int) -> Request:
        return ("GET", "/floor", None)

    def health(_: int) -> Request:
        return ("GET", "/v1/health", None)

    def create(_: int) -> Request:
        return ("POST", "/v1/conversations", b"{}")

    def submit(n: int) -> Request | None:  # each to its own new conversation, once
        if n >= len(created):
            return None
        return ("POST", f"/v1/conversations/{created[n]}/messages", b'{"text": "ping"}')

    def events(n: int) -> Request:
        return ("GET", f"/v1/conversations/{read_ids[n % len(read_ids)]}/events?after=0", None)

    def turn(n: int) -> Request:
        return ("GET", f"/v1/turns/{turn_ids[n % len(turn_ids)]}", None)

    api = ("API process", d.api.port, d.pid)
    return [
        Phase(FLOOR, ("floor process", floor.port, floor.process.pid), floor_request),
        Phase("api: GET /v1/health (no auth, no database)", api, health),
        Phase("api: POST /v1/conversations", api, create, 201, created_one),
        Phase("api: POST .../messages (202, no worker)", api, submit, 202),
        Phase(f"api: GET .../events ({events_each} events)", api, events),
        Phase("api: GET /v1/turns/{id}", api, turn),
    ]


@dataclass
class Phase:
    """One route's closed loops: its requests are numbered from 0 across every run (a warm-up,
    then the measured runs), and what the measured runs found is summed."""

    name: str
    server: tuple[str, int, int]  # a name, its port, its pid
    requests: Callable[[int], Request | None]
    expect: int = 200
    on_body: Callable[[bytes], None] | None = None
    sent: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)  # each measured run's
    seconds: float = 0.0
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    machine_busy: list[float] = field(default_factory=list)

    def numbered(self, n: int) -> Request | None:
        return self.requests(self.sent + n)

    async def load(self, headers: dict[str, str], seconds: float) -> Load:
        _, port, _ = self.server
        load = await loadgen.closed_loop(
            "127.0.0.1", port, headers, self.numbered, expect=self.expect,
            concurrency=CONCURRENCY, seconds=seconds, on_body=self.on_body,
        )  # fmt: skip
        self.sent += len(load.latencies_ms)
        return load

    async def measure(self, headers: dict[str, str], seconds: float) -> None:
        name, _, pid = self.server
        with Usage({name: pid}) as usage:
            load = await self.load(headers, seconds)
        self.latencies_ms += load.latencies_ms
        self.rates.append(load.rate)
        self.seconds += load.seconds
        for who, fraction in usage.cpu.items():
            self.cpu_seconds[who] = self.cpu_seconds.get(who, 0.0) + fraction * usage.seconds
        self.machine_busy.append(usage.machine_busy)

    def summary(self) -> dict[str, Any]:
        rate = len(self.latencies_ms) / self.seconds
        server = self.server[0]
        return {
            "requests": len(self.latencies_ms),
            "requests_per_second": rate,
            "rates_per_round": self.rates,
            "p50_ms": median(self.latencies_ms),
            "p95_ms": p95(self.latencies_ms),
            "max_ms": max(self.latencies_ms),
            "server_cpu_ms_per_request": self.cpu_seconds[server] * 1000 / len(self.latencies_ms),
            "cpu_fraction_of_a_core": {k: v / self.seconds for k, v in self.cpu_seconds.items()},
            "machine_busy_fraction": self.machine_busy,
        }


# --- sse: many streams, commit -> client ---------------------------------------------------------


SSE_ANSWER = {"stream": True, "text": "a short streamed answer", "chunks": 3}
SSE_GRACE = 60.0  # seconds for the last turns to end after the last submit
OPENING = 50  # streams being opened at once
OPEN_ATTEMPTS = 3
WARM_UP_TURNS = 20


def measure_sse(
    database_url: str,
    redis_url: str,
    workdir: Path,
    steps: tuple[int, ...],
    *,
    rate: float,
    idle_seconds: float,
    warm_up: int = WARM_UP_TURNS,
) -> tuple[list[Row], dict[str, Any]]:
    """For each count in `steps` (growing): that many streams open, one per conversation
    (`until=never`); `idle_seconds` of quiet; then one turn in each conversation, submitted at
    `rate` per second, until every stream has seen its turn end (or a grace period)."""
    # (the stream caps, of the process and of the one owner, set past the largest step)
    cap = str(max(2000, max(steps) + 100))
    extra = {"CHATWORKER_API_MAX_STREAMS": cap, "CHATWORKER_API_MAX_STREAMS_PER_OWNER": cap}
    with deployment(
        database_url, redis_url, workdir, SSE_ANSWER, worker=True, extra_env=extra
    ) as d:
        found = loadgen.run(FanoutBench(d, redis_url, rate, idle_seconds, warm_up).run(steps))
        found["setup_seconds"] = d.setup_seconds
        found["api_log_warnings"] = log_warnings(d.api.log_path)
        found["load_average"] = os.getloadavg()
    rows: list[Row] = []
    for step in found["steps"]:
        n = step["streams"]
        producer, committed = step["producer_ms"], step["commit_ms"]
        rows += [
            (f"sse: {n} streams, producer commit -> client", median(producer), p95(producer), "ms"),
            (f"sse: {n} streams, worker commit -> client", median(committed), p95(committed), "ms"),
            single(f"sse: {n} streams open, API threads", step["api_threads_open"], "threads"),
            single(f"sse: {n} streams open, API RSS", step["api_rss_mb_open"], "MB"),
            single(f"sse: {n} idle streams, API CPU", step["idle_api_cpu"] * 100, "% of a core"),
            single(f"sse: {n} idle streams, database", step["idle_db_tps"], "tx/s"),
            single(f"sse: {n} busy streams, API CPU", step["busy_api_cpu"] * 100, "% of a core"),
            single(
                f"sse: {n} busy streams, client CPU", step["busy_client_cpu"] * 100, "% of a core"
            ),
            single(f"sse: {n} streams, opened per second", step["opened_per_second"], "streams/s"),
        ]
    return rows, found


class StampingChannel:
    """The producer's live channel: notes the wall clock of each commit notice it publishes
    (`ChatClient` publishes one right after a command's transaction commits, before anything
    else), which is the moment the producer's commit is done."""

    def __init__(self, inner: LiveChannel) -> None:
        self.inner = inner
        self.stamps: dict[uuid.UUID, float] = {}

    def publish(self, batch: Any) -> None:
        now = time.time()
        for conversation_id, _ in batch:
            self.stamps.setdefault(conversation_id, now)
        self.inner.publish(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class Fanout:
    """The conversations with an open stream, and what reached them in the current step:
    (conversation, SSE event, its `created_at`, when it arrived)."""

    ids: list[uuid.UUID] = field(default_factory=list)
    arrivals: list[tuple[uuid.UUID, str, str, float]] = field(default_factory=list)
    deltas: int = 0
    ended: set[uuid.UUID] = field(default_factory=set)
    all_ended: asyncio.Event = field(default_factory=asyncio.Event)

    def next_step(self) -> None:
        self.arrivals, self.deltas, self.ended = [], 0, set()
        self.all_ended = asyncio.Event()

    def on_event(self, conversation_id: uuid.UUID) -> Any:
        def seen(sse: loadgen.Sse) -> None:
            if sse.event == "message.delta":
                self.deltas += 1
                return
            created = json.loads(sse.data)["created_at"]
            self.arrivals.append((conversation_id, sse.event, created, sse.received))
            if sse.event in TERMINAL_EVENTS:
                self.ended.add(conversation_id)
                if len(self.ended) == len(self.ids):
                    self.all_ended.set()

        return seen

    def latencies(self, committed_at: dict[uuid.UUID, float]) -> tuple[list[float], list[float]]:
        """(producer commit -> client, worker commit -> client) in ms. The submit's events (one
        transaction: the same `created_at`, the database's clock at its start) are timed from the
        producer's stamp, once each (by `turn.queued`); the worker's from their `created_at`,
        the worker's clock just before each commit."""
        queued = {c: created for c, kind, created, _ in self.arrivals if kind == "turn.queued"}
        producer, worker = [], []
        for conversation_id, kind, created, received in self.arrivals:
            if kind == "turn.queued":
                producer.append((received - committed_at[conversation_id]) * 1000)
            elif created != queued.get(conversation_id):
                worker.append((received - datetime.fromisoformat(created).timestamp()) * 1000)
        return producer, worker


class FanoutBench:
    """Streams opened step by step on one API process, a producer in this process (the Python
    client, its commits stamped), and the worker running the turns."""

    def __init__(
        self,
        d: Deployment,
        redis_url: str,
        rate: float,
        idle_seconds: float,
        warm_up_turns: int = WARM_UP_TURNS,
    ) -> None:
        self.d = d
        self.warm_up_turns = warm_up_turns
        self.redis_url = redis_url
        self.rate = rate
        self.idle_seconds = idle_seconds
        self.fanout = Fanout()
        self.streams: list[SseStream] = []
        self.refused: Counter[str] = Counter()  # refused stream opens, by problem code
        self.channel = StampingChannel(open_channel(redis_url))
        engine = make_engine(d.rig.client.settings.database_url)
        self.producer = ChatClient(d.rig.client.settings, engine=engine, live=self.channel)
        assert d.worker is not None
        self.pids = {"API process": d.pid, "worker": dramatiq_child(d.worker)}

    async def run(self, steps: tuple[int, ...]) -> dict[str, Any]:
        try:
            await asyncio.to_thread(self.warm_up)
            found = [await self.step(count) for count in steps]
            broken = [s.task for s in self.streams if s.task is not None and s.task.done()]
        finally:
            for stream in self.streams:
                await stream.close()
            self.producer.close()
            gc.unfreeze()  # (frozen by each step: the measures after this one collect it all)
        return {
            "steps": found,
            "auth": AUTH,
            "rate": self.rate,
            "idle_seconds": self.idle_seconds,
            "streams_broken": len(broken),
            "first_break": next((repr(t.exception()) for t in broken if t.exception()), None),
        }

    async def step(self, count: int) -> dict[str, Any]:
        d, client, fanout = self.d, self.d.rig.client, self.fanout
        fanout.next_step()
        self.channel.stamps.clear()
        more = count - len(fanout.ids)
        ids = await asyncio.to_thread(
            lambda: [client.create_conversation(owner=OWNER) for _ in range(more)]
        )
        rss_before = rss_mb(d.pid)
        opened = time.perf_counter()
        await self.open(ids)
        found: dict[str, Any] = {
            "streams": count,
            "streams_open": len(fanout.ids),
            "opened_per_second": more / (time.perf_counter() - opened),
            "open_refusals": dict(self.refused),
            "api_rss_mb_before": rss_before,
        }
        await asyncio.sleep(max(1.0, count / 500))  # each new stream's first log read is done
        # This process's own streams (10,000 connections' objects) out of its collector's sight:
        # its full collections stopped its loop for 0.3-0.4 s, counted as latency the server
        # never caused (gc callbacks, 2026-11-27).
        gc.collect()
        gc.freeze()
        found.update(
            api_threads_open=threads(d.pid),
            api_rss_mb_open=rss_mb(d.pid),
            redis_clients_open=redis_clients(self.redis_url),
        )
        found["api_rss_kb_per_new_stream"] = (rss_mb(d.pid) - rss_before) * 1024 / more

        transactions = database_transactions(client)
        with Usage(self.pids) as idle:
            await asyncio.sleep(self.idle_seconds)
        found["idle_db_tps"] = (database_transactions(client) - transactions) / idle.seconds
        transactions = database_transactions(client)
        with Usage(self.pids) as busy:
            submitting = asyncio.ensure_future(asyncio.to_thread(self.produce))
            with contextlib.suppress(TimeoutError):
                grace = SSE_GRACE + count / self.rate
                await asyncio.wait_for(fanout.all_ended.wait(), timeout=grace)
            await submitting
        found["busy_db_tps"] = (database_transactions(client) - transactions) / busy.seconds
        producer_ms, commit_ms = fanout.latencies(self.channel.stamps)
        if not producer_ms or not commit_ms:
            raise RuntimeError(f"no event reached the {count} streams")
        found.update(
            idle=idle.summary(),
            busy=busy.summary(),
            idle_api_cpu=idle.cpu["API process"],
            busy_api_cpu=busy.cpu["API process"],
            busy_client_cpu=busy.cpu["bench process (client)"],
            api_threads_busy=threads(d.pid),
            api_rss_mb_busy=rss_mb(d.pid),
            producer_ms=producer_ms,
            commit_ms=commit_ms,
            events=len(fanout.arrivals),
            deltas=fanout.deltas,
            turns_seen_ending=len(fanout.ended),
        )
        return found

    async def open(self, ids: list[uuid.UUID]) -> None:
        """A stream for each conversation (`OPENING` being opened at a time); a refused one is
        tried again, as a browser's EventSource would, then given up (and counted)."""

        def opener(conversation_id: uuid.UUID) -> Any:
            async def attempts() -> None:
                for attempt in range(OPEN_ATTEMPTS):
                    stream = SseStream(self.d.connection(), self.fanout.on_event(conversation_id))
                    try:
                        await stream.open(f"/v1/conversations/{conversation_id}/stream?after=0")
                    except loadgen.HttpError as exc:
                        await stream.close()
                        self.refused[_problem_code(exc)] += 1
                        if attempt < OPEN_ATTEMPTS - 1:
                            await asyncio.sleep(1.0)
                        continue
                    self.streams.append(stream)
                    self.fanout.ids.append(conversation_id)
                    return
                self.refused["given up"] += 1

            return attempts

        await loadgen.bounded(OPENING, [opener(c) for c in ids])

    def warm_up(self) -> None:
        """A few turns first: the worker's first model call, its pools and connections."""
        ids = self.d.rig.submit(self.warm_up_turns)
        self.d.rig.wait_idle(ids, timeout=60)

    def produce(self) -> None:
        """A turn in each conversation, `rate` per second."""
        started = time.perf_counter()
        for n, conversation_id in enumerate(self.fanout.ids):
            pause = started + n / self.rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            self.producer.submit_message(conversation_id, "hello", owner=OWNER)


# --- ttft: POST -> first streamed token ----------------------------------------------------------

TTFT_ANSWER = {
    "stream": True,
    "text": "Here is the answer, one word after another, as a model streams it.",
    "chunks": 12,
    "chunk_delay": 0.02,
}
SETTLE_SECONDS = 0.3  # between turns: the stream is open, the worker idle (as a user types)


def measure_ttft(
    database_url: str, redis_url: str, workdir: Path, samples: int
) -> tuple[list[Row], dict[str, Any]]:
    with deployment(database_url, redis_url, workdir, TTFT_ANSWER, worker=True) as d:
        found, undelta = loadgen.run(_ttft(d, samples + 1))  # the first is a warm-up
        setup = d.setup_seconds
    for values in found.values():
        if len(values) > 1:
            del values[0]  # each kind's first turn warms it up
    rows: list[Row] = [
        (
            "ttft: POST .../messages -> first message.delta",
            median(found["ttft_ms"]),
            p95(found["ttft_ms"]),
            "ms",
        ),
        ("ttft: POST .../messages -> 202", median(found["post_ms"]), p95(found["post_ms"]), "ms"),
        (
            "ttft: POST -> the model's request (pickup)",
            median(found["pickup_ms"]),
            p95(found["pickup_ms"]),
            "ms",
        ),
        (
            "ttft: the model's request -> first delta at client",
            median(found["model_to_delta_ms"]),
            p95(found["model_to_delta_ms"]),
            "ms",
        ),
        (
            "ttft: POST /v1/responses (stream) -> first response.output_text.delta",
            median(found["responses_ttft_ms"]),
            p95(found["responses_ttft_ms"]),
            "ms",
        ),
        (
            "ttft: |its first output_text.delta - our stream's first message.delta|",
            median(found["responses_after_ours_ms"]),
            p95(found["responses_after_ours_ms"]),
            "ms",
        ),
    ]
    extra = {**found, "samples": samples, "auth": AUTH, "answer": TTFT_ANSWER}
    extra.update(committed_before_a_delta=undelta, setup_seconds=setup)
    return rows, {**extra, "load_average": os.getloadavg()}


async def _ttft(d: Deployment, samples: int) -> tuple[dict[str, list[float]], int]:
    """Each turn's figures, and how many turns had their reply committed before a delta came."""
    found: dict[str, list[float]] = {
        "ttft_ms": [],
        "post_ms": [],
        "pickup_ms": [],
        "model_to_delta_ms": [],
        "turn_ms": [],
        "responses_ttft_ms": [],
        "responses_after_ours_ms": [],
    }
    undelta = [0]  # turns whose reply was committed before any delta reached the client
    http = d.connection()
    body = await loadgen.call(http, ("POST", "/v1/conversations", b"{}"), 201)
    conversation_id = json.loads(body)["id"]
    model = json.loads(body)["model"]
    for n in range(samples):
        # Every other turn goes through OpenAI's dialect (POST /v1/responses, stream=true): the
        # same turn on our own stream and on the response's, both timed from the one POST.
        dialect = n % 2 == 1
        page = await loadgen.call(
            http, ("GET", f"/v1/conversations/{conversation_id}/events?limit=1", None), 200
        )
        last = json.loads(page)["last_seq"]
        loop = asyncio.get_running_loop()
        first: asyncio.Future[float] = loop.create_future()
        done: asyncio.Future[float] = loop.create_future()
        dialect_first: asyncio.Future[float] = loop.create_future()
        stream = SseStream(d.connection(), _ours(first, done, undelta))
        await stream.open(f"/v1/conversations/{conversation_id}/stream?after={last}&until=turn_end")
        await asyncio.sleep(SETTLE_SECONDS)
        text_ = f"[ttft {n:03d}] hello"
        responses = SseStream(d.connection(), _dialect_s(dialect_first))
        posted = time.time()
        if dialect:
            request = {"model": model, "input": text_, "conversation": conversation_id}
            await responses.open(
                "/v1/responses", "POST", json.dumps({**request, "stream": True}).encode()
            )
        else:
            await loadgen.call(
                http,
                ("POST", f"/v1/conversations/{conversation_id}/messages", _text(text_)),
                202,
            )
        accepted = time.time()
        try:
            delta_at = await asyncio.wait_for(first, 20)
            completed_at = await asyncio.wait_for(done, 20)
            if dialect:
                dialect_at = await asyncio.wait_for(dialect_first, 20)
                found["responses_ttft_ms"].append((dialect_at - posted) * 1000)
                # How far apart (either may come first: the two streams read the same entry).
                found["responses_after_ours_ms"].append(abs(dialect_at - delta_at) * 1000)
        finally:
            await stream.close()
            await responses.close()
        if dialect:
            continue
        asked = await asyncio.to_thread(d.rig.llm.requests, text_)
        model_at = float(asked[0]["received_at"])
        found["ttft_ms"].append((delta_at - posted) * 1000)
        found["post_ms"].append((accepted - posted) * 1000)
        found["pickup_ms"].append((model_at - posted) * 1000)
        found["model_to_delta_ms"].append((delta_at - model_at) * 1000)
        found["turn_ms"].append((completed_at - posted) * 1000)
    http.close()
    return found, undelta[0]


def _ours(
    first: asyncio.Future[float], done: asyncio.Future[float], undelta: list[int]
) -> Callable[[loadgen.Sse], None]:
    """Our own stream's watcher: its first delta (or the reply committed before any), its end."""

    def seen(sse: loadgen.Sse) -> None:
        if sse.event == "message.delta" and not first.done():
            first.set_result(sse.received)
        elif sse.event == "message.committed" and not first.done():
            if json.loads(sse.data)["message"]["role"] == "assistant":  # no delta came first
                undelta[0] += 1
                first.set_result(sse.received)
        elif sse.event == "turn.completed" and not done.done():
            done.set_result(sse.received)

    return seen


def _dialect_s(first: asyncio.Future[float]) -> Callable[[loadgen.Sse], None]:
    """The Responses stream's watcher: its first output_text.delta."""

    def seen(sse: loadgen.Sse) -> None:
        if sse.event == "response.output_text.delta" and not first.done():
            first.set_result(sse.received)

    return seen


def _text(value: str) -> bytes:
    return json.dumps({"text": value}).encode()


# --- the lines under the table -------------------------------------------------------------------

SSE_GOAL_MS = (50, 250)  # p50, p95 of commit -> client
TTFT_GOAL_MS = 100  # p50


def api_notes(extras: dict[str, Any]) -> list[str]:
    """The ratios, goals and diagnostics of `api`, `sse` and `ttft` that ran."""
    lines = []
    if "api" in extras:
        a = extras["api"]
        ratios = ", ".join(
            f"{name.removeprefix('api: ')} {ratio:.3f}x"
            for name, ratio in a["ratio_to_floor"].items()
        )
        client = max(
            p["cpu_fraction_of_a_core"]["bench process (client)"] for p in a["phases"].values()
        )
        phases = list(a["phases"].values())
        floor_cpu = phases[0]["server_cpu_ms_per_request"]
        cpu = ", ".join(
            f"{name.removeprefix('api: ')} {p['server_cpu_ms_per_request'] / floor_cpu:.1f}x"
            for name, p in list(a["phases"].items())[1:]
        )
        lines.append(
            f"api: req/s / the bare FastAPI floor's ({a['concurrency']} connections, auth "
            f"{a['auth']}): {ratios}; client CPU at most {client * 100:.0f}% of a core"
        )
        lines.append(f"api: server CPU per request / the floor's: {cpu}")
    if "sse" in extras:
        for step in extras["sse"]["steps"]:
            every = step["producer_ms"] + step["commit_ms"]
            ok = median(every) <= SSE_GOAL_MS[0] and p95(every) <= SSE_GOAL_MS[1]
            lines.append(
                f"sse: {step['streams_open']} streams, every commit -> client: p50 "
                f"{median(every):.0f} ms, p95 {p95(every):.0f} ms (goal p50 <= {SSE_GOAL_MS[0]} "
                f"ms, p95 <= {SSE_GOAL_MS[1]} ms: {'met' if ok else 'MISSED'}); "
                f"{step['turns_seen_ending']} of {step['streams']} turns seen ending; API "
                f"{step['api_threads_open']} threads, {step['redis_clients_open']} Redis "
                f"connections, {step['idle_api_cpu'] * 100:.0f}% of a core and "
                f"{step['idle_db_tps']:.0f} database transactions/s while idle"
            )
        sse = extras["sse"]
        refused = sse["steps"][-1]["open_refusals"]
        if refused or sse["streams_broken"]:
            lines.append(f"sse: refused opens {refused}; {sse['streams_broken']} streams broke")
        for said, times in list(sse["api_log_warnings"].items())[:3]:
            lines.append(f"sse: API log, {times}x: {said}")
    if "ttft" in extras:
        t = extras["ttft"]["ttft_ms"]
        ok = median(t) <= TTFT_GOAL_MS
        lines.append(
            f"ttft: POST -> first delta p50 {median(t):.0f} ms, p95 {p95(t):.0f} ms (goal p50 <= "
            f"{TTFT_GOAL_MS} ms: {'met' if ok else 'MISSED'})"
        )
    return lines


__all__ = ["api_notes", "measure_api", "measure_sse", "measure_ttft"]
