"""The session tool cache's text (`app.worker.session_cache`) and the planner's view of the
worker's own tools."""

from __future__ import annotations

import json

from app.worker import offer, plan, session_cache
from app.worker.plan import ToolCall
from app.worker.steps import RunOwnTool
from app.worker.store import ListedOutput, OutputPage


def test_an_output_that_fits_is_left_whole() -> None:
    assert session_cache.compact("c1", "x" * 100, 100) == "x" * 100
    assert session_cache.truncate("x" * 100, 100) == "x" * 100


def test_a_longer_output_keeps_its_start_and_says_how_to_read_on() -> None:
    compact = session_cache.compact("c1", "x" * 101, 100)
    assert compact == (
        "x" * 100 + "\n[... 100 of 101 characters shown. The whole output is kept: call "
        'session_cache_get with {"id": "c1", "offset": 100} to read on.]'
    )


def test_an_id_with_quotes_stays_valid_json_in_the_marker() -> None:
    compact = session_cache.compact('c"1', "x" * 20, 10)
    shown = compact[compact.index("{") : compact.index("}") + 1]
    assert json.loads(shown) == {"id": 'c"1', "offset": 10}


def test_a_page_is_capped_at_what_one_result_may_hold() -> None:
    assert session_cache.page_request({"id": "c1"}, 500) == ("c1", 0, 500)
    assert session_cache.page_request({"id": "c1", "offset": 7, "limit": 9}, 500) == ("c1", 7, 9)


def test_an_empty_output_reads_as_empty_not_as_past_its_end() -> None:
    found = OutputPage("c1", "t", 0, False, 0, "")
    result = session_cache.page(session_cache.PageRequest("c1", 0, 10), found)
    assert not result.is_error and result.content.endswith("\n\n[end of output]")


def test_a_failed_call_s_output_says_so() -> None:
    found = OutputPage("c1", "t", 4, True, 0, "boom")
    result = session_cache.page(session_cache.PageRequest("c1", 0, 10), found)
    assert "(the call failed)" in result.content and not result.is_error


def test_long_arguments_are_cut_in_the_list() -> None:
    listed = [ListedOutput("c1", "search", {"q": "y" * 500}, 10, False, 1)]
    (entry,) = json.loads(session_cache.listing(listed, 1).content)["outputs"]
    assert entry["arguments"].endswith("...") and len(entry["arguments"]) == 203


def test_the_worker_s_own_tools_are_offered_and_run_without_being_allowed() -> None:
    tools = offer.toolbox(["add"], ["add"], own=["session_cache_get"])
    assert tools.offered == {"add", "session_cache_get"}
    call = ToolCall("c1", "session_cache_get", '{"id": "c0"}')
    assert plan.next_step(
        [plan.Entry(1, "user", "hi"), plan.Entry(2, "assistant", None, (call,))],
        1,
        20,
        tools=tools,
    ) == RunOwnTool(call, {"id": "c0"})
