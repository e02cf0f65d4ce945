"""JSON read within a bound on what it builds: at most `MAX_VALUES` values (objects, arrays,
strings, numbers), refused (`TooComplex`) at the first value past it, before the rest is built.

Bytes bound a body's size, not its objects: 27 MB of `[{},{},...]` are 9.1 million dictionaries,
~700 MB of them. Every value but a container's first follows a comma, so a body's commas and
opening brackets bound its values from above (`values_at_most`): a body under the bound, nearly
every one, is read by the C parser at its speed; one over it (a text full of commas, or an attack)
by the standard library's Python scanner with every value counted, slower (run it off the event
loop). Nesting deeper than the interpreter recurses is `TooComplex` too. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import scanner
from typing import Any

#: More than a request needs (a chat's history with its tools' outputs, as useChat sends it), and
#: ~20 MB of objects at most (27 MB of empty objects would be ~700 MB), ~1 s of the Python scanner.
MAX_VALUES = 250_000


class TooComplex(Exception):
    """The JSON holds more values than the bound, or nests too deeply."""


def values_at_most(body: bytes) -> int:
    """An upper bound on the values of the JSON in `body` (in any of JSON's encodings: a byte
    that is not a comma or a bracket is never counted as one, one that is may be)."""
    return 1 + body.count(b",") + body.count(b"[") + body.count(b"{")


def parse(body: bytes, limit: int = MAX_VALUES) -> Any:
    """The JSON in `body`; `TooComplex` past `limit` values, `ValueError` if it is not JSON (or
    not in one of JSON's encodings)."""
    try:
        if values_at_most(body) <= limit:
            return json.loads(body)
        text = body.decode(json.detect_encoding(body), "surrogatepass")
        return _Counting(limit).decode(text)
    except RecursionError:
        raise TooComplex("the JSON nests too deeply") from None


class _Counting(json.JSONDecoder):
    """The standard decoder on its Python scanner, each value it makes counted first."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._left = limit
        self._limit = limit
        # (the Python scanner reads its parsers from the decoder when it is made)
        self.parse_object = self._counted(self.parse_object)  # type: ignore[has-type]
        self.parse_array = self._counted(self.parse_array)  # type: ignore[has-type]
        self.parse_string = self._counted(self.parse_string)  # type: ignore[has-type]
        self.parse_int = self._counted(self.parse_int)
        self.parse_float = self._counted(self.parse_float)
        self.parse_constant = self._counted(self.parse_constant)
        self.scan_once = scanner.py_make_scanner(self)  # type: ignore[attr-defined]

    def _counted(self, parse: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any) -> Any:
            self._left -= 1
            if self._left < 0:
                raise TooComplex(f"the JSON holds over {self._limit:,} values")
            return parse(*args)

        return counted


__all__ = ["MAX_VALUES", "TooComplex", "parse", "values_at_most"]
