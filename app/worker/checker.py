"""The checker: a worker's structured answers judged off its event loop, in a small pool of
child processes (`checker_process.py`), each check under a deadline and a memory cap.

The judge (`structured.judge`) runs a schema the user wrote against an answer the model wrote;
bounded as its keywords are (`safe_schema`), a schema can still multiply the work (`$ref`s
fanning out, nested combinators). So it never runs on the event loop that renews the leases: a
check goes to a child process (at most `PROCESSES` at once, each waiting check on one of the
checker's own threads), which is killed when the deadline passes
(`CHATWORKER_SCHEMA_CHECK_SECONDS`) and dies when it needs more memory than its cap
(`CHATWORKER_SCHEMA_CHECK_MEMORY_MB`); either way the answer is `Unjudged` and the turn fails
saying why, while every other turn of the worker goes on. The children start when first
needed, hold no secret (their environment is only what Python needs) and end with the worker.

An ordinary check costs its worker what it did in process: an answer of at most `INLINE_CHARS`
against a schema without `unevaluated*` keywords (the one place `jsonschema` runs a pattern in
Python's `re`) is judged on the event loop first, under a deadline of `INLINE_SECONDS`; past it,
the check starts over in a child (`bench --only schema` has the figures).

    checker = SchemaChecker(seconds=2.0, memory_mb=256)
    judged = await checker.judge(reply.content, schema)   # Matched | Mismatch | Unjudged
    judged = await checker.judged(reply, schema)   # the same, or None: nothing to judge
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

import app
from app.worker import safe_schema, structured
from app.worker.checker_process import HEADER, READY, read_message
from app.worker.ports import ModelReply
from app.worker.safe_schema import TooCostly
from app.worker.structured import (
    UNJUDGED_ERROR,
    Judgement,
    Matched,
    Mismatch,
    Unjudged,
    answer_text,
)
from app.worker.verdict import judged_against

log = logging.getLogger(__name__)

PROCESSES = 2  # checks at once per worker process; the next waits for one to end
INLINE_CHARS = 16_384  # an answer judged on the event loop first (each keyword's work is small)
INLINE_SECONDS = 0.005  # how long the event loop may spend on it
TIMEOUT = "the check took longer than {seconds:g} s (the schema makes it too costly)"
ENDED = "the checker's process ended during the check (over its {mb} MB of memory?)"
NOT_STARTED = "the checker's process could not start ({error})"
# How long a new process may take to start and import (not counted in a check's deadline).
START_SECONDS = 30.0
# The children's whole environment: nothing of the worker's (no key, no database URL).
KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT")
SOURCE = str(Path(app.__file__).resolve().parent.parent)  # where `app` is imported from


class SchemaChecker:
    """Judges answers in child processes, `seconds` and `memory_mb` at most each."""

    def __init__(self, seconds: float, memory_mb: int, processes: int = PROCESSES) -> None:
        self.seconds = seconds
        self.memory_mb = memory_mb
        self._idle: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(processes, thread_name_prefix="chatworker-checker")
        self._all: set[subprocess.Popen[bytes]] = set()
        weakref.finalize(self, _end, self._all, self._threads)

    async def judged(self, reply: ModelReply, schema: Mapping[str, Any] | None) -> Judgement | None:
        """What the reply's answer makes of the turn's `schema`; None when it need not be
        judged (`verdict.judged_against`: no schema, tool calls, a blank or blocked reply)."""
        against = judged_against(reply.content, reply.tool_calls, reply.finish_reason, schema)
        return None if against is None else await self.judge(reply.content, against)

    async def judge(self, content: str | None, schema: Mapping[str, Any]) -> Judgement:
        """`structured.judge(content, schema)`, run in a child process within the bounds."""
        key = structured.schema_key(schema)
        if len(content or "") <= INLINE_CHARS and _plain(key):
            try:
                with safe_schema.deadline(INLINE_SECONDS):
                    return structured.judge(content, schema, key)
            except TooCostly:
                pass  # (it needs longer: a child's time, not the event loop's)
        loop = asyncio.get_running_loop()
        request = {"answer": content or "", "schema": dict(schema)}
        answer = await loop.run_in_executor(self._threads, self._check, request)
        kind, error = answer.get("kind"), str(answer.get("error", ""))
        if kind == "matched":
            return Matched(json.loads(answer_text(content)))
        if kind == "mismatch":
            return Mismatch(error)
        return Unjudged(error)

    def pids(self) -> list[int]:
        """The process ids of the children alive now."""
        with self._lock:
            return [child.pid for child in self._all if child.poll() is None]

    def close(self) -> None:
        """End the children (the worker stops)."""
        _end(self._all, self._threads)

    def _check(self, request: dict[str, Any]) -> dict[str, Any]:
        """On one of the checker's threads: the child's answer, or an `unjudged` one."""
        try:
            child = self._take()
        except OSError as exc:
            return _unjudged(NOT_STARTED.format(error=exc))
        assert child.stdin is not None and child.stdout is not None
        body = json.dumps(request).encode()
        try:
            child.stdin.write(HEADER.pack(len(body)) + body)
            child.stdin.flush()
            ready, _, _ = select.select([child.stdout], [], [], self.seconds)
            answer = read_message(child.stdout) if ready else None
        except (OSError, ValueError):
            answer, ready = None, [child.stdout]
        if answer is None:
            self._discard(child)
            if not ready:
                log.warning("a schema check passed its %g s: its process was killed", self.seconds)
                return _unjudged(TIMEOUT.format(seconds=self.seconds))
            return _unjudged(ENDED.format(mb=self.memory_mb))
        if answer.get("kind") == "unjudged" or child.poll() is not None:
            self._discard(child)  # (one that ran out of memory ends after answering)
        else:
            with self._lock:
                self._idle.append(child)
        return dict(answer)

    def _take(self) -> subprocess.Popen[bytes]:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.poll() is None:
                    return child
                self._all.discard(child)
        started = time.monotonic()
        child = subprocess.Popen(
            [sys.executable, "-m", "app.worker.checker_process", str(self.memory_mb << 20)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_environment(),
            cwd=SOURCE,
        )
        with self._lock:
            self._all.add(child)
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], START_SECONDS)
        if not ready or read_message(child.stdout) != READY:
            self._discard(child)
            raise OSError(f"not ready within {START_SECONDS:g} s")
        log.info("started a schema checker process (%.0f ms)", (time.monotonic() - started) * 1e3)
        return child

    def _discard(self, child: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._all.discard(child)
        _kill(child)


@lru_cache(maxsize=256)
def _plain(schema_json: str) -> bool:
    """Whether the schema may be judged on the event loop first (see the module's docstring)."""
    return "unevaluated" not in schema_json


def _environment() -> dict[str, str]:
    kept = {name: os.environ[name] for name in KEPT_VARIABLES if name in os.environ}
    return {**kept, "PYTHONPATH": SOURCE, "PYTHONDONTWRITEBYTECODE": "1"}


def _unjudged(why: str) -> dict[str, Any]:
    return {"kind": "unjudged", "error": UNJUDGED_ERROR.format(why=why)}


def _kill(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.kill()
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a SIGKILLed child always ends
        log.warning("a schema checker process did not end")
    for stream in (child.stdin, child.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _end(children: set[subprocess.Popen[bytes]], threads: ThreadPoolExecutor) -> None:
    for child in list(children):
        _kill(child)
    children.clear()
    threads.shutdown(wait=False, cancel_futures=True)


__all__ = ["PROCESSES", "SchemaChecker"]
