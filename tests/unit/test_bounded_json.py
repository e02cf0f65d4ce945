"""JSON read within a bound on its values (`app/api/bounded_json.py`): every kind of value counts,
the bound is exact on both of its paths (the C parser under the cheap upper bound, the counting
Python scanner over it), text full of commas is never mistaken for values, and what is not JSON
stays a `ValueError`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.api.bounded_json import MAX_VALUES, TooComplex, parse, values_at_most

DOCUMENTS: list[Any] = [
    {},
    [],
    "",
    0,
    None,
    {"a": [1, 2.5, "x", None, True, False, {"b": [], "c": {}}]},
    [[[[]]], {"k": "v, [with] {brackets}, in text"}],
    {"text": "hi", "files": [{"name": "a.png", "data": "QUFB" * 100}]},
    ["é", "\u2028", "😀", -1e-7, 12345678901234567890],
]


def values(document: Any) -> int:
    """Its values as the bound counts them (true, false and null are shared: not counted)."""
    if document is None or isinstance(document, bool):
        return 0
    if isinstance(document, dict):
        return 1 + sum(values(value) for value in document.values())
    if isinstance(document, list):
        return 1 + sum(values(item) for item in document)
    return 1


@pytest.mark.parametrize("document", DOCUMENTS, ids=range(len(DOCUMENTS)))
def test_the_cheap_count_is_an_upper_bound_and_the_bound_is_exact(document: Any) -> None:
    for encoding in ("utf-8", "utf-16", "utf-32"):
        body = json.dumps(document, ensure_ascii=False).encode(encoding)
        count = values(document)
        assert values_at_most(body) >= count
        assert parse(body, limit=count) == document  # (the C parser when the bound allows it)
        if count > 0:
            with pytest.raises(TooComplex, match=f"over {count - 1:,} values"):
                parse(body, limit=count - 1)  # (the counting scanner: its bound is below the count)


@pytest.mark.parametrize(
    "body",
    [b"[{}, {}, {}]", b"[[], [], []]", b'["a", "b", "c"]', b"[1, 2, 3]", b"[1.5, 2.5, 3.5]",
     b"[NaN, Infinity, -Infinity]", b'{"a": {}, "b": {}, "c": {}}'],
)  # fmt: skip
def test_every_kind_of_value_counts(body: bytes) -> None:
    with pytest.raises(TooComplex):
        parse(body, limit=3)
    assert len(parse(body, limit=4)) == 3


def test_text_full_of_commas_and_brackets_is_read_whole_over_the_cheap_count() -> None:
    body = json.dumps({"text": "a,[{" * 100_000}).encode()
    assert values_at_most(body) > 300_000
    assert parse(body, limit=2)["text"] == "a,[{" * 100_000


def test_twenty_seven_megabytes_of_empty_objects_are_refused_at_the_bound() -> None:
    body = b"[" + b"{}," * 9_099_999 + b"{}]"
    with pytest.raises(TooComplex, match=f"over {MAX_VALUES:,} values"):
        parse(body)


def test_nesting_deeper_than_the_interpreter_recurses_is_refused() -> None:
    deep = b"[" * 100_000 + b'"' + b"," * 200_000 + b'"' + b"]" * 100_000
    assert values_at_most(deep) > MAX_VALUES  # the counting scanner
    with pytest.raises(TooComplex, match="nests too deeply"):
        parse(deep)
    with pytest.raises(TooComplex, match="nests too deeply"):
        parse(b"[" * 100_000 + b"]" * 100_000)  # the C parser


@pytest.mark.parametrize(
    ("body", "limit"),
    [(b'{"a": ', 1), (b'{"a": "\xff"}', 1), (b"", 0), (b"[1,]", 2), (b"\xef\xbb\xbf[", 1)],
)
def test_what_is_not_json_is_a_value_error_on_both_paths(body: bytes, limit: int) -> None:
    assert values_at_most(body) > limit  # (`limit`: the counting scanner, which fails first)
    for bound in (MAX_VALUES, limit):
        with pytest.raises(ValueError):
            parse(body, limit=bound)
