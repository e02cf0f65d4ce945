"""JSON Schema checks of what users and models send, each keyword bounded: `pattern`,
`patternProperties` and `additionalProperties` by RE2, `uniqueItems` by hashing, `format`.

Python's `re` backtracks (`^(a+)+$` doubles its work with each `a`) and `jsonschema`'s own
`uniqueItems` compares every pair of objects; here a pattern runs in RE2 (linear time, no
backtracking, `app/patterns.py`: a pattern it cannot run, such as a lookahead or a backreference,
is refused when the schema is given), unique items are found by hashing a canonical form, and a
`format` (`email`, `date-time`, `uri`, ...) is asserted by `FORMATS`, each on a capped string.
A check may also be given a deadline (`deadline(seconds)`): every keyword that applies
subschemas looks at the clock and `TooCostly` stops the check past it, so a schema whose `$ref`s
or combinators multiply the work cannot hold the thread longer. Pure computation; used by the
judge of structured answers (in the checker's process, `checker.py`) and the check of a tool
call's arguments (`arguments.py`).

    validator = safe_schema.validator_for({"type": "object", "properties": {...}})
    errors = validator.iter_errors(value)
"""

from __future__ import annotations

import datetime
import ipaddress
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterator, Mapping
from functools import lru_cache
from typing import Any

import re2  # type: ignore[import-untyped]  # (google-re2 ships no types)
from jsonschema import FormatChecker, ValidationError, validators
from jsonschema.protocols import Validator

from app.patterns import pattern_problem, regex

MAX_DEPTH = 64  # nesting levels of an answer, a call's arguments or a schema

# (jsonschema calls a keyword with its validator; `descend` is not in its protocol)
Keyword = Callable[[Any, Any, Any, Mapping[str, Any]], Iterator[ValidationError]]


class TooCostly(Exception):
    """A check ran past its deadline (`deadline`)."""


# --- the deadline -------------------------------------------------------------------------------

_clock = threading.local()


class deadline:  # noqa: N801 (used as a function: `with deadline(0.005): ...`)
    """Checks run in this block stop with `TooCostly` once `seconds` have passed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.before: float | None = None

    def __enter__(self) -> None:
        self.before = getattr(_clock, "until", None)
        _clock.until = time.monotonic() + self.seconds

    def __exit__(self, *exc_info: object) -> None:
        _clock.until = self.before


def _timed(keyword: Keyword) -> Keyword:
    def timed(
        validator: Any, value: Any, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        until = getattr(_clock, "until", None)
        if until is not None and time.monotonic() > until:
            raise TooCostly
        return keyword(validator, value, instance, schema)

    return timed


# --- the keywords -------------------------------------------------------------------------------


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and regex(pattern).search(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        compiled = regex(pattern)
        for key, value in instance.items():
            if compiled.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[str]:
    properties = schema.get("properties", {})
    patterns = [regex(pattern) for pattern in schema.get("patternProperties", {})]
    for key in instance:
        if key not in properties and not any(p.search(key) is not None for p in patterns):
            yield key


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = sorted(set(_additional(instance, schema)))
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        named = ", ".join(repr(extra) for extra in extras)
        if "patternProperties" in schema:
            patterns = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            verb = "does" if len(extras) == 1 else "do"
            yield ValidationError(f"{named} {verb} not match any of the regexes: {patterns}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({named} {verb} unexpected)"
            )


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Hashable] = set()
    for item in instance:
        key = canonical(item)
        if key in seen:
            yield ValidationError(f"{_short(instance)} has non-unique elements")
            return
        seen.add(key)


def canonical(value: Any) -> Hashable:
    """One hashable form per JSON value that JSON Schema calls equal (1 and 1.0 alike, key
    order ignored, true never 1)."""
    if isinstance(value, bool) or value is None:
        return (bool, value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str | int | float):
        return value
    if isinstance(value, Mapping):
        return (dict, frozenset((str(key), canonical(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return (list, tuple(canonical(item) for item in value))
    return (object, repr(value))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


# --- formats ------------------------------------------------------------------------------------

FORMATS = FormatChecker(formats=())
_DATE = re2.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_TIME = re2.compile(r"^(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")
_EMAIL = re2.compile(r"^[^\s@]{1,64}@[^\s@.][^\s@]{0,252}$")
_URI = re2.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[^\s<>\"{}|\\^`]*$")
_URI_REFERENCE = re2.compile(r"^[^\s<>\"{}|\\^`]*$")
_HOSTNAME = re2.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)
MAX_URI_CHARS = 8_192


@FORMATS.checks("date")
def _is_date(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    found = _DATE.match(instance) if len(instance) == 10 else None
    if found is None:
        return False
    try:
        datetime.date(int(found.group(1)), int(found.group(2)), int(found.group(3)))
    except ValueError:
        return False
    return True


@FORMATS.checks("time")
def _is_time(instance: object) -> bool:
    return not isinstance(instance, str) or _time_ok(instance)


def _time_ok(text: str) -> bool:
    found = _TIME.match(text) if len(text) <= 32 else None
    if found is None:
        return False
    hour, minute, second = int(found.group(1)), int(found.group(2)), int(found.group(3))
    zone = found.group(5)
    if zone not in ("Z", "z") and (int(zone[1:3]) > 23 or int(zone[4:6]) > 59):
        return False
    return hour <= 23 and minute <= 59 and second <= 60  # (60: a leap second)


@FORMATS.checks("date-time")
def _is_date_time(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    if len(instance) < 20 or instance[10] not in "Tt":
        return False
    return _is_date(instance[:10]) and _time_ok(instance[11:])


@FORMATS.checks("email")
@FORMATS.checks("idn-email")
def _is_email(instance: object) -> bool:
    return not isinstance(instance, str) or (
        len(instance) <= 254 and _EMAIL.match(instance) is not None
    )


@FORMATS.checks("uri")
def _is_uri(instance: object) -> bool:
    return not isinstance(instance, str) or (
        len(instance) <= MAX_URI_CHARS and _URI.match(instance) is not None
    )


@FORMATS.checks("uri-reference")
def _is_uri_reference(instance: object) -> bool:
    return not isinstance(instance, str) or (
        len(instance) <= MAX_URI_CHARS and _URI_REFERENCE.match(instance) is not None
    )


@FORMATS.checks("hostname")
def _is_hostname(instance: object) -> bool:
    return not isinstance(instance, str) or (
        len(instance) <= 253 and _HOSTNAME.match(instance) is not None
    )


@FORMATS.checks("uuid")
def _is_uuid(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    if len(instance) != 36 or instance[8] != "-":
        return False
    try:
        uuid.UUID(instance)
    except ValueError:
        return False
    return True


@FORMATS.checks("ipv4")
def _is_ipv4(instance: object) -> bool:
    return not isinstance(instance, str) or _parses(ipaddress.IPv4Address, instance)


@FORMATS.checks("ipv6")
def _is_ipv6(instance: object) -> bool:
    return not isinstance(instance, str) or _parses(ipaddress.IPv6Address, instance)


def _parses(kind: Callable[[str], object], text: str) -> bool:
    if len(text) > 45:
        return False
    try:
        kind(text)
    except ValueError:
        return False
    return True


@FORMATS.checks("regex")
def _is_regex(instance: object) -> bool:
    return not isinstance(instance, str) or pattern_problem(instance) is None


# --- the validator ------------------------------------------------------------------------------

APPLICATORS = frozenset(
    {
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "dependentSchemas",
        "dependencies",
        "properties",
        "patternProperties",
        "additionalProperties",
        "propertyNames",
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_BOUNDED: dict[str, Keyword] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
}


@lru_cache(maxsize=16)
def _safe(cls: type[Validator]) -> type[Validator]:
    keywords = {**cls.VALIDATORS, **{k: v for k, v in _BOUNDED.items() if k in cls.VALIDATORS}}
    # (the clock is read where work can multiply: where a keyword applies subschemas)
    timed = {name: _timed(k) if name in APPLICATORS else k for name, k in keywords.items()}
    safe: type[Validator] = validators.extend(cls, timed)  # type: ignore[no-untyped-call]
    return safe


def validator_for(schema: Mapping[str, Any], *, formats: bool = True) -> Validator:
    """A validator of `schema` (by the draft it names; 2020-12 when none) whose keywords are
    bounded; with `formats`, `format` is asserted (`FORMATS`), not only an annotation."""
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    validator: Validator = _safe(cls)(schema, format_checker=FORMATS if formats else None)
    return validator


def deeper_than(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` nests objects and arrays more than `limit` levels deep."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, dict | list)
        ]
        if not level:
            return False
    return True


__all__ = [
    "FORMATS",
    "MAX_DEPTH",
    "TooCostly",
    "canonical",
    "deadline",
    "deeper_than",
    "validator_for",
]
