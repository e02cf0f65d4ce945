"""One logging setup for every process of the product: the CLI's commands, the worker's processes
(dramatiq's main, worker and fork processes) and the API's (uvicorn), in text (the default) or,
with `CHATWORKER_LOG_FORMAT=json`, one JSON object per line (`python-json-logger`).

Every line logged while a turn runs carries its ids: `conversation_id`, `turn_id` and
`worker_id` (the lease owner), from context variables the worker sets for the turn's task
(`turn_fields`); a filter on the handlers copies them onto each record. Nothing secret is
logged: model errors are redacted before anyone logs them (`llm.redact`), and the canary tests
(`tests/integration/test_secrets.py`) read the JSON lines too.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from pythonjsonlogger.json import JsonFormatter

TEXT, JSON = "text", "json"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The record's fields each JSON line holds, in this order (then the turn's ids, when set).
JSON_FIELDS = "{asctime}{levelname}{name}{message}{process}{threadName}"
RENAMED = {"asctime": "time", "levelname": "level", "name": "logger", "threadName": "thread"}
TURN_FIELDS = ("conversation_id", "turn_id", "worker_id")

_conversation: ContextVar[str | None] = ContextVar("chatworker_conversation_id", default=None)
_turn: ContextVar[str | None] = ContextVar("chatworker_turn_id", default=None)
_worker: ContextVar[str | None] = ContextVar("chatworker_worker_id", default=None)


class JsonLines(JsonFormatter):
    """A JSON object per record: time (ISO 8601, UTC), level, logger, message, process,
    thread, the turn's ids when it has them, and `exc_info` with the traceback of an error."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("fmt", JSON_FIELDS)
        kwargs.setdefault("style", "{")
        kwargs.setdefault("rename_fields", RENAMED)
        kwargs.setdefault("json_ensure_ascii", False)
        super().__init__(**kwargs)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in log_data.items() if value is not None}


class TurnFields(logging.Filter):
    """Copies the running turn's ids onto every record (None outside a turn)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.conversation_id = _conversation.get()
        record.turn_id = _turn.get()
        record.worker_id = _worker.get()
        return True


@contextmanager
def turn_fields(conversation_id: object, worker_id: str | None = None) -> Iterator[None]:
    """Within: every line this task (and the tasks it starts) logs names the conversation and
    the worker; `note_turn` adds the turn once a claim knows it."""
    tokens = (
        _conversation.set(str(conversation_id)),
        _worker.set(worker_id),
        _turn.set(None),
    )
    try:
        yield
    finally:
        _turn.reset(tokens[2])
        _worker.reset(tokens[1])
        _conversation.reset(tokens[0])


def note_turn(turn_id: object) -> None:
    """The turn this task now runs (inside `turn_fields`)."""
    _turn.set(None if turn_id is None else str(turn_id))


def formatter(log_format: str) -> logging.Formatter:
    return JsonLines() if log_format == JSON else logging.Formatter(TEXT_FORMAT)


def configure(log_format: str, level: int = logging.WARNING, *, stream: Any = None) -> None:
    """This process's logging: one handler on the root logger writing to `stream` (stderr),
    in `log_format`, with the turn's ids on each record."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(log_format))
    handler.addFilter(TurnFields())
    root.addHandler(handler)
    root.setLevel(level)


def adopt(log_format: str) -> None:
    """In a process whose logging someone else set up (dramatiq's worker processes log through a
    pipe to their main process): keep its handlers, in `log_format`, with the turn's ids."""
    root = logging.getLogger()
    for handler in root.handlers:
        if log_format == JSON:
            handler.setFormatter(JsonLines())
        if not any(isinstance(f, TurnFields) for f in handler.filters):
            handler.addFilter(TurnFields())


@contextmanager
def unified(*names: str) -> Iterator[None]:
    """Around the import of a library that gives its loggers handlers of their own (litellm):
    when the root writes JSON, they write through it instead, one format on every line (what
    they log while being imported, diagnostics of optional parts, is dropped)."""
    if not any(isinstance(h.formatter, JsonLines) for h in logging.getLogger().handlers):
        yield
        return
    loggers = [logging.getLogger(name) for name in names]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger in loggers:
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            logger.propagate = True
            logger.disabled = False


def uvicorn_options(log_format: str, level: str) -> dict[str, Any]:
    """uvicorn's logging in JSON (its own otherwise): passed to every process it starts."""
    if log_format != JSON:
        return {}
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "app.telemetry.logs.JsonLines"}},
        "filters": {"turn": {"()": "app.telemetry.logs.TurnFields"}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "filters": ["turn"],
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {
            "uvicorn": {"level": level.upper(), "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level.upper(), "handlers": [], "propagate": True},
            "uvicorn.access": {"level": level.upper(), "handlers": [], "propagate": True},
        },
    }
    return {"log_config": config}


__all__ = [
    "JSON",
    "TEXT",
    "JsonLines",
    "TurnFields",
    "adopt",
    "configure",
    "formatter",
    "note_turn",
    "turn_fields",
    "unified",
    "uvicorn_options",
]
