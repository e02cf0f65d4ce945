"""`python -m bench` ends with its performance goals, one line each: met, MISSED (with the
figure), or not measured in this run."""

from __future__ import annotations

from bench.goals import goal_lines


def test_each_goal_says_met_missed_or_not_measured() -> None:
    rows = [
        ("recovery: SIGKILL -> turn.resumed (defaults)", 0.9, 1.5, "s"),
        ("idle pickup: enqueue -> first LLM request", 18.0, 35.0, "ms"),
        ("throughput: worker CPU per tool turn, 1 process(es)", 25.0, 25.0, "ms"),
    ]
    extras = {"overhead": {"ratio_to_best_floor": 2.1}}
    lines = goal_lines(rows, extras)
    assert lines[0] == "the performance goals (this run):"
    assert len(lines) == 1 + 9  # the goals table's rows (the API's two on two lines)
    said = "\n".join(lines)
    assert "p50 0.90 s, p95 1.50 s: met" in said
    assert "2.10x: MISSED" in said
    assert "p50 18 ms, p95 35 ms: MISSED" in said
    assert "25.0 ms: MISSED" in said
    assert said.count("not measured in this run") == 5  # api (2), sse, callcpu, peers
