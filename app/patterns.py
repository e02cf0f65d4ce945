"""Patterns users write (a JSON Schema's `pattern`, `patternProperties`, `format: regex`), run by
RE2: linear time in the text, never backtracking. Pure; both sides use it (the web side refuses a
pattern RE2 cannot run when the schema is given, the worker runs them).

RE2 takes ECMA 262's syntax (JSON Schema's) less lookarounds and backreferences; a repetition
over 1,000 (`a{4294967296}`) is refused (RE2 would read it as text); a pattern is at most
`MAX_PATTERN_CHARS` and compiles in at most `PATTERN_MEMORY` bytes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2  # type: ignore[import-untyped]  # (google-re2 ships no types)
from jsonschema import FormatChecker

MAX_PATTERN_CHARS = 1_000
MAX_REPEAT = 1_000  # RE2's own bound; past it RE2 would read `{n}` as plain text
PATTERN_MEMORY = 8 << 20  # (RE2's own default)
_REPEAT = re2.compile(r"\{(\d+)(?:,(\d*))?\}")


class PatternError(ValueError):
    """A pattern RE2 cannot run: its message says why."""


@lru_cache(maxsize=1024)
def regex(pattern: str) -> Any:
    """`pattern` compiled by RE2; `PatternError` when it cannot be."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"a pattern is at most {MAX_PATTERN_CHARS:,} characters")
    for found in _REPEAT.finditer(pattern):
        if any(int(count) > MAX_REPEAT for count in found.groups() if count):
            raise PatternError(f"a repetition {found.group(0)[:30]} is over {MAX_REPEAT:,}")
    options = re2.Options()
    options.max_mem = PATTERN_MEMORY
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        why = exc.args[0] if exc.args else b""
        text = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
        raise PatternError(text or "RE2 cannot run it") from None


def pattern_problem(pattern: object) -> str | None:
    """None when RE2 runs `pattern` (or it is no string: the schema's draft says what a pattern
    must be), else why not, in a sentence."""
    if not isinstance(pattern, str):
        return None
    try:
        regex(pattern)
    except PatternError as exc:
        return (
            f"the pattern {pattern[:100]!r} cannot be used ({exc}): patterns run in RE2, "
            "without lookarounds or backreferences"
        )
    return None


def schema_formats() -> FormatChecker:
    """The formats a schema itself is checked with (against its draft's metaschema): the
    library's, with `regex` meaning "RE2 runs it"."""
    checker = FormatChecker()
    checker.checks("regex", raises=PatternError)(_runs)
    return checker


def _runs(instance: object) -> bool:
    if isinstance(instance, str):
        regex(instance)
    return True


__all__ = ["MAX_PATTERN_CHARS", "PatternError", "pattern_problem", "regex", "schema_formats"]
