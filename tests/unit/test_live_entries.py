"""The live channel's entries: their wire form and how a reply's fragments are coalesced."""

from __future__ import annotations

import pytest

from app.live.entries import (
    CALL,
    TEXT,
    CommitNotice,
    Delta,
    Discarded,
    Fragment,
    coalesce,
    decode,
    encode,
)


@pytest.mark.parametrize(
    "entry",
    [
        CommitNotice(12),
        Discarded(4, "ab12cd34", "HTTP 429 RateLimitError; retrying in 3 s"),
        Delta(
            4,
            "ab12cd34",
            7,
            (
                Fragment(TEXT, 0, 10, "héllo \n wörld"),
                Fragment(CALL, 1, 0, '{"a"', "call_1", "add"),
            ),
        ),
    ],
)
def test_every_entry_survives_its_wire_form(entry: object) -> None:
    fields = encode(entry)  # type: ignore[arg-type]
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())
    assert decode(fields) == entry


@pytest.mark.parametrize(
    "fields",
    [{}, {"k": "future-kind"}, {"k": "delta", "m": "x"}, {"k": "committed", "q": "not a number"}],
)
def test_an_entry_this_version_cannot_read_is_skipped_not_raised(fields: dict[str, str]) -> None:
    assert decode(fields) is None


def test_adjacent_fragments_of_one_part_are_joined_and_a_call_s_header_starts_a_new_one() -> None:
    fragments = [
        Fragment(TEXT, 0, 0, "Hel"),
        Fragment(TEXT, 0, 3, "lo"),
        Fragment(CALL, 0, 0, "", "c1", "add"),
        Fragment(CALL, 0, 0, '{"a":'),
        Fragment(CALL, 0, 5, " 1}"),
        Fragment(CALL, 1, 0, "", "c2", "search"),
        Fragment(TEXT, 0, 5, "!"),
    ]
    assert coalesce(fragments) == (
        Fragment(TEXT, 0, 0, "Hello"),
        Fragment(CALL, 0, 0, '{"a": 1}', "c1", "add"),
        Fragment(CALL, 1, 0, "", "c2", "search"),
        Fragment(TEXT, 0, 5, "!"),
    )


def test_a_delta_s_text_leaves_tool_call_arguments_out() -> None:
    delta = Delta(
        2,
        "s",
        0,
        (Fragment(TEXT, 0, 0, "a"), Fragment(CALL, 0, 0, "{}"), Fragment(TEXT, 0, 1, "b")),
    )
    assert delta.text == "ab"
