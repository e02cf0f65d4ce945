"""The chaos soak, short enough for CI: 12 conversations x 3 turns through 2 real workers while,
for 30 s (up to 60 s, until 3 workers were killed), workers are SIGKILLed every few seconds,
Redis restarts once and the workers' Postgres backends are terminated (their liveness tokens'
too), at the production lease settings; answers stream, a tenth of
the turns are cancelled by their user, and 4 conversations are followed live by readers that
reconnect from their cursors; at rest every invariant holds, every turn is accounted for, and
every follower got every event exactly once.

The long run is `python -m tests.soak --conversations 40 --duration 300` (see tests/soak.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from app.testing.fake_llm import FakeLLMServer
from tests.worker_process import REPO

# ~60 s; at most 60 s of chaos (--min-kills) + 75 s drain (a doorbell Redis lost waits out the
# 30 s lease and a 15 s sweep) + boots; a guard against a hang, with room for a loaded machine
SOAK_TIMEOUT_S = 480
SOAK_ARGS = [
    "--conversations", "12", "--turns", "3", "--workers", "2", "--duration", "30",
    "--min-kills", "3",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(SOAK_TIMEOUT_S + 60)  # (past its own bound and the SIGTERM's 30 s grace)
def test_chaos_breaks_no_invariant(
    postgres_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "soak.json"
    command = [
        sys.executable, "-m", "tests.soak", *SOAK_ARGS, "--drain", "75",
        "--postgres", postgres_server, "--json", str(report_path),
    ]  # fmt: skip
    output, code = run_bounded(command, SOAK_TIMEOUT_S)
    with capsys.disabled():  # the table, with -s (xdist workers keep it: see the failure text)
        print("\n" + output)
    assert code == 0, f"the soak failed (exit {code}):\n{output}"
    report = json.loads(report_path.read_text())
    assert report["violations"] == [], output
    assert report["not_at_rest"] == 0, output
    answered, failed = report["turns_answered"], report["turns_failed"]
    assert answered + failed == report["turns_submitted"] >= 12, output
    assert report["worker_kills"] >= 3, output
    assert report["followers"] == 4 and report["follower_deltas"] > 0, output
    assert report["redis_restarts"] >= 1, output


def run_bounded(command: list[str], timeout: float) -> tuple[str, int]:
    """Run the soak; past `timeout` it gets SIGTERM (it then cleans its world up) and fails."""
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        pytest.fail(f"the soak did not finish within {timeout} s:\n{output}")
    return output, process.returncode


# --- the chaos option of the fake LLM server the soak relies on ---------------------------------


def post_completion(server: FakeLLMServer) -> tuple[int, dict[str, str], Any]:
    body = json.dumps({"model": "fake", "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(
        server.api_base + "/chat/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def test_transient_errors_are_injected_without_consuming_a_step(fake_llm: FakeLLMServer) -> None:
    fake_llm.script([{"text": "first"}, {"text": "second"}], transient_error_rate=0.5, seed=3)
    answers, errors = [], []
    for _ in range(60):
        status, headers, payload = post_completion(fake_llm)
        if status == 200:
            answers.append(payload["choices"][0]["message"]["content"])
            if len(answers) == 2:
                break
        else:
            errors.append(status)
            assert status in (429, 503)
            assert status == 503 or headers.get("Retry-After") == "0"
    assert answers == ["first", "second"]
    assert errors, "seed 3 at a rate of 0.5 injects at least one error before two answers"
    injected = [r for r in fake_llm.requests() if (r["step"] or {}).get("chaos")]
    assert len(injected) == len(errors)


def test_a_transient_error_rate_of_one_fails_every_request(fake_llm: FakeLLMServer) -> None:
    fake_llm.script([{"text": "never"}], transient_error_rate=1.0)
    assert {post_completion(fake_llm)[0] for _ in range(20)} <= {429, 503}
    fake_llm.script([{"text": "now"}], transient_error_rate=0.0)
    assert post_completion(fake_llm)[2]["choices"][0]["message"]["content"] == "now"
