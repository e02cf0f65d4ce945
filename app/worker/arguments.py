"""A tool call's arguments checked against the tool's `inputSchema` before it runs (JSON Schema,
by the `jsonschema` library: the draft the schema names, Draft 2020-12 when it names none).
The check is bounded (`safe_schema`: patterns in RE2, hashed `uniqueItems`), and runs on the
event loop for at most `CHECK_SECONDS`: past them the call's error result says so and the tool
never sees it (a client tool's schema is the user's, its arguments the model's).

A violation becomes the call's error result, naming the failing field, and the tool never sees
the call: the model reads what to fix. A schema that is itself invalid, or that cannot be used
here (a `$ref` to another document), checks nothing: the tool decides, as it did before; that is
logged once per tool. Pure computation, no I/O: the planner calls it (`offer.Toolbox.check`).

    check = ArgumentCheck({"add": {"type": "object", "required": ["a", "b"], ...}})
    check("add", {"a": 1})   # -> "Invalid arguments for add: 'b' is a required property. ..."
    check("add", {"a": 1, "b": 2})   # -> None
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jsonschema import validators
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator

from app.patterns import schema_formats
from app.worker.safe_schema import TooCostly, deadline, validator_for

SCHEMA_FORMATS = schema_formats()

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 300  # a violation's own message (it may quote a long value)
CHECK_SECONDS = 0.25  # what one call's check may take of the event loop
TOO_COSTLY = (
    "Invalid arguments for {tool}: they could not be checked against its input schema within "
    "{seconds:g} s. The tool was not run; call it again with smaller arguments."
)


class ArgumentCheck:
    """Checks arguments for the tools named in `schemas` (name -> inputSchema); a tool without
    a schema (or with an unusable one) is not checked."""

    def __init__(self, schemas: Mapping[str, Mapping[str, Any]]) -> None:
        self._validators = {
            name: validator
            for name, schema in schemas.items()
            if schema and (validator := _validator(name, _frozen(schema))) is not None
        }

    def __call__(self, tool: str, arguments: dict[str, Any]) -> str | None:
        """None when the arguments satisfy the tool's schema, else the error result to commit."""
        validator = self._validators.get(tool)
        if validator is None:
            return None
        try:
            with deadline(CHECK_SECONDS):
                error = best_match(validator.iter_errors(arguments))
        except TooCostly:
            return TOO_COSTLY.format(tool=tool, seconds=CHECK_SECONDS)
        except Exception as exc:  # a schema feature that fails at use (an unresolvable $ref)
            _warn_once(tool, f"its inputSchema could not be applied ({exc})")
            return None
        if error is None:
            return None
        where = ".".join(str(part) for part in error.absolute_path)
        message = error.message
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS] + "..."
        at = f" at `{where}`" if where else ""
        return (
            f"Invalid arguments for {tool}{at}: {message}. The tool was not run; call it again "
            "with arguments that match its input schema."
        )


def _frozen(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True)


@lru_cache(maxsize=1024)
def _validator(tool: str, schema_json: str) -> Validator | None:
    """One compiled validator per distinct schema (every turn builds an `ArgumentCheck`)."""
    schema = json.loads(schema_json)
    if not isinstance(schema, dict):
        _warn_once(tool, "its inputSchema is not an object")
        return None
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls(cls.META_SCHEMA, format_checker=SCHEMA_FORMATS).validate(schema)
    except Exception as exc:  # (a pattern RE2 cannot run too: `app/patterns.py`)
        _warn_once(tool, f"its inputSchema is not a valid JSON Schema ({_first_line(exc)})")
        return None
    return validator_for(schema, formats=False)


_warned: set[str] = set()


def _warn_once(tool: str, why: str) -> None:
    if tool not in _warned:
        _warned.add(tool)
        log.warning("tool %s: arguments are not checked: %s", tool, why)


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0][:200]


__all__ = ["ArgumentCheck"]
