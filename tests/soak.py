"""The chaos soak: conversations with tools run through real worker processes while workers are
SIGKILLed, Redis restarts and Postgres backends are terminated; at rest every invariant must hold.

    python -m tests.soak --conversations 12 --turns 3 --workers 2 --duration 60 [--seed S]
                         [--json PATH] [--postgres URL] [--drain 90] [--keep]

The soak builds its own world and tears it down: a throwaway database on the PostgreSQL server
(`--postgres`, default `app.testing.services.provide_postgres()`), its own `redis-server` on a free
port, the fake LLM server (10 % transient 429/503 errors) and a temp dir for the tool ledger and
the worker logs (kept with `--keep` or when the soak fails). For `--duration` seconds conversations
start at staggered times and submit their turns one after the other (a failed turn is retried once;
about one turn in ten is cancelled by its user a moment after the submit; final answers stream)
while every third conversation is followed live by a reader that reconnects from its cursor now
and then, and the chaos runs: 2-5 s after every worker is up a random one is SIGKILLed and
replaced, once around the middle Redis is killed and restarted on the same port (doorbells in
flight and the live streams are lost: recovery comes from the database sweep, followers fall back
to the log), and about every 10 s the workers' Postgres backends are terminated. Then the chaos
stops, every turn gets up to `--drain` seconds to finish, the workers stop gracefully and
`tests/invariants.py` checks the database at rest; each submitted turn must
have exactly one final answer, or be the last turn of a conversation that ended `failed` with an
error, or have been cancelled (no answer, turn `cancelled`); each follower must have got every
committed event exactly once, in order, and every partial reply it was shown closed by its commit
or a `Discarded`. Exit code 0 only when nothing is violated and every conversation is at rest."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import redis
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from app.client import ChatClient, Cursor, Delta, Discarded, EventView
from app.config import load_settings
from app.errors import NotRetryable
from app.migrate import upgrade
from app.queue import make_broker, ring
from app.testing import services
from app.testing.fake_llm import BY_ITERATION, FakeLLMServer
from tests.invariants import violations
from tests.servers.mcp_server import read_ledger
from tests.worker_process import FAKE_MODEL, READY_LINE, WorkerProcess, worker_environment

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
TOOLS = ["search_docs", "add", "write_note", "fail", "hang", "exit_process"]
NORMAL_TOOLS = ("search_docs", "add", "write_note")
FAULT_TOOLS = ("fail", "hang", "exit_process")
# The tools whose arguments carry the call's own token, so the ledger maps runs back to calls.
KEYED_ARGUMENT = {"search_docs": "query", "write_note": "text", "fail": "message"}
QUERIES = ("refund policy", "postgres vacuum", "redis persistence", "http caching", "git rebase")
# The soak's own client is spared by the backend terminations: the chaos is aimed at the workers.
CLIENT_APPLICATION = "chatworker-soak-client"
RESTING = ("idle", "failed")
# Each model answer takes this long (seconds), so that kills land in the middle of turns.
LLM_DELAY_S = (0.1, 0.8)
TICK_S = 0.2
RERUN_MARGIN_S = 1.0
PROGRESS_EVERY_S = 10.0
WORKER_READY_S = 90.0


@dataclass(frozen=True)
class Options:
    conversations: int = 12
    turns: int = 3
    workers: int = 2
    duration: float = 60.0
    seed: int = 0
    postgres: str | None = None
    drain: float = 90.0
    # Chaos goes on past `duration` (for at most as long again) until this many workers were
    # killed: on a loaded machine workers boot slowly, and each kill waits for the last one's
    # replacement to be up.
    min_kills: int = 0
    think: float = 3.0  # a user reads the answer for up to this long before the next turn
    fault_rate: float = 0.05
    transient_rate: float = 0.1
    cancel_rate: float = 0.1  # turns a user cancels a moment after submitting them
    follow_every: int = 3  # every N-th conversation is followed live by a reader
    json_path: Path | None = None
    keep: bool = False


# --- the fake model's script per turn ---------------------------------------------------------


@dataclass
class PlannedCall:
    conversation: int
    call_id: str
    tool: str
    arguments: dict[str, Any]

    @property
    def key(self) -> str | None:
        name = KEYED_ARGUMENT.get(self.tool)
        return None if name is None else str(self.arguments[name])


def planned_call(
    rng: random.Random, index: int, marker: str, call_id: str, fault_rate: float
) -> PlannedCall:
    """One tool call: ~`fault_rate` an MCP fault (fail, hang past the timeout, server exit)."""
    token = f"{marker} {call_id}"
    if rng.random() < fault_rate:
        tool = rng.choice(FAULT_TOOLS)
        arguments: dict[str, Any] = {
            "fail": {"message": f"soak fault {token}"},
            "hang": {"seconds": 5},
            "exit_process": {"code": 3},
        }[tool]
    else:
        tool = rng.choice(NORMAL_TOOLS)
        arguments = {
            "search_docs": {"query": f"{rng.choice(QUERIES)} {token}"},
            "add": {"a": rng.randint(1, 999), "b": rng.randint(1, 999)},
            "write_note": {"text": f"soak note {token}"},
        }[tool]
    return PlannedCall(index, call_id, tool, arguments)


def turn_steps(
    rng: random.Random, index: int, marker: str, turn: int, fault_rate: float
) -> tuple[list[dict[str, Any]], list[PlannedCall]]:
    """Iteration 0: one or two tool calls; iteration 1: maybe one more; then the final text."""
    planned: list[PlannedCall] = []
    steps: list[dict[str, Any]] = []
    batches = [rng.choice((1, 2))] + ([1] if rng.random() < 0.5 else [])
    for iteration, size in enumerate(batches):
        calls = [
            planned_call(rng, index, marker, f"t{turn}i{iteration}c{k}", fault_rate)
            for k in range(size)
        ]
        planned += calls
        step_calls = [{"id": c.call_id, "name": c.tool, "arguments": c.arguments} for c in calls]
        steps.append({"tool_calls": step_calls, "delay": round(rng.uniform(*LLM_DELAY_S), 3)})
    final = f"Turn {turn} of {marker} is done, and this answer streamed in word by word."
    # The answer streams in pieces, so some kills and cancels land in the middle of a reply.
    delay = round(rng.uniform(*LLM_DELAY_S), 3)
    steps.append({"text": final, "delay": delay, "chunks": 8, "chunk_delay": 0.05})
    return steps, planned


# --- one conversation, as the web app sees it ---------------------------------------------------


@dataclass
class Conversation:
    """The soak's side of one conversation. `state`: pending (not created yet), submit (the next
    turn is due), waiting (a turn runs), retry (a failed turn is to be retried), done."""

    index: int
    marker: str
    start_after: float  # seconds after the chaos starts
    rng: random.Random  # its scripts and think times: the same seed gives the same scripts
    due_at: float = 0.0  # the next turn is not submitted before this (monotonic) moment
    id: uuid.UUID | None = None
    texts: list[str] = field(default_factory=list)  # the user messages submitted, in order
    answered: int = 0
    retried: set[int] = field(default_factory=set)  # turns retried once already
    errors: list[str] = field(default_factory=list)  # every failed outcome seen
    state: str = "pending"
    ended_failed: bool = False
    cancel_at: float | None = None  # the user cancels the running turn at this moment
    cancelled: set[int] = field(default_factory=set)  # turns the user asked to cancel

    @property
    def turn(self) -> int:
        return len(self.texts)


# --- the soak's own Redis ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def die_with_parent() -> list[str]:
    """A command prefix that SIGKILLs the child when the soak dies (a killed soak leaves no
    redis-server behind); empty where util-linux `setpriv` is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []


class RedisServer:
    """A private redis-server without persistence, restartable on the same port."""

    def __init__(self, port: int, log_path: Path) -> None:
        self.port = port
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._spawn()
            if self._wait_ping(deadline):
                return
            self.kill()  # the port may still be held by the previous instance: try again
            time.sleep(0.5)
        raise RuntimeError(f"redis-server did not start on port {self.port}: {self._log_tail()}")

    def _spawn(self) -> None:
        command = [
            *die_with_parent(), REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--daemonize", "no",
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def _wait_ping(self, deadline: float) -> bool:
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            if services.redis_answers(self.url):
                return True
            time.sleep(0.1)
        return False

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if not self.running():
            return
        client = redis.Redis.from_url(self.url, socket_timeout=3, socket_connect_timeout=3)
        with contextlib.suppress(redis.RedisError, OSError), contextlib.closing(client):
            client.shutdown(nosave=True)
        assert self.process is not None
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""


# --- the workers ------------------------------------------------------------------------------


class Workers:
    """`--workers` worker processes, each killed one replaced by a fresh one."""

    def __init__(self, env: dict[str, str], log_dir: Path, count: int) -> None:
        self.env = env
        self.log_dir = log_dir
        self.count = count
        self.active: list[WorkerProcess] = []
        self.booted: set[int] = set()  # ids of the workers seen ready (their logs said so)
        self.spawned_at: dict[int, float] = {}
        self.boot_seconds: list[float] = []  # spawn to ready, as seen by `all_booted`
        self.started = 0
        self.kills = 0
        self.exits: list[str] = []  # workers that died on their own, with why

    def spawn(self, ready: bool = False) -> None:
        self.started += 1
        worker = WorkerProcess(dict(self.env), self.log_dir / f"worker-{self.started:03d}.log")
        self.active.append(worker)
        self.spawned_at[id(worker)] = time.monotonic()
        worker.start(ready=ready, timeout=WORKER_READY_S)

    def all_booted(self) -> bool:
        """Whether every worker has logged that it is ready (its engine runs turns)."""
        for worker in self.active:
            if id(worker) in self.booted:
                continue
            if READY_LINE in worker.log_path.read_text(errors="replace"):
                self.booted.add(id(worker))
                self.boot_seconds.append(time.monotonic() - self.spawned_at[id(worker)])
        return all(id(worker) in self.booted for worker in self.active)

    def kill(self, victim: WorkerProcess) -> None:
        """SIGKILL its process group and start a replacement."""
        victim.kill()
        self.active.remove(victim)
        self.kills += 1
        self.spawn()

    def replace_dead(self) -> None:
        for worker in list(self.active):
            assert worker.process is not None
            code = worker.process.poll()
            if code is None:
                continue
            self.active.remove(worker)
            tail = " | ".join(worker.log().strip().splitlines()[-3:])
            self.exits.append(f"{worker.log_path.name} exited with {code}: {tail[-400:]}")
        while len(self.active) < self.count:
            self.spawn()

    def wait_ready(self) -> None:
        for worker in self.active:
            worker.wait_until_ready(WORKER_READY_S)

    def stop_all(self) -> None:
        """SIGTERM them all at once; each gets 30 s to drain before it is killed."""
        with ThreadPoolExecutor(max_workers=max(1, len(self.active))) as pool:
            list(pool.map(lambda worker: worker.stop(timeout=30), self.active))

    def kill_all(self) -> None:
        for worker in self.active:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                worker.kill()


# --- the chaos ----------------------------------------------------------------------------------


@dataclass
class ChaosCounts:
    worker_kills: int = 0
    kills_mid_turn: int = 0  # the victim held the lease of at least one running turn
    turns_interrupted: int = 0
    redis_restarts: int = 0
    backend_termination_rounds: int = 0
    backends_terminated: int = 0


class Chaos:
    """Scheduled faults, fired from the soak's one loop (so no locks, and no thread to stop)."""

    def __init__(
        self, rng: random.Random, world: World, start: float, duration: float, events: list[str]
    ) -> None:
        self.rng = rng
        self.world = world
        self.start = start
        self.events = events
        self.counts = ChaosCounts()
        self.next_kill: float | None = start + rng.uniform(2, 5)
        self.redis_down_at: float | None = start + duration / 2 + rng.uniform(-3, 3)
        self.redis_up_at: float | None = None
        self.next_terminate = start + rng.uniform(8, 12)

    def tick(self, now: float) -> None:
        if self.next_kill is None and self.world.workers.all_booted():
            self.next_kill = now + self.rng.uniform(2, 5)
        if self.next_kill is not None and now >= self.next_kill:
            self.kill_a_worker(now)
            self.next_kill = None  # the next one is timed from when the replacement is up
        if self.redis_down_at is not None and now >= self.redis_down_at:
            self.world.redis.kill()
            self.note(now, "redis-server killed")
            self.redis_down_at = None
            self.redis_up_at = now + self.rng.uniform(1, 3)
        if self.redis_up_at is not None and now >= self.redis_up_at:
            self.redis_back(now)
        if now >= self.next_terminate:
            terminated = self.world.terminate_backends()
            self.counts.backend_termination_rounds += 1
            self.counts.backends_terminated += terminated
            self.note(now, f"terminated {terminated} Postgres backend(s)")
            self.next_terminate = now + self.rng.uniform(8, 12)

    def kill_a_worker(self, now: float) -> None:
        """SIGKILL a random worker. The kills are timed from the moment every worker is up:
        a worker still importing its libraries runs no turn, and on a small machine two booting
        at once starve the one that works, so that nothing but give-ups would be tested."""
        victim = self.rng.choice(self.world.workers.active)
        leased = self.world.turns_leased_by(victim)
        self.world.workers.kill(victim)
        self.counts.worker_kills += 1
        self.counts.kills_mid_turn += 1 if leased else 0
        self.counts.turns_interrupted += leased
        self.note(now, f"SIGKILL a worker holding {leased} turn(s), started a replacement")

    def redis_back(self, now: float) -> None:
        self.world.redis.start()
        self.counts.redis_restarts += 1
        self.redis_up_at = None
        self.note(now, "redis-server started again (empty)")

    def finish(self) -> None:
        """Leave a healthy world: Redis up (if the duration ended while it was down)."""
        if self.redis_up_at is not None or not self.world.redis.running():
            self.redis_back(time.monotonic())

    def note(self, now: float, what: str) -> None:
        self.events.append(f"{now - self.start:7.2f}s {what}")


def owner_pid(owner: str) -> str:
    parts = owner.rsplit(":", 2)
    return parts[1] if len(parts) == 3 else ""


def process_group(pgid: int) -> set[str]:
    """The pids of a process group, from /proc (the worker's dramatiq main and child)."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid):
            pids.add(proc.name)
    return pids


# --- followers: readers of the live stream ------------------------------------------------------


class Follower:
    """Reads one conversation live (`ChatClient.follow`) in a thread for the whole soak, and
    reconnects from its cursor every few items and whenever a follow times out (2 s)."""

    def __init__(self, client: ChatClient, conversation_id: uuid.UUID, seed: str) -> None:
        self.client = client
        self.conversation_id = conversation_id
        self.rng = random.Random(seed)
        self.items: list[Any] = []
        self.cursor: Cursor | int = 0
        self.reconnects = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True, name="soak-follower")
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            self._follow_once(until=None, timeout=2.0)

    def _follow_once(self, until: str | None, timeout: float) -> None:
        try:
            following = self.client.follow(
                self.conversation_id, self.cursor, until=until, timeout=timeout, poll_interval=0.5
            )
            budget = self.rng.randint(3, 40)
            for item in following:
                self.items.append(item)
                self.cursor = following.cursor
                budget -= 1
                if budget == 0 or self._stop.is_set():
                    break
        except TimeoutError:
            pass
        except SQLAlchemyError:  # a terminated backend: resume from the cursor
            self.errors += 1
            time.sleep(0.2)
        self.reconnects += 1

    def finish(self) -> None:
        """Stop reading live, then catch up with what is committed (the conversation rests)."""
        self._stop.set()
        self._thread.join(timeout=10)
        self._follow_once(until="rest", timeout=30)

    def problems(self, last_seq: int) -> list[str]:
        """Every committed event once, in order; every partial shown was closed."""
        found = []
        seqs = [item.seq for item in self.items if isinstance(item, EventView)]
        if seqs != list(range(1, last_seq + 1)):
            found.append(f"follower got events {_runs(seqs)}, not 1..{last_seq} once each")
        if still_open := open_partials(self.items):
            found.append(f"follower left partial replies open: {sorted(still_open)}")
        return found


def open_partials(items: list[Any]) -> set[tuple[int, str]]:
    """The partial replies (message seq, stream) a reader was shown and never told the end of:
    neither its message committed nor the stream `Discarded`."""
    shown: set[tuple[int, str]] = set()
    for item in items:
        if isinstance(item, Delta):
            shown.add((item.message_seq, item.stream))
        elif isinstance(item, Discarded):
            shown.discard((item.message_seq, item.stream))
        elif item.type == "message.committed" and item.message_seq is not None:
            shown = {p for p in shown if p[0] != item.message_seq}
    return shown


def _runs(seqs: list[int]) -> str:
    """Seqs as runs (`1-40, 40-52`), so a repeat or a gap shows in a short line."""
    if not seqs:
        return "none"
    runs, start = [], seqs[0]
    for previous, current in itertools.pairwise(seqs):
        if current != previous + 1:
            runs.append(f"{start}-{previous}")
            start = current
    runs.append(f"{start}-{seqs[-1]}")
    return ", ".join(runs[:12])


# --- the world the soak runs in -----------------------------------------------------------------


def quietly(cleanup: Any, *args: Any) -> None:
    """Run one clean-up step; a failure is printed, and the other steps still run."""
    try:
        cleanup(*args)
    except Exception as exc:
        print(f"soak: clean-up {cleanup.__name__} failed: {exc!r}", file=sys.stderr)


class World:
    """Database, Redis, fake LLM, temp dir, workers and client; the exit stack undoes them."""

    def __init__(self, options: Options, stack: contextlib.ExitStack) -> None:
        self.options = options
        self.tmp = Path(tempfile.mkdtemp(prefix="chatworker-soak-"))
        self.keep_tmp = options.keep
        stack.callback(quietly, self._remove_tmp)
        self.admin_url = options.postgres or services.provide_postgres().url
        self.database_name = services.unique_name("soak")
        self.database_url = services.create_database(self.admin_url, self.database_name)
        stack.callback(quietly, services.drop_database, self.admin_url, self.database_name)
        upgrade(self.database_url)
        self.redis = RedisServer(free_port(), self.tmp / "redis.log")
        stack.callback(quietly, self.redis.stop)
        self.redis.start()
        self.llm = FakeLLMServer().start()
        stack.callback(quietly, self.llm.stop)
        self.ledger = self.tmp / "ledger.jsonl"
        env = worker_environment(
            self.database_url, self.redis.url, self.llm.api_base, self.ledger,
            self.tmp / "notes.txt", CHATWORKER_TOOL_TIMEOUT_SECONDS="2",
            # A `write_note` in flight at a kill is not run again: the model is told its outcome
            # is unknown (nobody here would answer the approval the default policy asks for).
            CHATWORKER_IN_FLIGHT_RECOVERY="error",
            # The production lease: a killed worker's turns continue by its liveness token, a
            # terminated token connection is taken again, a lost doorbell waits out the TTL.
            CHATWORKER_LEASE_TTL_SECONDS="30", CHATWORKER_HEARTBEAT_SECONDS="10",
            CHATWORKER_RECOVERY_INTERVAL_SECONDS="15", CHATWORKER_DEAD_WORKER_SWEEP_SECONDS="1",
        )  # fmt: skip
        self.workers = Workers(env, self.tmp, options.workers)
        stack.callback(quietly, self.workers.kill_all)  # after a graceful stop: nothing to do
        self.engine = self._client_engine()
        stack.callback(quietly, self.engine.dispose)
        settings = load_settings(
            database_url=self.database_url, redis_url=self.redis.url, model=FAKE_MODEL
        )
        broker = make_broker(settings)
        stack.callback(quietly, broker.close)
        self.client = ChatClient(settings, engine=self.engine, enqueue=lambda c: ring(c, broker))

    def _client_engine(self) -> Engine:
        return create_engine(
            self.database_url,
            pool_pre_ping=True,
            hide_parameters=True,
            connect_args={"application_name": CLIENT_APPLICATION},
        )

    def turns_leased_by(self, worker: WorkerProcess) -> int:
        """Running turns leased to a process of this worker (owner names are host:pid:token)."""
        assert worker.process is not None
        pids = process_group(worker.process.pid)
        try:
            with self.engine.connect() as connection:
                owners = connection.execute(
                    text(
                        "SELECT lease_owner FROM conversations WHERE lease_owner IS NOT NULL "
                        "AND status IN ('processing', 'tool_loop')"
                    )
                ).scalars()
                return sum(1 for owner in owners if owner_pid(owner) in pids)
        except SQLAlchemyError:
            return 0

    def terminate_backends(self) -> int:
        """Terminate every backend of the soak database but the soak's own client's."""
        try:
            with psycopg.connect(services.libpq_dsn(self.admin_url), autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid() AND application_name <> %s",
                    (self.database_name, CLIENT_APPLICATION),
                ).fetchall()
        except psycopg.Error:
            return 0
        return sum(1 for (done,) in rows if done)

    def _remove_tmp(self) -> None:
        if self.keep_tmp:
            print(f"soak: kept {self.tmp} (worker logs, ledger)", file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


# --- the report -------------------------------------------------------------------------------


@dataclass
class Report:
    seed: int
    duration_s: float
    elapsed_s: float = 0.0
    drain_s: float = 0.0
    conversations: int = 0
    turns_submitted: int = 0
    turns_answered: int = 0
    turns_failed: int = 0  # failed for good (after the one retry)
    turns_not_submitted: int = 0  # left when the drain deadline came
    failed_outcomes: int = 0  # every `failed` seen, retried or not
    failed_why: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    submits_not_enqueued: int = 0
    client_db_errors: int = 0
    worker_kills: int = 0
    kills_mid_turn: int = 0
    turns_interrupted: int = 0
    worker_exits_unexpected: int = 0
    worker_boot_s: str = ""  # spawn to ready: median / max
    redis_restarts: int = 0
    backend_termination_rounds: int = 0
    backends_terminated: int = 0
    llm_requests: int = 0
    transient_llm_errors: int = 0
    transient_by_status: dict[str, int] = field(default_factory=dict)
    mcp_faults_scripted: int = 0
    mcp_faults_run: dict[str, int] = field(default_factory=dict)
    tool_runs: int = 0
    tool_results_committed: int = 0
    tool_calls_run_twice: int = 0
    turns_cancel_asked: int = 0
    turns_cancelled: int = 0  # of those, ended `cancelled` (the others had been answered first)
    followers: int = 0
    follower_events: int = 0
    follower_deltas: int = 0
    follower_discarded: int = 0
    follower_reconnects: int = 0
    worker_log: dict[str, int] = field(default_factory=dict)
    not_at_rest: int = 0
    violations: list[str] = field(default_factory=list)
    worker_exits: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations and self.not_at_rest == 0

    def table(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.mcp_faults_run.items())) or "none"
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(self.transient_by_status.items()))
        rows = [
            ("seed", self.seed),
            ("chaos duration / drain / total", f"{self.duration_s:g} s / {self.drain_s:.1f} s / "
             f"{self.elapsed_s:.1f} s"),
            ("conversations", self.conversations),
            ("turns submitted", self.turns_submitted),
            ("turns answered", self.turns_answered),
            ("turns failed (after retry)", self.turns_failed),
            ("turns not submitted (drain deadline)", self.turns_not_submitted),
            ("failed outcomes (all)", self.failed_outcomes),
            ("retries", self.retries),
            ("submits not enqueued (Redis down)", self.submits_not_enqueued),
            ("client DB errors", self.client_db_errors),
            ("worker kills (SIGKILL)", self.worker_kills),
            ("kills holding a running turn (turns)",
             f"{self.kills_mid_turn} ({self.turns_interrupted})"),
            ("worker exits (unexpected)", self.worker_exits_unexpected),
            ("worker boot, spawn to ready (median / max)", self.worker_boot_s),
            ("Redis restarts", self.redis_restarts),
            ("backend terminations (rounds / backends)",
             f"{self.backend_termination_rounds} / {self.backends_terminated}"),
            ("LLM requests", self.llm_requests),
            ("transient LLM errors injected", f"{self.transient_llm_errors} ({statuses or '-'})"),
            ("MCP faults scripted / run (ledger)", f"{self.mcp_faults_scripted} / {faults}"),
            ("tool runs (ledger lines)", self.tool_runs),
            ("tool results committed", self.tool_results_committed),
            ("tool calls run twice (in flight at a kill)", self.tool_calls_run_twice),
            ("turns cancelled by their user / asked", f"{self.turns_cancelled} / "
             f"{self.turns_cancel_asked}"),
            ("followers: events / deltas / discarded",
             f"{self.followers}: {self.follower_events} / {self.follower_deltas} / "
             f"{self.follower_discarded}"),
            ("follower reconnects", self.follower_reconnects),
            ("worker logs", ", ".join(f"{k} {v}" for k, v in self.worker_log.items())),
            ("conversations not at rest", self.not_at_rest),
            ("violations", len(self.violations)),
        ]  # fmt: skip
        width = max(len(name) for name, _ in rows)
        lines = ["", "chaos soak " + ("PASSED" if self.ok else "FAILED"), "-" * (width + 30)]
        lines += [f"{name:<{width}}  {value}" for name, value in rows]
        lines += [f"  failed because: {why} (x{n})" for why, n in sorted(self.failed_why.items())]
        lines += [f"  VIOLATION: {v}" for v in self.violations]
        lines += [f"  worker exit: {e}" for e in self.worker_exits]
        return "\n".join(lines)


# --- the soak -----------------------------------------------------------------------------------


class Soak:
    """Drives the conversations as a web app would while the chaos fires; then counts, checks."""

    def __init__(self, options: Options, world: World) -> None:
        self.options = options
        self.world = world
        self.rng = random.Random(options.seed)
        self.report = Report(seed=options.seed, duration_s=options.duration)
        self.planned: list[PlannedCall] = []
        self.faults_scripted = 0
        self.followers: dict[uuid.UUID, Follower] = {}
        self.started = time.monotonic()
        # Starts spread over the chaos window, the last about 5 s per turn before its end, so
        # that turns run under chaos until it stops.
        last_start = max(options.duration / 2, options.duration - 5 * options.turns)
        spread = last_start / options.conversations
        self.conversations = [
            Conversation(
                i,
                f"soak-{i:03d}-{secrets.token_hex(4)}",
                start_after=spread * i,
                rng=random.Random(f"{options.seed}:{i}"),
            )
            for i in range(options.conversations)
        ]

    def run(self) -> Report:
        world = self.world
        world.workers.spawn(ready=True)  # the first one publishes the tool catalogue
        world.workers.replace_dead()
        world.workers.wait_ready()
        self.started = time.monotonic()
        chaos = Chaos(self.rng, world, self.started, self.options.duration, self.report.events)
        chaos_until = self.started + self.options.duration
        chaos_cap = chaos_until + self.options.duration
        deadline = chaos_cap + self.options.drain  # until the chaos stops
        progress_at = self.started + PROGRESS_EVERY_S
        chaos_on = True
        while True:
            now = time.monotonic()
            enough = chaos.counts.worker_kills >= self.options.min_kills or now >= chaos_cap
            if chaos_on and now >= chaos_until and enough:
                chaos.finish()
                chaos_on = False
                chaos_until = now
                deadline = now + self.options.drain
            if chaos_on:
                chaos.tick(now)
            world.workers.replace_dead()
            self._drive(now)
            done = all(c.state == "done" for c in self.conversations)
            if (done and not chaos_on) or now >= deadline:
                break
            if now >= progress_at:
                self._progress(now)
                progress_at = now + PROGRESS_EVERY_S
            time.sleep(TICK_S)
        chaos.finish()
        self.report.duration_s = round(chaos_until - self.started, 1)
        self.report.drain_s = max(0.0, time.monotonic() - chaos_until)
        self._count_chaos(chaos)
        self._finish()
        return self.report

    # --- driving the conversations -----------------------------------------------------------

    def _drive(self, now: float) -> None:
        for c in self.conversations:
            if c.state == "pending" and now - self.started >= c.start_after:
                self._create(c)
        if any(c.state == "waiting" for c in self.conversations):
            statuses = self._statuses()
            for c in self.conversations:
                if c.state == "waiting":
                    self._observe(c, *statuses.get(c.id, (None, None)))
        for c in self.conversations:
            if c.state == "submit" and now >= c.due_at:
                self._submit(c)
            elif c.state == "retry":
                self._retry(c)
            elif c.state == "waiting" and c.cancel_at is not None and now >= c.cancel_at:
                self._cancel(c)

    def _cancel(self, c: Conversation) -> None:
        """The user stops the running turn (it may have ended a moment before: then nothing)."""
        cid = c.id
        assert cid is not None
        if self._call(lambda: self.world.client.cancel(cid) or True) is not None:
            c.cancelled.add(c.turn)
            c.cancel_at = None

    def _create(self, c: Conversation) -> None:
        created = self._call(lambda: self.world.client.create_conversation(tools=TOOLS))
        if created is not None:  # else: again on the next tick
            c.id = created
            c.state = "submit"
            if c.index % self.options.follow_every == 0:
                self.followers[created] = Follower(self.world.client, created, c.marker)

    def _observe(self, c: Conversation, status: str | None, error: str | None) -> None:
        """A resting status seen after a submit or retry ends the turn that was running."""
        if status in RESTING:
            c.cancel_at = None
        if status == "idle":
            c.answered += 1
            c.state = "submit" if c.turn < self.options.turns else "done"
            c.due_at = time.monotonic() + c.rng.uniform(0, self.options.think)
        elif status == "failed":
            c.errors.append(error or "")
            self.report.failed_outcomes += 1
            if c.turn in c.retried:
                c.ended_failed = True
                c.state = "done"
            else:
                c.state = "retry"

    def _submit(self, c: Conversation) -> None:
        turn = c.turn + 1
        steps, planned = turn_steps(c.rng, c.index, c.marker, turn, self.options.fault_rate)
        self.world.llm.script(
            steps,
            match=c.marker,
            mode=BY_ITERATION,
            transient_error_rate=self.options.transient_rate,
            seed=c.rng.randrange(2**31),
        )
        message = f"{c.marker} turn {turn}: use the tools, then answer."
        cid = c.id
        assert cid is not None
        submitted = self._call(lambda: self.world.client.submit_message(cid, message))
        if submitted is None and not self._user_message_saved(cid, message):
            return  # not saved: submitted again (with a fresh script) on the next tick
        self.planned += planned
        self.faults_scripted += sum(1 for call in planned if call.tool in FAULT_TOOLS)
        c.texts.append(message)
        c.state = "waiting"
        if c.rng.random() < self.options.cancel_rate:
            c.cancel_at = time.monotonic() + c.rng.uniform(0, 2.5)
        if submitted is None or not submitted.enqueued:
            self.report.submits_not_enqueued += 1

    def _retry(self, c: Conversation) -> None:
        cid = c.id
        assert cid is not None
        try:
            submitted = self.world.client.retry_conversation(cid)
        except NotRetryable:
            submitted = None  # an earlier attempt that raised did commit: the turn runs
        except SQLAlchemyError:
            self.report.client_db_errors += 1
            return  # again on the next tick
        c.retried.add(c.turn)
        self.report.retries += 1
        c.state = "waiting"
        if submitted is not None and not submitted.enqueued:
            self.report.submits_not_enqueued += 1

    def _call(self, action: Any) -> Any:
        """A client call; None after a database error (the caller checks what got saved)."""
        try:
            return action()
        except SQLAlchemyError:
            self.report.client_db_errors += 1
            return None

    def _user_message_saved(self, conversation_id: uuid.UUID, message: str) -> bool:
        for _ in range(10):
            try:
                with self.world.engine.connect() as connection:
                    found = connection.execute(
                        text(
                            "SELECT count(*) FROM messages WHERE conversation_id = :id "
                            "AND role = 'user' AND content = :content"
                        ),
                        {"id": conversation_id, "content": message},
                    ).scalar_one()
                return bool(found)
            except SQLAlchemyError:
                time.sleep(0.5)
        raise RuntimeError("the soak's own database connection keeps failing")

    def _statuses(self) -> dict[uuid.UUID | None, tuple[str, str | None]]:
        try:
            with self.world.engine.connect() as connection:
                rows = connection.execute(text("SELECT id, status, error FROM conversations"))
                return {row.id: (row.status, row.error) for row in rows}
        except SQLAlchemyError:
            self.report.client_db_errors += 1
            return {}

    def _progress(self, now: float) -> None:
        states = Counter(c.state for c in self.conversations)
        answered = sum(c.answered for c in self.conversations)
        print(
            f"soak {now - self.started:6.1f}s: conversations {dict(states)}, turns answered "
            f"{answered}, failed outcomes {self.report.failed_outcomes}, "
            f"kills {self.world.workers.kills}",
            file=sys.stderr,
            flush=True,
        )

    # --- the end: stop, check, count -------------------------------------------------------------

    def _count_chaos(self, chaos: Chaos) -> None:
        report, counts = self.report, chaos.counts
        report.worker_kills = counts.worker_kills
        report.kills_mid_turn = counts.kills_mid_turn
        report.turns_interrupted = counts.turns_interrupted
        report.redis_restarts = counts.redis_restarts
        report.backend_termination_rounds = counts.backend_termination_rounds
        report.backends_terminated = counts.backends_terminated
        report.worker_exits = list(self.world.workers.exits)
        boots = sorted(self.world.workers.boot_seconds)
        if boots:
            report.worker_boot_s = f"{boots[len(boots) // 2]:.1f} s / {boots[-1]:.1f} s"
        report.worker_exits_unexpected = len(report.worker_exits)

    def _finish(self) -> None:
        world, report = self.world, self.report
        requests = world.llm.requests()
        world.workers.stop_all()
        self._settle()
        for follower in self.followers.values():
            follower.finish()
        report.elapsed_s = time.monotonic() - self.started
        report.llm_requests = len(requests)
        injected = [r["step"] for r in requests if (r.get("step") or {}).get("chaos")]
        report.transient_llm_errors = len(injected)
        report.transient_by_status = dict(Counter(str(step["error"]) for step in injected))
        report.conversations = len(self.conversations)
        report.turns_submitted = sum(c.turn for c in self.conversations)
        report.turns_answered = sum(c.answered for c in self.conversations)
        report.turns_failed = sum(1 for c in self.conversations if c.ended_failed)
        report.turns_not_submitted = sum(
            self.options.turns - c.turn for c in self.conversations if not c.ended_failed
        )
        errors = [e for c in self.conversations for e in c.errors]
        report.failed_why = dict(Counter(reason_of(error) for error in errors))
        report.mcp_faults_scripted = self.faults_scripted
        report.worker_log = worker_log_counts(world.tmp.glob("worker-*.log"))
        # The ledger path is in the environment of this soak's MCP servers only.
        found = violations(world.database_url, at_rest=True, mcp_marker=str(world.ledger))
        report.violations = (
            found + self._turn_problems() + self._tool_problems() + self._follower_problems()
        )

    def _settle(self) -> None:
        """The last look once the workers are gone: a turn that rested after the last tick is
        counted, and what the drain deadline left undone ends here (a failed turn unretried)."""
        statuses = self._statuses()
        for c in self.conversations:
            if c.state == "waiting":
                self._observe(c, *statuses.get(c.id, (None, None)))
            if c.state == "retry":
                c.ended_failed = True
            if c.state != "waiting":
                c.state = "done"

    def _turn_problems(self) -> list[str]:
        """Every submitted turn has exactly one final answer, or ended the conversation failed,
        or was cancelled by its user (then none)."""
        rows, statuses = self._transcripts()
        cancelled = self._cancelled_turns()
        problems: list[str] = []
        for c in self.conversations:
            if c.id is None:
                continue
            status, error = statuses.get(c.id, ("missing", None))
            if status not in RESTING:
                self.report.not_at_rest += 1
            ended_cancelled = cancelled.get(c.id, set())
            self.report.turns_cancel_asked += len(c.cancelled)
            self.report.turns_cancelled += len(ended_cancelled)
            if ended_cancelled - c.cancelled:
                problems.append(f"conversation {c.id}: turns {ended_cancelled} cancelled unasked")
            found = turn_check(c, rows.get(c.id, []), status, error, ended_cancelled)
            problems += [f"conversation {c.id} ({c.marker}): {p}" for p in found]
        return problems

    def _cancelled_turns(self) -> dict[Any, set[int]]:
        """Per conversation, the user turns (by the order of their messages) that ended
        `cancelled`."""
        with self.world.engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT t.conversation_id, (SELECT count(*) FROM messages m WHERE"
                    " m.conversation_id = t.conversation_id AND m.role = 'user'"
                    " AND m.seq <= t.message_seq) FROM turns t"
                    " WHERE t.status = 'cancelled' AND t.message_seq IS NOT NULL"
                )
            ).all()
        found: dict[Any, set[int]] = {}
        for conversation_id, number in rows:
            found.setdefault(conversation_id, set()).add(int(number))
        return found

    def _follower_problems(self) -> list[str]:
        with self.world.engine.connect() as connection:
            rows = connection.execute(text("SELECT id, event_seq FROM conversations")).all()
        last = {row.id: row.event_seq for row in rows}
        report, problems = self.report, []
        for conversation_id, follower in self.followers.items():
            report.followers += 1
            report.follower_events += sum(isinstance(i, EventView) for i in follower.items)
            report.follower_deltas += sum(isinstance(i, Delta) for i in follower.items)
            report.follower_discarded += sum(isinstance(i, Discarded) for i in follower.items)
            report.follower_reconnects += follower.reconnects
            found = follower.problems(int(last.get(conversation_id, 0)))
            problems += [f"conversation {conversation_id}: {p}" for p in found]
        return problems

    def _transcripts(self) -> tuple[dict[Any, list[Any]], dict[Any, tuple[str, str | None]]]:
        with self.world.engine.connect() as connection:
            messages = connection.execute(
                text(
                    "SELECT conversation_id, seq, role, content, tool_calls, tool_call_id, "
                    "created_at FROM messages ORDER BY conversation_id, seq"
                )
            ).all()
            statuses = {
                row.id: (row.status, row.error)
                for row in connection.execute(text("SELECT id, status, error FROM conversations"))
            }
        rows: dict[Any, list[Any]] = {}
        for row in messages:
            rows.setdefault(row.conversation_id, []).append(row)
        return rows, statuses

    def _tool_problems(self) -> list[str]:
        """Count the tool runs; a tool whose result was committed must never run again."""
        runs = read_ledger(self.world.ledger)
        report = self.report
        report.tool_runs = len(runs)
        report.mcp_faults_run = dict(Counter(r["tool"] for r in runs if r["tool"] in FAULT_TOOLS))
        rows, _ = self._transcripts()
        ids = {c.index: c.id for c in self.conversations}
        committed = {
            (row.conversation_id, row.tool_call_id): row.created_at
            for transcript in rows.values()
            for row in transcript
            if row.role == "tool"
        }
        report.tool_results_committed = len(committed)
        by_key = {(c.tool, c.key): c for c in self.planned if c.key is not None}
        times: dict[tuple[str, str], list[datetime]] = {}
        for run in runs:
            name = KEYED_ARGUMENT.get(run["tool"])
            if name is not None:
                key = (run["tool"], str(run["arguments"].get(name)))
                times.setdefault(key, []).append(datetime.fromisoformat(run["time"]))
        problems = []
        for key, moments in times.items():
            if len(moments) < 2 or key not in by_key:
                continue
            report.tool_calls_run_twice += 1
            call = by_key[key]
            done_at = committed.get((ids[call.conversation], call.call_id))
            if done_at is None:
                continue
            limit = done_at.timestamp() + RERUN_MARGIN_S
            late = [m for m in sorted(moments)[1:] if m.timestamp() > limit]
            if late:
                problems.append(
                    f"conversation {ids[call.conversation]}: tool call {call.call_id} "
                    f"({call.tool}) ran again at {late[0].isoformat()} after its result was "
                    f"committed at {done_at.isoformat()}"
                )
        return problems


def turn_check(
    c: Conversation,
    rows: list[Any],
    status: str,
    error: str | None,
    cancelled: set[int] | None = None,
) -> list[str]:
    cancelled = cancelled or set()
    problems = []
    users = [row.content for row in rows if row.role == "user"]
    if users != c.texts:
        problems.append(f"user messages {len(users)} != the {len(c.texts)} submitted")
    finals: list[int] = []
    for row in rows:
        if row.role == "user":
            finals.append(0)
        elif row.role == "assistant" and not row.tool_calls and finals:
            finals[-1] += 1
    for number, count in enumerate(finals, start=1):
        last = number == len(finals)
        if last and c.state != "done":
            continue  # still running at the end: reported as not at rest
        expected = 0 if (last and c.ended_failed) or number in cancelled else 1
        if count != expected:
            problems.append(f"turn {number} has {count} final answers (expected {expected})")
    if c.state == "done":
        wanted = "failed" if c.ended_failed else "idle"
        if status != wanted:
            problems.append(f"ended {status}, the soak saw it {wanted}")
        if wanted == "failed" and not (error or "").strip():
            problems.append("failed without an error")
    if sum(1 for n in finals if n == 1) + len(cancelled) != c.answered:
        problems.append(f"{c.answered} turns answered by the soak's count, transcript differs")
    return problems


# What the workers' logs say about recovery, counted over every worker that ran.
LOG_SIGNS = {
    "sweep re-enqueues": re.compile(r"recovery sweep: re-enqueued (\d+)"),
    "dead-worker re-enqueues": re.compile(r"dead worker sweep: re-enqueued (\d+)"),
    "lost doorbells rung": re.compile(r"lost doorbell sweep: rang (\d+)"),
    "claims given back (database back)": re.compile(r"gave back (\d+) interrupted claim"),
    "runs the database stopped": re.compile(r"the database went away mid-run"),
    "liveness tokens lost": re.compile(r"liveness token \d+ lost"),
    "leases lost": re.compile(r"lease lost"),
    "runs crashed": re.compile(r"run crashed"),
    "ran here (queue down)": re.compile(r"cannot enqueue .* running it here"),
    "heartbeats failed": re.compile(r"heartbeat failed"),
    "LLM retries": re.compile(r"LLM call attempt \d+ of \d+ failed"),
}


def worker_log_counts(paths: Iterator[Path]) -> dict[str, int]:
    counts = dict.fromkeys(LOG_SIGNS, 0)
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            for name, sign in LOG_SIGNS.items():
                found = sign.search(line)
                if found:
                    counts[name] += int(found.group(1)) if sign.groups else 1
    return counts


def reason_of(error: str) -> str:
    """Failures grouped: ids, numbers and long tails taken out."""
    reason = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "<id>", error)
    reason = re.sub(r"soak-\d{3}-[0-9a-f]{8}", "<marker>", reason)
    return reason[:160]


# --- entry point ------------------------------------------------------------------------------


def run(options: Options) -> Report:
    """Run the soak in its own world and return the report (the world is gone afterwards)."""
    with contextlib.ExitStack() as stack:
        world = World(options, stack)
        try:
            report = Soak(options, world).run()
        except BaseException:
            world.keep_tmp = True
            raise
        if not report.ok:
            world.keep_tmp = True
        return report


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak", description="The chaos soak of the chat worker."
    )
    parser.add_argument("--conversations", type=int, default=12)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of chaos")
    parser.add_argument("--seed", type=int, default=None, help="default: random, printed")
    parser.add_argument(
        "--postgres", default=None, help="admin URL (default: app.testing.services)"
    )
    parser.add_argument("--drain", type=float, default=90.0, help="seconds to let turns finish")
    parser.add_argument(
        "--min-kills", type=int, default=0,
        help="go on past --duration (at most as long again) until this many worker kills",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, ledger)")
    args = parser.parse_args(argv)
    if min(args.conversations, args.turns, args.workers) < 1 or args.duration <= 0:
        parser.error("--conversations, --turns and --workers must be >= 1, --duration > 0")
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    return Options(
        conversations=args.conversations,
        turns=args.turns,
        workers=args.workers,
        duration=args.duration,
        seed=seed,
        postgres=args.postgres,
        drain=args.drain,
        min_kills=args.min_kills,
        json_path=args.json,
        keep=args.keep,
    )


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so the workers, Redis and the database are cleaned up."""

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    print(f"soak: seed {options.seed}", file=sys.stderr, flush=True)
    with exit_on_sigterm():
        report = run(options)
    print(report.table(), flush=True)
    if options.json_path is not None:
        payload = {**asdict(report), "ok": report.ok}
        options.json_path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
