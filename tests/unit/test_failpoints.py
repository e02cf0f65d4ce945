"""Failpoints: parsing, and that an armed point kills the process at the right occurrence only."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.worker.failpoints import POINTS, Failpoint, parse

REPO = Path(__file__).resolve().parents[2]


def test_an_empty_spec_arms_nothing() -> None:
    assert parse("") == ()


def test_points_counts_and_tools() -> None:
    assert parse("tool_ran, after_claim:2, tool_ran:3@write_note") == (
        Failpoint("tool_ran"),
        Failpoint("after_claim", 2),
        Failpoint("tool_ran", 3, "write_note"),
    )


def test_an_unknown_point_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown failpoint 'after_claimm'"):
        parse("after_claimm")


def test_every_documented_point_parses() -> None:
    assert [f.point for f in parse(",".join(POINTS))] == list(POINTS)


@pytest.mark.parametrize(
    ("spec", "survives"),
    [
        ("", 3),  # unarmed: all three hits pass
        ("tool_ran", 0),  # the first hit kills
        ("tool_ran:2", 1),
        ("tool_ran@write_note", 1),  # only the write_note hit kills
        ("after_claim", 3),  # another point: never killed
    ],
)
def test_an_armed_point_kills_with_sigkill_at_its_occurrence(spec: str, survives: int) -> None:
    code = textwrap.dedent(
        """
        from app.worker import failpoints
        for tool in ("add", "write_note", "add"):
            failpoints.hit("tool_ran", tool)
            print("survived", flush=True)
        """
    )
    env = {"CHATWORKER_FAILPOINT": spec, "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert result.stdout.count("survived") == survives
    assert result.returncode == (0 if survives == 3 else -9)
