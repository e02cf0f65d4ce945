"""An upgrade from the previous release in docs/OPERATIONS.md's order, with turns in flight.

The previous release's code (its commit, taken from git) migrates an empty database to its own
schema and runs its worker and API, each a new interpreter on this environment's packages (never
the test runner's zygote, whose `app` is this checkout's). Users keep a few turns in flight in
every conversation through the API of the moment, with tool calls. Then, as the order says:
this release migrates the database while those processes run; its workers start; the previous
workers stop (they drain); its API starts, users move to it, and the previous API stops. Each
step waits until turns submitted after it have completed, so each pairing of old and new
processes really wrote. At rest, an edit through the new API of a message the previous release
wrote after the migration, then the checks: every invariant (`tests/invariants.py`: the trees,
every version's transcript, the event log), every accepted turn completed, and every
conversation's path, as the new API shows it, one path from its first message holding the
users' messages in order (the edited one: the turns before the edit, then the edit).

`tests/integration/test_upgrade.py` runs a short one; a longer one on this machine's services:

    python -m tests.upgrade --conversations 24 --turns 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from app.migrate import upgrade
from app.testing import services
from app.testing.api_process import ApiProcess
from app.testing.fake_llm import BY_ITERATION, FakeLLMServer
from app.testing.worker_process import WorkerProcess
from app.testing.worker_process import worker_environment as bare_worker_environment
from app.testing.zygote import ENABLE_ENV as ZYGOTE_ENV
from tests.invariants import violations
from tests.worker_process import REPO, worker_environment
from tests.worker_process import WorkerProcess as CheckoutWorker

#: The previous release: the last commit of 2026-11-25, and the migration its schema stops at.
#: When a release ships, these move to it (docs/OPERATIONS.md, "Upgrading").
PREVIOUS_COMMIT = "d8d1f281cd9de2f46f09dd55243c5bbe39f47a47"
PREVIOUS_REVISION = "0015"

# A boot takes seconds; on a loaded 2-core machine with the previous release's imports not
# warmed by the zygote, more than a minute.
BOOT_TIMEOUT_S = 240.0
STEP_TIMEOUT_S = 120.0
TEXT = "please add 2 and 3"
MIGRATED = "migrated while the previous release runs"
NEW_WORKERS = "new workers beside the previous ones"


class PreviousReleaseMissing(RuntimeError):
    """The checkout has no history down to the previous release's commit (a shallow clone)."""


def materialise(target: Path) -> Path:
    """The previous release's files under `target` (`git archive` of its commit)."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS_COMMIT}^{{commit}}"],
        capture_output=True,
    )
    if found.returncode != 0:
        raise PreviousReleaseMissing(
            f"the previous release's commit {PREVIOUS_COMMIT} is not in the history of {REPO}:"
            " the upgrade test needs a clone with its history (`git fetch --unshallow`)"
        )
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(
        ["git", "-C", str(REPO), "archive", PREVIOUS_COMMIT], stdout=subprocess.PIPE
    )
    subprocess.run(["tar", "-x", "-C", str(target)], stdin=archive.stdout, check=True)
    assert archive.stdout is not None
    archive.stdout.close()
    if archive.wait() != 0:
        raise PreviousReleaseMissing(f"git archive {PREVIOUS_COMMIT} failed")
    return target


def _spawn(
    command: list[str], env: dict[str, str], cwd: Path, log: Path
) -> subprocess.Popen[bytes]:
    """A new interpreter, its own session's leader, its output appended to `log`."""
    with log.open("ab") as output:
        return subprocess.Popen(
            command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


@dataclass
class PreviousRelease:
    """The previous release's code at `root`, run as its own processes."""

    root: Path

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            **env,
            "PYTHONPATH": str(self.root),
        }

    def migrate(self, database_url: str, log: Path) -> None:
        """`chatworker migrate` of the previous release: its schema, on an empty database."""
        env = self.environment({"DATABASE_URL": database_url})
        command = [sys.executable, "-m", "app.cli", "migrate"]
        with log.open("ab") as output:
            subprocess.run(
                command, cwd=self.root, env=env, stdout=output, stderr=subprocess.STDOUT,
                check=True, timeout=BOOT_TIMEOUT_S,
            )  # fmt: skip

    def mcp_servers(self, ledger: Path) -> str:
        """Its own MCP test server (named as this release's workers name theirs)."""
        server = {
            "command": sys.executable,
            "args": ["-m", "tests.servers.mcp_server"],
            "cwd": str(self.root),
            "env": {"MCP_LEDGER_PATH": str(ledger), "PYTHONPATH": str(self.root)},
        }
        return json.dumps({"mcpServers": {"tools": server}})

    def worker(self, env: dict[str, str], log: Path) -> WorkerProcess:
        """`chatworker worker` of the previous release, not yet ready."""
        worker = WorkerProcess(self.environment(env), log, cwd=self.root)
        command = [sys.executable, "-m", "app.cli", "worker", "--processes", "1", "--threads", "2"]
        worker.process = _spawn(command, worker.env, self.root, log)
        return worker

    def api(self, env: dict[str, str], log: Path) -> ApiProcess:
        """`chatworker serve` of the previous release, not yet ready."""
        api = ApiProcess(self.environment(env), log, cwd=self.root)
        command = [
            sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1",
            "--port", str(api.port),
        ]  # fmt: skip
        api.process = _spawn(command, api.env, self.root, log)
        return api


@dataclass
class Plan:
    conversations: int = 4
    turns: int = 1  # turns per conversation, submitted after a step, that complete before the next
    in_flight: int = 2  # turns each conversation has submitted and not finished, at all times


@dataclass
class Report:
    accepted: dict[uuid.UUID, list[tuple[uuid.UUID, str]]] = field(default_factory=dict)
    steps: list[tuple[str, float, int]] = field(default_factory=list)  # name, seconds, completed
    problems: list[str] = field(default_factory=list)

    def table(self) -> str:
        lines = [f"{'step':<48} {'seconds':>8} {'turns completed':>16}"]
        lines += [f"{name:<48} {seconds:>8.1f} {done:>16}" for name, seconds, done in self.steps]
        return "\n".join(lines)


class Users(threading.Thread):
    """Every conversation keeps `in_flight` turns submitted and unfinished, each submitted
    through the API of the moment (`api`) with its own idempotency key: a submit that got no
    answer (an API stopping, a 5xx) is sent again, to whichever API serves then."""

    def __init__(self, database_url: str, conversations: list[uuid.UUID], plan: Plan) -> None:
        super().__init__(name="users", daemon=True)
        self.database_url = database_url
        self.plan = plan
        self.api = ""
        self.accepted: dict[uuid.UUID, list[tuple[uuid.UUID, str]]] = {c: [] for c in conversations}
        self.refused: list[str] = []
        self.stopping = threading.Event()
        self._sent: dict[uuid.UUID, int] = dict.fromkeys(conversations, 0)

    def run(self) -> None:
        with psycopg.connect(services.libpq_dsn(self.database_url), autocommit=True) as db:
            while not self.stopping.is_set():
                unfinished = dict(
                    db.execute(
                        "SELECT conversation_id, count(*) FILTER (WHERE status IN"
                        " ('queued', 'running', 'requires_action')) FROM turns"
                        " GROUP BY conversation_id"
                    ).fetchall()
                )
                for conversation in self.accepted:
                    if unfinished.get(conversation, 0) < self.plan.in_flight:
                        self._submit(conversation)
                self.stopping.wait(0.1)

    def _submit(self, conversation: uuid.UUID) -> None:
        number = self._sent[conversation] + 1
        text = f"{TEXT} (turn {number})"
        try:
            answer = httpx.post(
                f"{self.api}/v1/conversations/{conversation}/messages",
                json={"text": text, "on_busy": "enqueue"},
                headers={"Idempotency-Key": f"{conversation}-{number}"},
                timeout=30,
            )
        except httpx.HTTPError:
            return  # (the API of the moment is stopping: the next round sends it again)
        if answer.status_code >= 500:
            return
        if answer.status_code not in (200, 202):
            self.refused.append(f"{conversation} turn {number}: {answer.status_code} {answer.text}")
            return
        self.accepted[conversation].append((uuid.UUID(answer.json()["turn"]["id"]), text))
        self._sent[conversation] = number


class Upgrade:
    """The upgrade, step by step (`run`), on an empty database."""

    def __init__(
        self,
        database_url: str,
        redis_url: str,
        llm: FakeLLMServer,
        tmp: Path,
        plan: Plan | None = None,
    ) -> None:
        self.database_url, self.redis_url, self.llm, self.tmp = database_url, redis_url, llm, tmp
        self.plan = plan or Plan()
        self.report = Report()
        self._clock = time.monotonic()
        self.old = PreviousRelease(materialise(tmp / "previous-release"))
        self.processes: list[WorkerProcess | ApiProcess] = []
        self.env = worker_environment(
            database_url, redis_url, llm.api_base, tmp / "ledger.jsonl", tmp / "notes.txt",
            CHATWORKER_API_AUTH="none",
        )  # fmt: skip
        self.old_env = bare_worker_environment(
            database_url, redis_url, llm.api_base, self.old.mcp_servers(tmp / "old-ledger.jsonl"),
            CHATWORKER_API_AUTH="none",
        )  # fmt: skip
        self.db = psycopg.connect(services.libpq_dsn(database_url), autocommit=True)
        self.users: Users | None = None
        self._times: dict[str, Any] = {}  # each step's start, on the database's clock
        self.edited: tuple[uuid.UUID, uuid.UUID, int] | None = None  # conversation, turn, seq
        self.edit_turn: uuid.UUID | None = None

    # --- the steps ----------------------------------------------------------------------------

    def run(self) -> Report:
        try:
            self._run()
        finally:
            self.close()
        return self.report

    def _run(self) -> None:
        self.llm.script(
            [
                {"tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}],
                 "delay": 0.2},
                {"text": "5", "delay": 0.2},
            ],
            mode=BY_ITERATION,
        )  # fmt: skip
        self.old.migrate(self.database_url, self.tmp / "old-migrate.log")
        self._mark("the previous release from git, its schema")
        old_worker = self._keep(self.old.worker(self.old_env, self.tmp / "old-worker.log"))
        old_api = self._keep(self.old.api(self.old_env, self.tmp / "old-api.log"))
        old_api.wait_until_ready(BOOT_TIMEOUT_S)
        old_worker.wait_until_ready(BOOT_TIMEOUT_S)
        self._mark("its worker and API started")
        conversations = [self._create(old_api.url) for _ in range(self.plan.conversations)]
        self.users = Users(self.database_url, conversations, self.plan)
        self.users.api = old_api.url
        self.users.start()
        self._step("turns on its schema")
        upgrade(self.database_url)
        self._step(MIGRATED)
        self._keep(
            CheckoutWorker(self.env, self.tmp / "new-worker.log").start(True, BOOT_TIMEOUT_S)
        )
        self._step(NEW_WORKERS)
        old_worker.stop()
        self._step("the previous workers stopped")
        new_api = self._keep(ApiProcess(self.env, self.tmp / "new-api.log", cwd=REPO))
        new_api.start(BOOT_TIMEOUT_S)
        self.users.api = new_api.url
        old_api.stop()
        self._step("the new API, the previous one stopped")
        self.users.stopping.set()
        self.users.join()
        self._wait(lambda: self._unfinished() == 0, "every turn to finish")
        self.report.accepted = self.users.accepted
        self.report.problems += self.users.refused
        self._mark("every turn finished")
        self._edit(new_api.url, conversations[0], (MIGRATED, NEW_WORKERS))
        self._mark("the edit")
        self.report.problems += violations(self.database_url)
        self.report.problems += self._turns_completed()
        for conversation in conversations:
            self.report.problems += self._path(new_api.url, conversation)
        self._mark("the checks")

    def _step(self, name: str) -> None:
        """Wait until `turns` turns of each conversation submitted from now on have completed,
        then mark the step."""
        since = self._now()
        self._times[name] = since

        def completed() -> bool:
            row = self.db.execute(
                "SELECT count(*) FROM (SELECT conversation_id FROM turns WHERE status ="
                " 'completed' AND created_at > %s GROUP BY conversation_id HAVING count(*) >= %s)"
                " AS done",
                (since, self.plan.turns),
            ).fetchone()
            return row is not None and row[0] == self.plan.conversations

        self._wait(completed, f"{self.plan.turns} turns each submitted after {name!r} to complete")
        self._mark(name)

    def _mark(self, name: str) -> None:
        """The time since the last mark, and the turns completed so far, in the report."""
        done = self.db.execute("SELECT count(*) FROM turns WHERE status = 'completed'").fetchone()
        now = time.monotonic()
        self.report.steps.append((name, now - self._clock, done[0] if done else 0))
        self._clock = now

    def _edit(self, api: str, conversation: uuid.UUID, written: tuple[str, str]) -> None:
        """The new API edits, at rest, the last user message the previous release wrote on the
        migrated schema while only its processes ran (between the steps `written` names): its
        API (a submit at rest) or its worker (a queued message it took in) placed it."""
        found = self.db.execute(
            "SELECT t.id, t.message_seq FROM turns t JOIN messages m ON m.conversation_id ="
            " t.conversation_id AND m.seq = t.message_seq WHERE t.conversation_id = %s"
            " AND t.created_at > %s AND m.created_at < %s ORDER BY t.number DESC LIMIT 1",
            (conversation, self._times[written[0]], self._times[written[1]]),
        ).fetchone()
        if found is None:
            self.report.problems.append("no turn was submitted while only the previous ran")
            return
        self.edited = (conversation, found[0], int(found[1]))
        answer = httpx.post(
            f"{api}/v1/conversations/{conversation}/messages/{found[1]}/edit",
            json={"text": "an edit"},
            timeout=30,
        )
        if answer.status_code != 202:
            self.report.problems.append(f"the edit got {answer.status_code} {answer.text}")
            return
        self.edit_turn = uuid.UUID(answer.json()["turn"]["id"])
        self._wait(lambda: self._unfinished() == 0, "the edit's turn to finish")

    # --- the checks ---------------------------------------------------------------------------

    def _turns_completed(self) -> list[str]:
        """Every accepted turn (and the edit's) completed, and no other turn exists."""
        rows = dict(self.db.execute("SELECT id, status FROM turns").fetchall())
        accepted = {t for turns in self.report.accepted.values() for t, _ in turns}
        if self.edit_turn is not None:
            accepted.add(self.edit_turn)
        problems = [
            f"turn {t} is {rows.get(t, 'missing')}" for t in accepted if rows.get(t) != "completed"
        ]
        problems += [
            f"turn {t} ({status}) was never accepted"
            for t, status in rows.items()
            if t not in accepted
        ]
        return problems

    def _path(self, api: str, conversation: uuid.UUID) -> list[str]:
        """The path the new API shows: one path from the first message, each message below
        the one before, the users' messages in the order they were accepted."""
        messages = httpx.get(f"{api}/v1/conversations/{conversation}", timeout=30).json()[
            "messages"
        ]
        problems = []
        expected_parent = None
        for message in messages:
            if message["parent_seq"] != expected_parent:
                problems.append(
                    f"conversation {conversation}: the API shows message {message['seq']} below"
                    f" {message['parent_seq']}, not below {expected_parent}"
                )
                break
            expected_parent = message["seq"]
        texts = [m["content"] for m in messages if m["role"] == "user"]
        accepted = self.report.accepted[conversation]
        wanted = [text for _, text in accepted]
        if self.edited is not None and self.edited[0] == conversation:
            before = [turn for turn, _ in accepted].index(self.edited[1])
            wanted = [*wanted[:before], "an edit"]
        if texts != wanted:
            problems.append(
                f"conversation {conversation}: the user messages on its path are {texts},"
                f" not {wanted}"
            )
        return problems

    # --- helpers ------------------------------------------------------------------------------

    def _create(self, api: str) -> uuid.UUID:
        answer = httpx.post(f"{api}/v1/conversations", json={"tools": ["add"]}, timeout=30)
        answer.raise_for_status()
        return uuid.UUID(answer.json()["id"])

    def _keep(self, process: Any) -> Any:
        self.processes.append(process)
        return process

    def _now(self) -> Any:
        row = self.db.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        return row[0]

    def _unfinished(self) -> int:
        row = self.db.execute(
            "SELECT count(*) FROM turns WHERE status IN ('queued', 'running', 'requires_action')"
        ).fetchone()
        return row[0] if row else 0

    def _wait(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not done():
            if time.monotonic() > deadline:
                logs = "\n\n".join(f"--- {p.log_path.name}\n{p.log()}" for p in self.processes)
                raise AssertionError(
                    f"waited {STEP_TIMEOUT_S} s for {what}\n{self.report.table()}\n{logs}"
                )
            time.sleep(0.1)

    def close(self) -> None:
        if self.users is not None:
            self.users.stopping.set()
            self.users.join(timeout=30)
        for process in reversed(self.processes):
            process.stop()
        self.db.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument(
        "--turns", type=int, default=4, help="turns per conversation a step waits for"
    )
    parser.add_argument("--in-flight", type=int, default=2)
    options = parser.parse_args(argv)
    # this release's processes forked from a warm zygote, as under pytest (tests/conftest.py)
    os.environ.setdefault(ZYGOTE_ENV, "1")
    plan = Plan(options.conversations, options.turns, options.in_flight)
    postgres, redis = services.provide_postgres(), services.provide_redis()
    name = services.unique_name("upgrade")
    database_url = services.create_database(postgres.url, name)
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            FakeLLMServer() as llm,
            services.claimed_redis_db(redis.url) as redis_url,
        ):
            report = Upgrade(database_url, redis_url, llm, Path(tmp), plan).run()
    finally:
        services.drop_database(postgres.url, name)
    print(report.table())
    print("\n".join(report.problems) or "no problem found")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
