"""`python -m bench [--quick] [--only NAME[,NAME]] [--json PATH]`: measure, print a table, write
JSON.

Needs the same PostgreSQL and Redis as the tests (TEST_DATABASE_URL / TEST_REDIS_URL, or the
local defaults); it works in throwaway databases and drops them afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.migrate import upgrade
from bench.capacity import measure_capacity
from bench.footprint import measure_footprint
from bench.history import measure_history
from bench.janitor import measure_janitor
from bench.overhead import measure_floor, measure_loop
from bench.pickup import measure_pickup
from bench.recovery import measure_recovery
from bench.stats import Row, median, p95
from bench.storage import measure_storage
from tests import services


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
    quick: bool
    postgres: str
    redis: str

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
    conversations = 10 if ctx.quick else 200
    with ctx.database() as url:
        floor = measure_floor(url, conversations, pipeline=False)
        piped = measure_floor(url, conversations, pipeline=True)
        loop = measure_loop(url, conversations)
    rows = [(r.name, r.median, r.p95, "ms/iteration") for r in (floor, piped, loop)]
    ratios = {
        "ratio_to_floor": loop.median / floor.median,
        "ratio_to_pipeline_floor": loop.median / piped.median,
    }
    return rows, ratios


def pickup(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        samples = measure_pickup(url, redis_db, workdir, 5 if ctx.quick else 30)
    return [("idle pickup: enqueue -> first LLM request", median(samples), p95(samples), "ms")], {}


def history(ctx: Context) -> Measured:
    with ctx.database() as url:
        return measure_history(url, 3 if ctx.quick else 20)


def janitor(ctx: Context) -> Measured:
    total, stale, repeats = (20_000, 20, 3) if ctx.quick else (1_000_000, 1_000, 5)
    with ctx.database() as url:
        return measure_janitor(url, total, stale, repeats)


def storage(ctx: Context) -> Measured:
    with ctx.database() as url:
        return measure_storage(url, 10 if ctx.quick else 100)


def capacity(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        return measure_capacity(url, redis_db, workdir, 30 if ctx.quick else 300)


def recovery(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        trials = 3 if ctx.quick else 10
        return measure_recovery(url, redis_db, workdir, trials, production_trial=not ctx.quick)


def footprint(ctx: Context) -> Measured:
    with ctx.processes() as (url, redis_db, workdir):
        turns, cold_starts = (100, 1) if ctx.quick else (1000, 3)
        return measure_footprint(url, redis_db, workdir, turns, cold_starts)


MEASURES: dict[str, Callable[[Context], Measured]] = {
    "overhead": overhead,
    "pickup": pickup,
    "history": history,
    "janitor": janitor,
    "storage": storage,
    "capacity": capacity,
    "recovery": recovery,
    "footprint": footprint,
}


def _names(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in MEASURES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {', '.join(MEASURES)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few samples")
    parser.add_argument("--only", type=_names, default=list(MEASURES), metavar="NAME[,NAME]")
    parser.add_argument("--json", type=Path, default=Path("bench-results.json"))
    args = parser.parse_args(argv)

    ctx = Context(args.quick, services.provide_postgres().url, services.provide_redis().url)
    rows: list[Row] = []
    extras: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    for name in args.only:
        started = time.perf_counter()
        measured_rows, extra = MEASURES[name](ctx)
        seconds[name] = time.perf_counter() - started
        rows += measured_rows
        extras[name] = extra

    print(f"machine: {platform.node()} {platform.machine()} python {platform.python_version()}")
    print(f"{'measure':56} {'median':>10} {'p95':>10}  unit")
    for name, med, high, unit in rows:
        print(f"{name:56} {med:10.3f} {high:10.3f}  {unit}")
    _notes(extras)
    print("seconds per measure: " + ", ".join(f"{n} {s:.1f}" for n, s in seconds.items()))
    report: dict[str, Any] = {
        "quick": args.quick,
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
        print(
            f"durable loop / raw psycopg floor: {o['ratio_to_floor']:.2f}x "
            f"(pipeline floor: {o['ratio_to_pipeline_floor']:.2f}x)"
        )
    if "history" in extras:
        h = extras["history"]
        print(f"history scaling, last / first: {h['ratio_last_to_first']:.2f}x (goal <= 1.2)")
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
    if "recovery" in extras:
        r = extras["recovery"]
        production = r["production_lease_seconds"]
        also = f", 30 s lease {production[0]:.1f} s" if production else ""
        print(
            f"recovery: worst {r['max_to_request_seconds']:.1f} s with a 3 s lease{also}"
            f" (goal <= 60 s every trial: {'met' if r['meets_goal'] else 'MISSED'})"
        )


if __name__ == "__main__":
    sys.exit(main())
