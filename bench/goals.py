"""The performance goals, one line each, from the rows and figures of the measures
that ran (`python -m bench` runs them all; a goal whose measure did not run says so).

    recovery      SIGKILL mid-turn -> turn.resumed at the defaults     p95 <= 3 s
    overhead      durable loop / fastest raw floor                      <= 1.3x
    api           POST .../messages, GET .../events: CPU per request    <= 1 ms
                  the same routes' req/s / the bare FastAPI floor's      >= 0.25x
    sse           streams on one API process, worker commit -> client   10,000 at p95 <= 250 ms,
                                                                         RSS <= 400 MB
    pickup        enqueue -> first model request, idle worker           p95 <= 20 ms
    callcpu       worker CPU per streamed model call, 10 and 100 msgs   <= 5 ms at both
    throughput    worker CPU per tool turn                              <= 12 ms
    peers         DBOS and LangGraph + PostgresSaver per iteration      beside ours, same run
"""

from __future__ import annotations

from typing import Any

from bench.stats import Row

SSE_STREAMS, SSE_P95_MS, SSE_RSS_MB = 10_000, 250.0, 400.0


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def _row(rows: list[Row], prefix: str) -> Row | None:
    return next((row for row in rows if row[0].startswith(prefix)), None)


def goal_lines(rows: list[Row], extras: dict[str, Any]) -> list[str]:
    """One line per goal of the table above."""
    lines = ["the performance goals (this run):"]

    def say(what: str, found: str | None) -> None:
        lines.append(f"  {what}: {found if found is not None else 'not measured in this run'}")

    resumed = _row(rows, "recovery: SIGKILL -> turn.resumed")
    say(
        "SIGKILL mid-turn -> turn.resumed, defaults (goal p95 <= 3 s)",
        None
        if resumed is None
        else f"p50 {resumed[1]:.2f} s, p95 {resumed[2]:.2f} s: {_verdict(resumed[2] <= 3)}",
    )
    overhead = extras.get("overhead")
    say(
        "durable loop / fastest raw floor (goal <= 1.3x)",
        None
        if overhead is None
        else f"{overhead['ratio_to_best_floor']:.2f}x: "
        f"{_verdict(overhead['ratio_to_best_floor'] <= 1.3)}",
    )
    api = extras.get("api")
    if api is None:
        say("POST .../messages, GET .../events CPU per request (goal <= 1 ms)", None)
        say("the same routes' throughput / bare FastAPI floor (goal >= 0.25x)", None)
    else:
        hot = {
            name: phase
            for name, phase in api["phases"].items()
            if "POST .../messages" in name or "GET .../events" in name
        }
        cpu = [phase["server_cpu_ms_per_request"] for phase in hot.values()]
        ratios = [api["ratio_to_floor"][name] for name in hot if name in api["ratio_to_floor"]]
        say(
            "POST .../messages, GET .../events CPU per request (goal <= 1 ms)",
            " / ".join(f"{ms:.2f}" for ms in cpu) + f" ms: {_verdict(max(cpu) <= 1)}",
        )
        say(
            "the same routes' throughput / bare FastAPI floor (goal >= 0.25x)",
            " / ".join(f"{r:.3f}x" for r in ratios) + f": {_verdict(min(ratios) >= 0.25)}",
        )
    sse = extras.get("sse")
    if sse is None or not sse["steps"]:
        say(f"SSE streams, commit -> client (goal {SSE_STREAMS:,} at p95 <= 250 ms)", None)
    else:
        top = sse["steps"][-1]
        commit = sorted(top["commit_ms"])
        p95 = commit[min(len(commit) - 1, int(0.95 * len(commit)))] if commit else float("nan")
        met = (
            top["streams_open"] >= SSE_STREAMS
            and p95 <= SSE_P95_MS
            and top["api_rss_mb_open"] <= SSE_RSS_MB
        )
        say(
            f"SSE streams, commit -> client (goal {SSE_STREAMS:,} at p95 <= 250 ms, RSS <= 400 MB)",
            f"{top['streams_open']:,} open, p95 {p95:.0f} ms, RSS {top['api_rss_mb_open']:.0f} MB,"
            f" {top['api_threads_open']} threads: {_verdict(met)}",
        )
    pickup = _row(rows, "idle pickup: enqueue -> first LLM request")
    say(
        "enqueue -> first model request, idle worker (goal p95 <= 20 ms)",
        None
        if pickup is None
        else f"p50 {pickup[1]:.0f} ms, p95 {pickup[2]:.0f} ms: {_verdict(pickup[2] <= 20)}",
    )
    callcpu = extras.get("callcpu")
    if callcpu is None:
        say("worker CPU per streamed model call, 10 and 100 messages (goal <= 5 ms)", None)
    else:
        ms = callcpu["ms"]
        small, large = ms["streamed 10"], ms["streamed 100"]
        say(
            "worker CPU per streamed model call, 10 and 100 messages (goal <= 5 ms)",
            f"{small:.1f} / {large:.1f} ms (callcpu): {_verdict(max(small, large) <= 5)}",
        )
    turn = _row(rows, "throughput: worker CPU per tool turn, 1 process")
    say(
        "worker CPU per tool turn (goal <= 12 ms)",
        None if turn is None else f"{turn[1]:.1f} ms: {_verdict(turn[1] <= 12)}",
    )
    peers = extras.get("peers")
    say(
        "DBOS and LangGraph + PostgresSaver per iteration (reported beside ours)",
        None
        if peers is None
        else ", ".join(
            f"{name} {ratio:.2f}x the floor" for name, ratio in peers["ratio_to_best_floor"].items()
        ),
    )
    return lines


__all__ = ["goal_lines"]
