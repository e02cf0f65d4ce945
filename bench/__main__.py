"""`python -m bench [--quick | --smoke] [--only NAME[,NAME]] [--json PATH]`: measure, print a
table, write JSON. `--quick` takes few samples; `--smoke` the fewest that still run every part of
each measure (the test suite's: it proves each measure runs and reports, its figures mean
nothing). `--peers` runs only our loop beside DBOS and LangGraph (bench/peers.py), which need the
`peers` extra.

Needs the same PostgreSQL and Redis as the tests (TEST_DATABASE_URL / TEST_REDIS_URL, or the
local defaults); it works in throwaway databases and drops them afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from app.migrate import upgrade
from app.process_exit import exit_now
from app.testing import services
from bench.api import WARM_UP_TURNS as SSE_WARM_UP_TURNS
from bench.api import api_notes, measure_api, measure_sse, measure_ttft
from bench.callcpu import measure_call_cpu
from bench.cancel import measure_cancel
from bench.capacity import measure_capacity
from bench.context import context_notes, measure_context_cpu, measure_prompt_bytes
from bench.dbcost import dbcost_notes, measure_dbcost
from bench.dialects import measure_dialects
from bench.fairness import measure_fairness
from bench.files import measure_files
from bench.followers import measure_followers
from bench.footprint import measure_footprint
from bench.goals import goal_lines
from bench.history import measure_history
from bench.janitor import measure_janitor
from bench.llmcpu import measure_llm_cpu
from bench.overhead import (
    LOOP,
    LOOP_ON_ASYNCIO,
    LOOP_ON_LOOP_IO,
    LOOP_TRACED,
    LOOP_WITHOUT_CACHE,
    LOOP_WITHOUT_METRICS,
    TRACED_TURNS,
    WARM_UP_TURNS,
    Floor,
    enable_tracing,
    measure_floor,
    measure_loop,
    measure_loops,
)
from bench.peers import INSTALL, measure_peers, missing_packages, peers_notes
from bench.pickup import measure_pickup
from bench.recovery import measure_recovery
from bench.retention import measure_retention
from bench.schema import measure_schema_checks
from bench.stats import Row, median, p95, single
from bench.storage import measure_storage
from bench.throughput import measure_throughput
from bench.tree import measure_tree, tree_notes

T = TypeVar("T")


@contextlib.contextmanager
def throwaway_database(server: str) -> Iterator[str]:
    name = services.unique_name("bench")
    url = services.create_database(server, name)
    try:
        upgrade(url)
        yield url
    finally:
        services.drop_database(server, name)


@dataclass
class Context:
    size: str  # "full", "quick" or "smoke"
    postgres: str
    redis: str

    @property
    def quick(self) -> bool:
        """A short run (`--quick` or `--smoke`)."""
        return self.size != "full"

    def pick(self, full: T, quick: T, smoke: T) -> T:
        """The value of this run's size."""
        return {"full": full, "quick": quick, "smoke": smoke}[self.size]

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        with throwaway_database(self.postgres) as url:
            yield url

    @contextlib.contextmanager
    def processes(self) -> Iterator[tuple[str, str, Path]]:
        """A database, a claimed Redis db and a work directory for real worker processes."""
        with (
            throwaway_database(self.postgres) as url,
            services.claimed_redis_db(self.redis) as redis_db,
            tempfile.TemporaryDirectory() as workdir,
        ):
            yield url, redis_db, Path(workdir)


Measured = tuple[list[Row], dict[str, Any]]


def overhead(ctx: Context) -> Measured:
    conversations = ctx.pick(200, 10, 3)
    # (a smoke run proves each part runs: one untimed turn, one traced)
    warm_up, traced = ctx.pick((WARM_UP_TURNS, TRACED_TURNS), (WARM_UP_TURNS, TRACED_TURNS), (1, 1))
    with ctx.database() as url:
        floors = [measure_floor(url, conversations, floor, traced) for floor in Floor]
        # Turn by turn in turns: the default, metrics off, and every echo result not kept
        # whole (the session tool cache off).
        loop, unmetered, uncached, on_asyncio, awaited = measure_loops(
            url,
            conversations,
            {
                LOOP: {},
                LOOP_WITHOUT_METRICS: {"metrics": False},
                LOOP_WITHOUT_CACHE: {"session_cache": False},
                LOOP_ON_ASYNCIO: {"event_loop": "asyncio"},
                LOOP_ON_LOOP_IO: {"database_io": "async"},
            },
            warm_up,
            traced,
        )
        enable_tracing()  # (last: it stays on in this process)
        tracing = measure_loop(url, conversations, LOOP_TRACED, warm_up=warm_up, traced=traced)
    results = (*floors, loop, unmetered, uncached, on_asyncio, awaited, tracing)
    best = min(floors, key=lambda floor: floor.median)
    rows: list[Row] = [(r.name, r.median, r.p95, "ms/iteration") for r in results]
    rows += [
        single(f"{r.name}: round trips", r.round_trips_per_iteration, "trips/iteration")
        for r in results
    ]
    ratios = {
        "ratio_to_floor": {floor.name: loop.median / floor.median for floor in floors},
        "ratio_to_best_floor": loop.median / best.median,
        "best_floor": best.name,
        "session_cache_cost_ms": loop.median - uncached.median,
        "tracing_cost_ms": tracing.median - loop.median,
        "metrics_cost_ms": loop.median - unmetered.median,
        "uvloop_saves_ms": on_asyncio.median - loop.median,
        "ratio_on_asyncio_to_best_floor": on_asyncio.median / best.median,
        "async_io_saves_ms": loop.median - awaited.median,
        "ratio_async_io_to_best_floor": awaited.median / best.median,
        "ratio_without_metrics_to_best_floor": unmetered.median / best.median,
        "ratio_traced_to_best_floor": tracing.median / best.median,
        "ratio_without_cache_to_best_floor": uncached.median / best.median,
        "round_trips_per_iteration": {r.name: r.round_trips_per_iteration for r in results},
    }
    return rows, ratios


def pickup(ctx: Context) -> Measured:
    trials, busy_with = ctx.pick((30, 200), (3, 10), (1, 3))
    with ctx.processes() as (url, redis_db, workdir):
        idle, busy = measure_pickup(url, redis_db, workdir, trials, busy_with)
    rows: list[Row] = [
        ("idle pickup: enqueue -> first LLM request", median(idle), p95(idle), "ms"),
        (f"busy pickup ({busy_with} turns waiting on the model)", median(busy), p95(busy), "ms"),
    ]
    return rows, {"idle_ms": idle, "busy_ms": busy, "busy_with": busy_with}


def fairness(ctx: Context) -> Measured:
    return measure_fairness(ctx.processes, ctx.pick(8, 1, 1), flood=ctx.pick(100, 100, 30))


def throughput(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        return measure_throughput(url, redis_db, workdir, ctx.pick(300, 20, 5))


def llmcpu(ctx: Context) -> Measured:
    with ctx.database() as url:
        return measure_llm_cpu(url, ctx.pick(20, 3, 1), warm_up=ctx.pick(3, 3, 1))


def history(ctx: Context) -> Measured:
    with ctx.database() as url:
        return measure_history(url, ctx.pick(20, 3, 1))


def tree(ctx: Context) -> Measured:
    with ctx.database() as url:
        return measure_tree(url, ctx.pick(10, 3, 1), ctx.pick(6, 3, 2))


def context(ctx: Context) -> Measured:
    rows, extra = measure_context_cpu(ctx.pick(2_000, 200, 20))
    with ctx.database() as url:
        prompt_rows, prompt = measure_prompt_bytes(url, ctx.pick(200, 40, 8))
    return rows + prompt_rows, {**extra, "prompt": prompt}


def schema(ctx: Context) -> Measured:
    return measure_schema_checks(ctx.pick(2_000, 200, 20))


def janitor(ctx: Context) -> Measured:
    total, stale, repeats = ctx.pick((1_000_000, 1_000, 5), (20_000, 20, 3), (20_000, 20, 1))
    with ctx.database() as url:
        return measure_janitor(url, total, stale, repeats)


def retention(ctx: Context) -> Measured:
    with ctx.database() as url:
        return measure_retention(url, ctx.pick(1_000_000, 20_000, 2_000))


def storage(ctx: Context) -> Measured:
    with ctx.database() as url:
        return measure_storage(url, ctx.pick(100, 10, 3))


def capacity(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        return measure_capacity(url, redis_db, workdir, ctx.pick(300, 20, 5))


def recovery(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        trials = ctx.pick(10, 3, 1)
        return measure_recovery(url, redis_db, workdir, trials, frozen_trial=not ctx.quick)


def footprint(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        turns, cold_starts, idle = ctx.pick((1000, 3, 10.0), (50, 1, 2.0), (10, 1, 0.5))
        return measure_footprint(url, redis_db, workdir, turns, cold_starts, idle_seconds=idle)


def callcpu(ctx: Context) -> Measured:
    with services.claimed_redis_db(ctx.redis) as redis_db:
        return measure_call_cpu(ctx.pick(40, 5, 1), redis_db, warmups=ctx.pick(3, 3, 1))


def cancel(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        return measure_cancel(url, redis_db, workdir, ctx.pick(30, 3, 1))


def followers(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        return measure_followers(url, redis_db, workdir, ctx.pick(500, 20, 5))


def api(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        seconds, rounds = ctx.pick((12.0, 6), (1.0, 1), (0.3, 1))
        return measure_api(url, redis_db, workdir, seconds, rounds)


def sse(ctx: Context) -> Measured:
    steps, idle = ctx.pick(((100, 1000, 10_000), 5.0), ((100,), 1.0), ((20,), 0.3))
    with ctx.processes() as (url, redis_db, workdir):
        return measure_sse(
            url,
            redis_db,
            workdir,
            steps,
            rate=50 if ctx.quick else 40,
            idle_seconds=idle,
            warm_up=ctx.pick(SSE_WARM_UP_TURNS, SSE_WARM_UP_TURNS, 2),
        )


def dialects(ctx: Context) -> Measured:
    count, idle = ctx.pick((1000, 5.0), (100, 1.0), (20, 0.3))
    with ctx.processes() as (url, redis_db, workdir):
        rate = 50 if ctx.quick else 40  # as `sse`
        warm_up = ctx.pick(SSE_WARM_UP_TURNS, SSE_WARM_UP_TURNS, 2)
        return measure_dialects(
            url, redis_db, workdir, count, idle_seconds=idle, rate=rate, warm_up=warm_up
        )


def files(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        return measure_files(url, redis_db, workdir, ctx.pick(20, 5, 2), ctx.pick(100, 20, 3))


def dbcost(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        return measure_dbcost(
            ctx.postgres,
            url,
            redis_db,
            workdir,
            turns=ctx.pick(400, 60, 6),
            process_counts=ctx.pick((2, 4), (2, 4), (2,)),
            idle_seconds=ctx.pick(15.0, 6.0, 0.5),
            settle_seconds=ctx.pick(11.0, 11.0, 1.0),
        )


def ttft(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        return measure_ttft(url, redis_db, workdir, ctx.pick(30, 10, 2))


def peers(ctx: Context) -> Measured:
    """Our loop, the floors, DBOS and LangGraph in one run (`--peers`: not in MEASURES, as it
    needs the `peers` extra)."""
    with ctx.database() as url:
        return measure_peers(url, ctx.postgres, ctx.pick(100, 15, 2), warm_up=ctx.pick(10, 5, 1))


MEASURES: dict[str, Callable[[Context], Measured]] = {
    "overhead": overhead,
    "pickup": pickup,
    "fairness": fairness,
    "throughput": throughput,
    "history": history,
    "tree": tree,
    "context": context,
    "schema": schema,
    "janitor": janitor,
    "retention": retention,
    "storage": storage,
    "capacity": capacity,
    "recovery": recovery,
    "footprint": footprint,
    "llmcpu": llmcpu,
    "callcpu": callcpu,
    "cancel": cancel,
    "followers": followers,
    "api": api,
    "sse": sse,
    "dialects": dialects,
    "ttft": ttft,
    "files": files,
    "dbcost": dbcost,
}


def _names(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in MEASURES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {', '.join(MEASURES)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="few samples")
    sizes.add_argument("--smoke", action="store_true", help="the fewest: proves each runs")
    parser.add_argument("--only", type=_names, default=list(MEASURES), metavar="NAME[,NAME]")
    parser.add_argument("--json", type=Path, default=Path("bench-results.json"))
    parser.add_argument("--peers", action="store_true", help="only ours beside DBOS and LangGraph")
    args = parser.parse_args(argv)
    if args.peers:
        if args.only != list(MEASURES):
            parser.error("--peers runs its own set; it takes no --only")
        if missing := missing_packages():
            print(f"--peers needs {', '.join(missing)}: install the peers extra with\n  {INSTALL}")
            return 2
        args.only = ["peers"]

    size = "smoke" if args.smoke else "quick" if args.quick else "full"
    ctx = Context(size, services.provide_postgres().url, services.provide_redis().url)
    rows: list[Row] = []
    extras: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    for name in args.only:
        started = time.perf_counter()
        measured_rows, extra = (peers if name == "peers" else MEASURES[name])(ctx)
        seconds[name] = time.perf_counter() - started
        rows += measured_rows
        extras[name] = extra

    print(f"machine: {platform.node()} {platform.machine()} python {platform.python_version()}")
    print(f"{'measure':56} {'median':>10} {'p95':>10}  unit")
    for name, med, high, unit in rows:
        print(f"{name:56} {med:10.3f} {high:10.3f}  {unit}")
    _notes(extras)
    for line in peers_notes(extras):  # (here: _notes has all the branches it may)
        print(line)
    for line in goal_lines(rows, extras):
        print(line)
    print("seconds per measure: " + ", ".join(f"{n} {s:.1f}" for n, s in seconds.items()))
    report: dict[str, Any] = {
        "quick": ctx.quick,
        "size": size,
        "rows": [dict(zip(("name", "median", "p95", "unit"), r, strict=True)) for r in rows],
        "seconds": seconds,
        **extras,
    }
    report.update(extras.get("overhead", {}))  # the top-level ratios of earlier reports
    args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


def _notes(extras: dict[str, Any]) -> None:
    """The ratios and goals under the table."""
    if "overhead" in extras:
        o = extras["overhead"]
        each = ", ".join(f"{name}: {ratio:.2f}x" for name, ratio in o["ratio_to_floor"].items())
        print(
            f"durable loop / fastest floor ({o['best_floor']}): {o['ratio_to_best_floor']:.2f}x "
            f"(goal <= 2); per floor: {each}"
        )
        print(
            f"without the session tool cache: {o['ratio_without_cache_to_best_floor']:.2f}x; "
            f"keeping every output costs {o['session_cache_cost_ms']:+.3f} ms/iteration"
        )
        print(
            f"metrics off: {o['ratio_without_metrics_to_best_floor']:.2f}x; metrics cost "
            f"{o['metrics_cost_ms']:+.3f} ms/iteration. Metrics and tracing on: "
            f"{o['ratio_traced_to_best_floor']:.2f}x; tracing costs "
            f"{o['tracing_cost_ms']:+.3f} ms/iteration (goal: each <= 2)"
        )
        print(
            f"on asyncio's own event loop: {o['ratio_on_asyncio_to_best_floor']:.2f}x; uvloop "
            f"(the worker's default) saves {o['uvloop_saves_ms']:+.3f} ms/iteration"
        )
        print(
            f"steps awaited on the event loop (CHATWORKER_DATABASE_IO=async): "
            f"{o['ratio_async_io_to_best_floor']:.2f}x; it saves {o['async_io_saves_ms']:+.3f} "
            "ms/iteration over the database threads (the default)"
        )
    if "fairness" in extras:
        f = extras["fairness"]
        for label, figures in f.items():
            print(
                f"fairness, {label}: bob's pickup p50 {median(figures['alone_ms']):.0f} ms alone, "
                f"{median(figures['flooded_ms']):.0f} ms while alice floods "
                f"({figures['flood_turns']} of her turns submitted)"
            )
    if "history" in extras:
        h = extras["history"]
        print(
            f"history scaling, {h['sizes'][-1]:,} / {h['sizes'][0]} messages: "
            f"{h['ratio_last_to_first']:.2f}x with the claim (of a kept transcript), "
            f"{h['steps_ratio_last_to_first']:.2f}x for the steps (goal <= {h['goal_ratio']})"
        )
    if "throughput" in extras:
        t = extras["throughput"]
        print(f"throughput: 2 processes / 1 process: {t['scaling_2_over_1']:.2f}x")
    if "janitor" in extras:
        j = extras["janitor"]
        print(
            "janitor stale query uses ix_conversations_running_heartbeat:"
            f" {j['uses_index']}; plan (first lines):"
        )
        for line in j["plan"][:6]:
            print(f"    {line}")
    if "capacity" in extras:
        c = extras["capacity"]
        print(f"capacity: {c['peak_in_flight']} in flight at once (goal >= 200 per process)")
    if "callcpu" in extras:
        ms = extras["callcpu"]["ms"]
        streamed = ms["streamed 100"] <= 12 and ms["streamed 100"] <= 1.2 * ms["streamed 10"]
        whole = ms["not streamed 100"] <= 5
        floor = (ms["raw HTTP floor, streamed 100"], ms["raw HTTP floor, not streamed 100"])
        print(
            f"model call CPU at 100 msgs: streamed {ms['streamed 100']:.1f} ms (10 msgs: "
            f"{ms['streamed 10']:.1f}; goal <= 12 and flat: {'met' if streamed else 'MISSED'}), "
            f"not streamed {ms['not streamed 100']:.1f} ms (goal <= 5: "
            f"{'met' if whole else 'MISSED'}); raw HTTP floor {floor[0]:.1f} / {floor[1]:.1f} ms;"
            f" per streamed token {ms['per_token_us']:.0f} us (floor "
            f"{ms['floor_per_token_us']:.0f} us)"
        )
    if "cancel" in extras:
        c = extras["cancel"]["cancel_ms"]
        ok = median(c) <= 200 and p95(c) <= 1000
        print(
            f"cancel latency: p50 {median(c):.0f} ms, p95 {p95(c):.0f} ms "
            f"(goal p50 <= 200 ms, p95 <= 1 s: {'met' if ok else 'MISSED'})"
        )
    if "recovery" in extras:
        r = extras["recovery"]
        resumed = r["to_resumed_seconds"]
        frozen = r["frozen_seconds"]
        also = f"; a frozen worker's turn {frozen:.1f} s (its lease's TTL)" if frozen else ""
        print(
            f"recovery at the defaults: SIGKILL -> turn.resumed p50 {median(resumed):.2f} s,"
            f" p95 {p95(resumed):.2f} s over {len(resumed)} kills (goal p95 <= 3 s: "
            f"{'met' if r['meets_goal'] else 'MISSED'}){also}"
        )
    notes = [*context_notes(extras), *tree_notes(extras), *api_notes(extras)]
    for line in [*notes, *dbcost_notes(extras)]:
        print(line)


if __name__ == "__main__":
    exit_now(main())
