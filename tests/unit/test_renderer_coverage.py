"""Every type a conversation's stream carries is rendered or passed over on purpose by each
renderer: our SSE, the Responses dialect, the AI SDK's UI message stream and the chat page's
transcript reducer. A new event type fails here until each renderer decides (its `HANDLED` or its
`SKIPPED`), instead of vanishing from one dialect unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.api import streaming
from app.api.aisdk import chunks
from app.api.responses import stream
from app.vocabulary import EVENT_TYPES, LIVE_TYPES, STREAM_END

STREAMED = frozenset((*EVENT_TYPES, *LIVE_TYPES))
TRANSCRIPT = Path(__file__).parents[2] / "app" / "api" / "page" / "transcript.js"


def page_set(name: str) -> frozenset[str]:
    """An `export const NAME = new Set([...])` of the page's transcript reducer."""
    found = re.search(rf"export const {name} = new Set\(\[(.*?)\]\);", TRANSCRIPT.read_text(), re.S)
    assert found is not None, f"transcript.js declares no {name}"
    return frozenset(re.findall(r'"([^"]+)"', found[1]))


def page_cases() -> frozenset[str]:
    """The types the reducer's code branches on: `case "...":` and `event.type === "..."`."""
    source = TRANSCRIPT.read_text()
    return frozenset(re.findall(r'case "([^"]+)":', source)) | frozenset(
        re.findall(r'event\.type === "([^"]+)"', source)
    )


RENDERERS = {
    "our SSE": (streaming.HANDLED, streaming.SKIPPED),
    "Responses": (stream.HANDLED, stream.SKIPPED),
    "AI SDK": (chunks.HANDLED, chunks.SKIPPED),
    "page": (page_set("HANDLED") - {STREAM_END}, page_set("SKIPPED")),
}


@pytest.mark.parametrize("renderer", RENDERERS)
def test_each_streamed_type_is_rendered_or_skipped_on_purpose(renderer: str) -> None:
    handled, skipped = RENDERERS[renderer]
    assert sorted(STREAMED - handled - skipped) == [], "neither rendered nor skipped"
    assert sorted(handled & skipped) == [], "both rendered and skipped"
    assert sorted((handled | skipped) - STREAMED) == [], "not a type of the vocabulary"


def test_the_page_declares_what_its_reducer_branches_on() -> None:
    assert page_cases() == page_set("HANDLED")
    assert not page_cases() & page_set("SKIPPED")
