"""The benchmark runs (`python -m bench --smoke`: the fewest samples that run every part of each
measure; its times are not checked).

The measures run in five groups, as five tests, so the test processes share them out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.testing.zygote import start_process

REPO = Path(__file__).resolve().parents[2]
BENCH_TIMEOUT_S = 600

# Each group's measures, and the row names that show each measure reported.
GROUPS = {
    "in-process, TTFT": (
        (
            "overhead",
            "history",
            "tree",
            "context",
            "schema",
            "janitor",
            "retention",
            "storage",
            "llmcpu",
            "ttft",
        ),
        (
            "durable loop (TurnRunner)",
            "history",
            "tree (1,000 msgs",
            "context ",
            "schema: ordinary, in a checker process",
            "janitor:",
            "retention:",
            "storage:",
            "CPU per litellm call",
            "ttft:",
        ),
    ),
    "owner fairness, files": (
        ("fairness", "files"),
        (
            "fairness, no limit: bob alone",
            "fairness, owner limit 4: bob while alice floods",
            "submit, a 5 MB image: API CPU",
            "worker memory per in-flight image turn",
        ),
    ),
    "worker processes": (
        ("pickup", "capacity", "throughput", "dbcost"),
        ("idle pickup", "busy pickup", "capacity:", "throughput:", "dbcost"),
    ),
    "kills, footprint, SSE fan-out": (
        ("recovery", "footprint", "sse", "dialects"),
        ("recovery:", "worker RSS", "sse:", "dialects: 20 responses", "dialects: 20 ai-sdk"),
    ),
    "streams, cancels, API requests": (
        ("callcpu", "cancel", "followers", "api"),
        (
            "CPU per model call",
            "CPU per streamed token",
            "cancel latency",
            "follower latency",
            "api: floor",
            "api: GET .../events",
        ),
    ),
}


def run_bench(measures: tuple[str, ...], out: Path, postgres: str, redis: str) -> str:
    """`python -m bench --smoke` as its own process (forked warm by the zygote, as the suite's
    workers are; the workers it starts come from the same zygote), its output returned."""
    env = {**os.environ, "TEST_DATABASE_URL": postgres, "TEST_REDIS_URL": redis}
    log = out.with_suffix(".log")
    command = [sys.executable, "-m", "bench", "--smoke", "--only", ",".join(measures)]
    process = start_process([*command, "--json", str(out)], env, REPO, log)
    try:
        # each group takes under a minute alone, ~2 on a loaded 2-core machine; past 3 (200 s at a
        # load average of 15): a guard against a hang only, so well past any load
        code = process.wait(timeout=BENCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    output = log.read_text()
    assert code == 0, output
    return output


@pytest.mark.slow
@pytest.mark.timeout(BENCH_TIMEOUT_S + 60)
@pytest.mark.parametrize("group", GROUPS)
def test_the_benchmark_prints_its_table_and_writes_json(
    postgres_server: str, redis_server: str, tmp_path: Path, group: str
) -> None:
    measures, prefixes = GROUPS[group]
    out = tmp_path / "bench.json"
    stdout = run_bench(measures, out, postgres_server, redis_server)
    report = json.loads(out.read_text())
    names = [row["name"] for row in report["rows"]]
    # Every measure ran and reported (names only: its numbers are not checked).
    assert set(report["seconds"]) == set(measures)
    for prefix in prefixes:
        assert any(name.startswith(prefix) for name in names), prefix
    # Only a difference of two readings may be negative (memory per image turn *over* a text
    # turn is noise around zero when the worker holds no copy of the image).
    assert all(row["median"] >= 0 for row in report["rows"] if "(over " not in row["name"])
    if "overhead" in measures:
        assert "durable loop / fastest floor" in stdout
        assert "floor: raw psycopg one statement" in names
        assert report["overhead"]["round_trips_per_iteration"]["durable loop (TurnRunner)"] > 0
    if "janitor" in measures:
        assert "ix_conversations_running_heartbeat" in "\n".join(report["janitor"]["plan"])
    if "context" in measures:
        assert "context: deciding what to send at 10,000 messages" in stdout
        assert report["janitor"]["uses_index"] is True


def test_every_measure_is_in_a_smoke_group() -> None:
    from bench.__main__ import MEASURES

    grouped = [m for measures, _ in GROUPS.values() for m in measures]
    assert sorted(grouped) == sorted(MEASURES)
