"""What one turn costs the database, and what that makes one PostgreSQL primary's ceiling.

Real worker processes (2, then 4) run bursts of the product's main job, a tool turn (two model
calls through the fake LLM, one call of the demo MCP server's `add`: `throughput.TOOL_TURN`),
submitted by the Python client as a web app would. For the database only, between a snapshot
taken before the burst's submits and one taken after its last turn ended:

- **CPU**: utime + stime from /proc of the server processes that served this benchmark's
  database (the backends of its sessions, sampled every 50 ms so a backend that comes and goes is
  counted too), and apart, the server's shared background processes (WAL writer, checkpointer,
  background writer: the whole cluster's, an upper bound), and every process of the server;
- **WAL**: the records that touched this database (`pg_walinspect` over the window's LSNs, in
  this throwaway database: blocks of this database and the commit records of the transactions
  that wrote them), beside the cluster's whole LSN distance;
- **transactions and rows**: `pg_stat_database` (commits, rollbacks, rows inserted, updated and
  deleted, buffers hit and read) of this database.

The PostgreSQL server is shared (other databases may be busy at the same time), so everything is
attributed to this database where PostgreSQL allows it, and the cluster-wide figures are shown
beside. A backend flushes its statistics at most once a second, and up to 10 s after it went idle,
so each window ends `settle` seconds after its last turn; the idle workers' own background work
(the liveness token's check, the sweeps: measured in an idle window before the burst) is taken
off.

The ceiling is an extrapolation, not a saturation test: this machine's 2 cores run the workers,
the fake LLM, the MCP servers, Redis and PostgreSQL at once, so PostgreSQL is never the
bottleneck here. `turns/s per DB core` = 1 / (backend CPU seconds per turn), assuming the primary
is CPU-bound (its working set cached, its disk keeping up with the WAL), and a primary of N
cores is run at 70 % of them.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psycopg
from sqlalchemy import make_url

from app.testing import services
from bench.stats import Row, single
from bench.throughput import TOOL_TURN
from bench.workers import CLOCK_TICKS, Rig, rig

#: A primary of this many cores is run at this share of them (the ceiling's assumption).
UTILIZATION = 0.7
PRIMARY_CORES = (1, 8, 16, 32, 64)
#: The workers' production settings for leases and sweeps (the test environment's are short).
PRODUCTION_LEASES = {
    "CHATWORKER_LEASE_TTL_SECONDS": "30",
    "CHATWORKER_HEARTBEAT_SECONDS": "10",
    "CHATWORKER_RECOVERY_INTERVAL_SECONDS": "15",
}
BACKGROUND = ("walwriter", "checkpointer", "background writer", "autovacuum", "logger")
COUNTERS = (
    "xact_commit",
    "xact_rollback",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "tup_returned",
    "tup_fetched",
    "blks_hit",
    "blks_read",
)


def _ticks(pid: int) -> int | None:
    """utime + stime of `pid` in clock ticks (None: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


def _children(parent: int) -> list[tuple[int, str]]:
    """The processes whose parent is `parent`, with their command lines."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
                found.append((int(entry), cmdline.decode(errors="replace").strip()))
    return found


def _tree_ticks(root: int) -> int:
    """utime + stime of `root` and every living descendant (a worker, its MCP servers)."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += _ticks(pid) or 0
        todo += [child for child, _ in _children(pid)]
    return total


class BackendSampler:
    """Samples the CPU of the server processes serving one database, every `interval` seconds,
    on a thread, from a session of another database (so it is no part of what it measures).
    Keeps each backend's first and last reading: a backend born in a window counts from zero."""

    def __init__(self, server_url: str, database: str, interval: float = 0.05) -> None:
        self.database = database
        self.interval = interval
        self.excluded: set[int] = set()
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._connection = psycopg.connect(services.libpq_dsn(server_url), autocommit=True)
        self._thread = threading.Thread(target=self._run, name="dbcost-sampler", daemon=True)

    def __enter__(self) -> BackendSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._connection.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        rows = self._connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.database,)
        ).fetchall()
        with self._lock:
            for (pid,) in rows:
                ticks = _ticks(pid)
                if ticks is None or pid in self.excluded:
                    continue
                self._first.setdefault(pid, ticks)
                self._last[pid] = ticks

    def mark(self) -> dict[int, int]:
        """A reading to measure from: every backend's CPU now (after a fresh sample)."""
        self.sample()
        with self._lock:
            return dict(self._last)

    def since(self, mark: dict[int, int]) -> tuple[float, int]:
        """CPU seconds of this database's backends since `mark`, and how many backends."""
        self.sample()
        with self._lock:
            # (a backend born in the window counts from zero: its start is the window's work)
            ticks = sum(last - mark.get(pid, 0) for pid, last in self._last.items())
            born = [pid for pid in self._last if pid not in mark]
        return ticks / CLOCK_TICKS, len(mark) + len(born)


@dataclass
class Snapshot:
    at: float
    lsn: str
    counters: dict[str, int]
    others_commits: dict[str, int]  # other databases' commits (how busy the server was)
    backends: dict[int, int]
    background: int  # ticks of the server's background processes
    server: int  # ticks of every server process (the postmaster and its children)
    workers: int  # ticks of the worker processes and their MCP servers
    llm: int  # ticks of the fake LLM
    bench: int  # ticks of this process (the client, the sampler)


@dataclass
class Window:
    seconds: float
    turns: int
    backend_cpu: float
    backends: int
    background_cpu: float
    server_cpu: float
    worker_cpu: float
    llm_cpu: float
    bench_cpu: float
    wal_cluster: float
    wal_ours: float
    wal_records: int
    counters: dict[str, float]
    others_commits: int
    polls: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Probe:
    """Snapshots of one database's cost: CPU, WAL, pg_stat_database."""

    def __init__(self, server_url: str, database_url: str, rig_: Rig, workers: list[int]) -> None:
        self.name = str(make_url(database_url).database)
        self.server = psycopg.connect(services.libpq_dsn(server_url), autocommit=True)
        self.own = psycopg.connect(services.libpq_dsn(database_url), autocommit=True)
        self.own.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        self.oid = int(_one(self.own, "SELECT oid FROM pg_database WHERE datname = %s", self.name))
        backend = int(self.own.info.backend_pid)
        stat = Path(f"/proc/{backend}/stat").read_text()
        self.postmaster = int(stat.rsplit(")", 1)[1].split()[1])
        self.rig = rig_
        self.workers = workers
        self.sampler = BackendSampler(server_url, self.name)
        self.sampler.excluded.add(backend)  # the probe's own session is not the turns' cost

    def close(self) -> None:
        self.server.close()
        self.own.close()

    def snapshot(self) -> Snapshot:
        columns = ", ".join(COUNTERS)
        rows = self.server.execute(
            f"SELECT datname, xact_commit, {columns} FROM pg_stat_database"
            " WHERE datname IS NOT NULL"
        ).fetchall()
        ours = next(row for row in rows if row[0] == self.name)
        others = {str(row[0]): int(row[1]) for row in rows if row[0] != self.name}
        processes = _children(self.postmaster)
        background = sum(
            _ticks(pid) or 0 for pid, cmd in processes if any(b in cmd for b in BACKGROUND)
        )
        server = (_ticks(self.postmaster) or 0) + sum(_ticks(pid) or 0 for pid, _ in processes)
        assert self.rig.llm.process is not None
        return Snapshot(
            at=time.monotonic(),
            lsn=str(_one(self.server, "SELECT pg_current_wal_flush_lsn()::text")),
            counters=dict(zip(COUNTERS, (int(v) for v in ours[2:]), strict=True)),
            others_commits=others,
            backends=self.sampler.mark(),
            background=background,
            server=server,
            workers=sum(_tree_ticks(pid) for pid in self.workers),
            llm=_tree_ticks(self.rig.llm.process.pid),
            bench=_ticks(os.getpid()) or 0,
        )

    def window(self, start: Snapshot, turns: int, polls: int = 0) -> Window:
        end = self.snapshot()
        backend_cpu, backends = self.sampler.since(start.backends)
        wal_ours, records = self._wal(start.lsn, end.lsn)
        return Window(
            seconds=end.at - start.at,
            turns=turns,
            backend_cpu=backend_cpu,
            backends=backends,
            background_cpu=(end.background - start.background) / CLOCK_TICKS,
            server_cpu=(end.server - start.server) / CLOCK_TICKS,
            worker_cpu=(end.workers - start.workers) / CLOCK_TICKS,
            llm_cpu=(end.llm - start.llm) / CLOCK_TICKS,
            bench_cpu=(end.bench - start.bench) / CLOCK_TICKS,
            wal_cluster=float(
                _one(self.server, "SELECT pg_wal_lsn_diff(%s, %s)", end.lsn, start.lsn)
            ),
            wal_ours=wal_ours,
            wal_records=records,
            counters={k: end.counters[k] - start.counters[k] for k in COUNTERS},
            others_commits=sum(
                commits - start.others_commits[name]
                for name, commits in end.others_commits.items()
                if name in start.others_commits
            ),
            polls=polls,
        )

    def _wal(self, start: str, end: str) -> tuple[float, int]:
        """WAL record bytes of this database between two LSNs: the records that touch its
        blocks, and every record (the commits) of the transactions that wrote them."""
        if start == end:
            return 0.0, 0
        block = f"% rel %/{self.oid}/%"
        try:
            row = self.own.execute(
                "WITH r AS (SELECT xid, record_length, block_ref"
                " FROM pg_get_wal_records_info(%(start)s, %(end)s)),"
                " ours AS (SELECT DISTINCT xid FROM r WHERE block_ref LIKE %(block)s AND xid <> 0)"
                " SELECT coalesce(sum(record_length), 0), count(*) FROM r"
                " WHERE block_ref LIKE %(block)s OR xid IN (SELECT xid FROM ours)",
                {"start": start, "end": end, "block": block},
            ).fetchone()
        except psycopg.errors.UndefinedFile:  # the shared server recycled a segment meanwhile
            return float("nan"), -1
        assert row is not None
        return float(row[0]), int(row[1])


def _one(connection: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = connection.execute(query, params or None).fetchone()
    assert row is not None
    return row[0]


def _wait_idle(poller: psycopg.Connection[Any], ids: list[uuid.UUID], timeout: float) -> int:
    """Poll every 50 ms on a session of its own until no conversation of `ids` runs; the
    number of polls (one transaction each, taken off the turns' count)."""
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        polls += 1
        row = poller.execute(
            "SELECT count(*) FROM conversations WHERE id = ANY(%s)"
            " AND status IN ('processing', 'tool_loop')",
            (ids,),
        ).fetchone()
        assert row is not None
        if not row[0]:
            return polls
        if time.monotonic() > deadline:
            raise TimeoutError(f"{row[0]} conversations still running")
        time.sleep(0.05)


@contextlib.contextmanager
def _started(bench: Rig, count: int) -> Iterator[list[int]]:
    """`count` worker processes (one dramatiq process each), started; their main pids."""
    workers = [bench.worker(f"dbcost{count}-{i}", **PRODUCTION_LEASES) for i in range(count)]
    try:
        for worker in workers:
            worker.start(ready=False)
        for worker in workers:
            worker.wait_until_ready()
        pids = []
        for worker in workers:
            assert worker.process is not None
            pids.append(worker.process.pid)
        yield pids
    finally:
        for worker in workers:
            worker.stop()


def _burst(bench: Rig, ids: list[uuid.UUID], poller: psycopg.Connection[Any]) -> tuple[float, int]:
    """Submit a tool turn in each of `ids` at once; seconds until the last is idle, and polls."""
    started = time.monotonic()
    for conversation_id in ids:
        bench.client.submit_message(conversation_id, "what is 2 + 3?")
    polls = _wait_idle(poller, ids, timeout=60 + len(ids))
    return time.monotonic() - started, polls


def _check_idle(bench: Rig, ids: list[uuid.UUID]) -> None:
    failed = [c for c in ids if bench.client.get_conversation(c).status != "idle"]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(ids)} turns did not end idle")


def measure_dbcost(
    server_url: str,
    database_url: str,
    redis_url: str,
    workdir: Path,
    *,
    turns: int,
    process_counts: tuple[int, ...],
    idle_seconds: float,
    settle_seconds: float,
) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    runs: dict[str, Any] = {}
    with rig(database_url, redis_url, workdir, {"text": "ok"}) as bench:
        bench.llm.script(cast("list[dict[str, Any]]", TOOL_TURN), mode="by_iteration")
        for count in process_counts:
            with _started(bench, count) as pids:
                runs[str(count)] = _measure(
                    bench,
                    server_url,
                    database_url,
                    pids,
                    turns,
                    idle_seconds=idle_seconds,
                    settle_seconds=settle_seconds,
                )
    for processes, run in runs.items():
        rows += _rows(int(processes), run)
    # The ceiling from the costliest run: the conservative one.
    best = max(runs.values(), key=lambda run: run["per_turn"]["db_cpu_ms"])
    extra: dict[str, Any] = {
        "turns": turns,
        "runs": runs,
        "utilization": UTILIZATION,
        "cpus_here": os.cpu_count(),
        "load_average_before": os.getloadavg(),
        "pg_stat_statements": "not preloaded (shared_preload_libraries): statements not counted",
        "ceiling_from": best["processes"],
    }
    return rows, extra


def _measure(
    bench: Rig,
    server_url: str,
    database_url: str,
    workers: list[int],
    turns: int,
    *,
    idle_seconds: float,
    settle_seconds: float,
) -> dict[str, Any]:
    poller = psycopg.connect(services.libpq_dsn(database_url), autocommit=True)
    probe = Probe(server_url, database_url, bench, workers)
    try:
        with probe.sampler:
            probe.sampler.excluded.add(int(poller.info.backend_pid))
            # Warm up: imports, MCP sessions, pools, prepared statements.
            warm = [
                bench.client.create_conversation(tools=["add"]) for _ in range(max(5, turns // 5))
            ]
            _burst(bench, warm, poller)
            _check_idle(bench, warm)
            ids = [bench.client.create_conversation(tools=["add"]) for _ in range(turns)]
            time.sleep(settle_seconds)  # every backend's statistics flushed
            idle_start = probe.snapshot()
            time.sleep(idle_seconds)
            idle = probe.window(idle_start, 0)
            start = probe.snapshot()
            busy_seconds, polls = _burst(bench, ids, poller)
            time.sleep(settle_seconds)
            window = probe.window(start, turns, polls)
        _check_idle(bench, ids)  # (after the window: these reads are not the turns' cost)
    finally:
        probe.close()
        poller.close()
    return _summary(len(workers), idle, window, busy_seconds)


def _summary(processes: int, idle: Window, window: Window, busy_seconds: float) -> dict[str, Any]:
    """Per-turn figures: the window's, less the idle workers' background over its length and
    the poller's transactions."""
    n = window.turns
    rate = window.seconds / idle.seconds  # idle background, scaled to the window

    def net(busy: float, background: float) -> float:
        return max(0.0, busy - background * rate) / n

    commits = window.counters["xact_commit"] - window.polls
    idle_commits = idle.counters["xact_commit"]
    per_turn = {
        "db_cpu_ms": 1000 * net(window.backend_cpu, idle.backend_cpu),
        "db_cpu_gross_ms": 1000 * window.backend_cpu / n,
        "background_cpu_ms_cluster": 1000 * window.background_cpu / n,
        # (NaN when the server recycled a WAL segment before it was read: the cluster's then)
        "wal_bytes": net(window.wal_ours, idle.wal_ours)
        if window.wal_records >= 0 and idle.wal_records >= 0
        else window.wal_cluster / n,
        "wal_bytes_cluster": window.wal_cluster / n,
        "commits": net(commits, idle_commits),
        "rollbacks": net(window.counters["xact_rollback"], idle.counters["xact_rollback"]),
        "rows_inserted": net(window.counters["tup_inserted"], idle.counters["tup_inserted"]),
        "rows_updated": net(window.counters["tup_updated"], idle.counters["tup_updated"]),
        "rows_deleted": net(window.counters["tup_deleted"], idle.counters["tup_deleted"]),
        "buffers": net(
            window.counters["blks_hit"] + window.counters["blks_read"],
            idle.counters["blks_hit"] + idle.counters["blks_read"],
        ),
        "worker_cpu_ms": 1000 * net(window.worker_cpu, idle.worker_cpu),
        "llm_cpu_ms": 1000 * window.llm_cpu / n,
    }
    per_core = 1000 / per_turn["db_cpu_ms"] if per_turn["db_cpu_ms"] else float("inf")
    ceiling = {str(cores): UTILIZATION * cores * per_core for cores in PRIMARY_CORES}
    return {
        "processes": processes,
        "turns": n,
        "turns_per_second": n / busy_seconds,
        "busy_seconds": busy_seconds,
        "window_seconds": window.seconds,
        "per_turn": per_turn,
        # Shares of one core over the burst (this machine has 2): who used the CPU.
        "cpu_share_of_a_core_during_burst": {
            "database_backends": (window.backend_cpu - idle.backend_cpu * rate) / busy_seconds,
            "workers_and_mcp": (window.worker_cpu - idle.worker_cpu * rate) / busy_seconds,
            "fake_llm": window.llm_cpu / busy_seconds,
            "bench_client": window.bench_cpu / busy_seconds,
        },
        "idle": {
            "seconds": idle.seconds,
            "db_cpu_share_of_a_core_per_worker": idle.backend_cpu / idle.seconds / processes,
            "commits_per_second_per_worker": idle_commits / idle.seconds / processes,
            "wal_bytes_per_second": idle.wal_ours / idle.seconds,
        },
        "backends": window.backends,
        "server_cpu_all_processes_s": window.server_cpu,
        "other_databases_commits": window.others_commits,
        "our_commits": window.counters["xact_commit"],
        "wal_records": window.wal_records,
        "wal_attributed": window.wal_records >= 0 and idle.wal_records >= 0,
        "turns_per_second_per_db_core": per_core,
        "ceiling_turns_per_second": ceiling,
        "wal_mb_per_second_at_16_core_ceiling": ceiling["16"] * per_turn["wal_bytes"] / 1e6,
    }


def _rows(count: int, run: dict[str, Any]) -> list[Row]:
    t = run["per_turn"]
    name = f"dbcost, {count} processes:"
    return [
        single(f"{name} turns/s achieved", run["turns_per_second"], "turns/s"),
        single(f"{name} DB CPU per turn (backends)", t["db_cpu_ms"], "ms"),
        single(f"{name} DB background CPU per turn", t["background_cpu_ms_cluster"], "ms"),
        single(f"{name} worker CPU per turn", t["worker_cpu_ms"], "ms"),
        single(f"{name} WAL per turn (this database)", t["wal_bytes"], "bytes"),
        single(f"{name} WAL per turn (whole cluster)", t["wal_bytes_cluster"], "bytes"),
        single(f"{name} commits per turn", t["commits"], "commits"),
        single(f"{name} rows written per turn", t["rows_inserted"] + t["rows_updated"], "rows"),
        single(f"{name} buffer accesses per turn", t["buffers"], "buffers"),
        single(f"{name} per DB core (100 %)", run["turns_per_second_per_db_core"], "turns/s"),
        single(
            f"{name} ceiling, 16 cores at 70 %", run["ceiling_turns_per_second"]["16"], "turns/s"
        ),
        single(f"{name} WAL at that ceiling", run["wal_mb_per_second_at_16_core_ceiling"], "MB/s"),
    ]


def dbcost_notes(extras: dict[str, Any]) -> list[str]:
    """Lines under the table."""
    if "dbcost" not in extras:
        return []
    d = extras["dbcost"]
    lines = []
    for count, run in d["runs"].items():
        share = run["cpu_share_of_a_core_during_burst"]
        idle = run["idle"]
        lines.append(
            f"dbcost, {count} processes: {run['turns_per_second']:.0f} turns/s; of a core during"
            f" the burst: database {share['database_backends']:.0%}, workers + MCP"
            f" {share['workers_and_mcp']:.0%}, fake LLM {share['fake_llm']:.0%}, client"
            f" {share['bench_client']:.0%}; idle, per worker process:"
            f" {idle['commits_per_second_per_worker']:.1f} commits/s,"
            f" {idle['db_cpu_share_of_a_core_per_worker']:.2%} of a DB core; other databases"
            f" committed {run['other_databases_commits']} meanwhile (ours"
            f" {run['our_commits']})"
        )
    best = d["runs"][str(d["ceiling_from"])]
    each = ", ".join(
        f"{cores} cores {rate:,.0f}" for cores, rate in best["ceiling_turns_per_second"].items()
    )
    lines.append(
        f"dbcost ceiling (CPU-bound primary at {d['utilization']:.0%}, an extrapolation from the"
        f" per-turn cost, not a saturation test): turns/s {each}"
    )
    return lines
