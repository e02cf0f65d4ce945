"""The benchmark runs (a smoke test of `python -m bench --quick`; its times are not checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_benchmark_prints_its_table_and_writes_json(
    postgres_server: str, redis_server: str, tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "TEST_DATABASE_URL": postgres_server, "TEST_REDIS_URL": redis_server}
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=480,  # ~3.5 min on a loaded 2-core machine
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "durable loop / fastest floor" in result.stdout
    report = json.loads(out.read_text())
    names = [row["name"] for row in report["rows"]]
    assert "durable loop (ChatService)" in names and "floor: raw psycopg one statement" in names
    assert all(row["median"] >= 0 for row in report["rows"])
    assert report["overhead"]["round_trips_per_iteration"]["durable loop (ChatService)"] > 0
    # Every measure ran and reported (names only: its numbers are not checked).
    prefixes = (
        "history",
        "janitor:",
        "storage:",
        "capacity:",
        "recovery:",
        "worker RSS",
        "busy pickup",
        "throughput:",
        "CPU per litellm call",
    )
    for prefix in prefixes:
        assert any(name.startswith(prefix) for name in names), prefix
    assert "ix_conversations_running_heartbeat" in "\n".join(report["janitor"]["plan"])
    assert report["janitor"]["uses_index"] is True
    assert set(report["seconds"]) == {
        "overhead",
        "pickup",
        "throughput",
        "history",
        "janitor",
        "storage",
        "capacity",
        "recovery",
        "footprint",
        "llmcpu",
    }
