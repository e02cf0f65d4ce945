"""`python -m bench [--quick] [--json PATH]`: measure, print a table, write JSON.

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
from collections.abc import Iterator
from pathlib import Path

from app.migrate import upgrade
from bench.overhead import measure_floor, measure_loop
from bench.pickup import measure_pickup
from bench.stats import median, p95
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few samples")
    parser.add_argument("--json", type=Path, default=Path("bench-results.json"))
    args = parser.parse_args(argv)
    conversations, trials = (10, 5) if args.quick else (200, 30)

    postgres = services.provide_postgres()
    redis = services.provide_redis()
    rows: list[tuple[str, float, float, str]] = []
    with throwaway_database(postgres.url) as url:
        floor = measure_floor(url, conversations, pipeline=False)
        piped = measure_floor(url, conversations, pipeline=True)
        loop = measure_loop(url, conversations)
    for result in (floor, piped, loop):
        rows.append((result.name, result.median, result.p95, "ms/iteration"))
    ratio = loop.median / floor.median
    ratio_piped = loop.median / piped.median
    with (
        throwaway_database(postgres.url) as url,
        services.claimed_redis_db(redis.url) as redis_db,
        tempfile.TemporaryDirectory() as workdir,
    ):
        pickup = measure_pickup(url, redis_db, Path(workdir), trials)
    rows.append(("idle pickup: enqueue -> first LLM request", median(pickup), p95(pickup), "ms"))

    print(f"machine: {platform.node()} {platform.machine()} python {platform.python_version()}")
    print(f"{'measure':48} {'median':>9} {'p95':>9}  unit")
    for name, med, high, unit in rows:
        print(f"{name:48} {med:9.3f} {high:9.3f}  {unit}")
    print(f"durable loop / raw psycopg floor: {ratio:.2f}x (pipeline floor: {ratio_piped:.2f}x)")
    args.json.write_text(
        json.dumps(
            {
                "quick": args.quick,
                "rows": [
                    dict(zip(("name", "median", "p95", "unit"), r, strict=True)) for r in rows
                ],
                "ratio_to_floor": ratio,
                "ratio_to_pipeline_floor": ratio_piped,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
