"""The closed vocabularies (`app.vocabulary`) are spelt once: every word's constant belongs to
its set, each policy is said and labelled, and the chat page offers exactly the set."""

from __future__ import annotations

import re
from typing import get_args

from app import vocabulary
from app.api.chat_page import PAGE_BUSY_DEFAULT, page_html


def test_every_word_belongs_to_a_set_of_the_vocabulary() -> None:
    sets = [value for value in vars(vocabulary).values() if isinstance(value, tuple)]
    words = {
        name: value
        for name, value in vars(vocabulary).items()
        if name.isupper() and isinstance(value, str)
    }
    strays = {name for name, word in words.items() if not any(word in set_ for set_ in sets)}
    assert strays <= {"STREAM_END"}  # our SSE's last word: no set but its own


def test_the_sets_are_their_literals() -> None:
    assert get_args(vocabulary.BusyPolicy) == vocabulary.BUSY_POLICIES
    assert set(vocabulary.BRANCH_BUSY_POLICIES) == set(vocabulary.BUSY_POLICIES) - {"steer"}
    assert set(vocabulary.RUNNING_STATUSES) < set(vocabulary.STATUSES)
    assert set(vocabulary.FINISHED_TURN_STATUSES) < set(vocabulary.TURN_STATUSES)
    assert set(vocabulary.TERMINAL_EVENTS) < set(vocabulary.EVENT_TYPES)
    assert set(vocabulary.NOTICE_EVENTS) < set(vocabulary.EVENT_TYPES)
    assert not set(vocabulary.NOTICE_EVENTS) & set(vocabulary.TERMINAL_EVENTS)
    assert not set(vocabulary.LIVE_TYPES) & set(vocabulary.EVENT_TYPES)


def test_each_busy_policy_is_said_and_labelled() -> None:
    assert tuple(vocabulary.BUSY_POLICY_MEANINGS) == vocabulary.BUSY_POLICIES
    assert tuple(vocabulary.BUSY_POLICY_LABELS) == vocabulary.BUSY_POLICIES
    said = vocabulary.busy_policies_said()
    assert all(meaning in said for meaning in vocabulary.BUSY_POLICY_MEANINGS.values())


def test_the_chat_page_offers_every_busy_policy_its_default_selected() -> None:
    select = re.search(r'<select id="on-busy" name="on_busy">(.*?)</select>', page_html(), re.S)
    assert select is not None
    offered = re.findall(r'<option value="([a-z]+)"( selected)?>', select[1])
    assert sorted(value for value, _ in offered) == sorted(vocabulary.BUSY_POLICIES)
    assert [value for value, selected in offered if selected] == [PAGE_BUSY_DEFAULT]
