"""The chat page (`app/api/page/`) in a real browser: Debian's Chromium driven by Playwright,
against `chatworker serve` in its embedded mode (SQLite, in-process worker) as a real process, with
the fake LLM as the model and the MCP test server's tools (`add`, and `slow` to cancel).

What a user sees must be what the API recorded: the words as they stream, each tool call and its
result, a cancelled turn, and, after a dropped connection and a reload mid-turn, the same
transcript as `GET /v1/conversations/{id}`, nothing missing and nothing twice.

A reply in Markdown is drawn as such (code, lists, tables, links), and what it holds that would
run (a script, an event handler, a `javascript:` link) or pose as the page (a form asking for a
key, a frame, a style of its own) never reaches the page.

`CHATWORKER_SCREENSHOT=1` saves the page mid-turn to docs/chat-page.png.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.testing.api_process import ApiProcess
from app.testing.fake_llm import FakeLLMServer
from app.testing.worker_process import FAKE_KEY, FAKE_MODEL
from tests.worker_process import REPO, mcp_servers_json

# One server and one browser for the module: its tests stay on one test process.
pytestmark = pytest.mark.xdist_group("browser")

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = REPO / "docs" / "chat-page.png"
WAIT_MS = 15_000  # one turn of the fake model, with room for a loaded machine

if not Path(CHROMIUM).exists():  # pragma: no cover (scripts/dev test installs it)
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"{CHROMIUM} is missing: scripts/dev test installs it")
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def harness(
    fake_llm_server: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ApiProcess, Any]]:
    """`chatworker serve` with nothing but the model and the tools configured: embedded mode (no
    DATABASE_URL, no REDIS_URL), the SQLite file in its own directory, auth `none`; and Chromium,
    launched while the server starts."""
    tmp = tmp_path_factory.mktemp("browser")
    env = {
        "CHATWORKER_API_AUTH": "none",
        "CHATWORKER_MODEL": FAKE_MODEL,
        "CHATWORKER_LLM_API_BASE": fake_llm_server.api_base,
        "CHATWORKER_LLM_API_KEY": FAKE_KEY,
        "CHATWORKER_MCP_SERVERS": mcp_servers_json(
            tmp / "ledger.jsonl", tmp / "notes.txt", extra_tools="erase_notes"
        ),
        "CHATWORKER_API_HEARTBEAT_SECONDS": "1",
        # (the fake model reads images: the page attaches one)
        "CHATWORKER_MODEL_FILE_KINDS": json.dumps({FAKE_MODEL: ["image"]}),
    }
    api = ApiProcess(env, tmp / "api.log", cwd=tmp)
    with ThreadPoolExecutor(1) as pool, sync_api.sync_playwright() as playwright:
        started = pool.submit(lambda: _wait_for_tools(api.start(), {"add", "slow"}))
        try:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
            )
            started.result()
            yield api, browser
            browser.close()
        finally:
            started.exception()  # the server started (or failed) before it is stopped
            api.stop()
    assert (tmp / "chatworker.db").exists(), "not the embedded mode"


def _wait_for_tools(api: ApiProcess, names: set[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tools = httpx.get(api.url + "/v1/tools", timeout=5).json()["data"]
        if names <= {tool["name"] for tool in tools}:
            return
        time.sleep(0.2)
    raise AssertionError(f"the worker never offered {names}:\n{api.log()}")


@pytest.fixture
def server(harness: tuple[ApiProcess, Any]) -> ApiProcess:
    return harness[0]


@pytest.fixture
def browser(harness: tuple[ApiProcess, Any]) -> Any:
    return harness[1]


@pytest.fixture
def page(browser: Any, server: ApiProcess) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(server.url + "/")
    expect(page.locator("#tools input[value=add]")).to_be_checked()
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def _send(page: Any, text: str) -> str:
    """Type a message and press Enter; the conversation's id (from the URL)."""
    box = page.locator("#message-input")
    box.fill(text)
    box.press("Enter")
    expect(page).to_have_url(re.compile(r"#c=[0-9a-f-]{36}$"), timeout=WAIT_MS)
    expect(box).to_have_value("", timeout=WAIT_MS)
    return str(page.url.rsplit("#c=", 1)[1])


def _transcript(server: ApiProcess, conversation_id: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{server.url}/v1/conversations/{conversation_id}", timeout=10)
    response.raise_for_status()
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def _assert_page_shows(page: Any, messages: list[dict[str, Any]]) -> None:
    """The page's committed messages are the API's, one element each, in order, same text."""
    shown = page.locator("#transcript [data-seq]")
    roles = {"user": "user", "assistant": "assistant", "tool": "tool-result"}
    assert shown.evaluate_all("els => els.map(e => [Number(e.dataset.seq), e.dataset.role])") == [
        [m["seq"], roles[m["role"]]] for m in messages
    ]
    for message in messages:
        element = page.locator(f"#transcript [data-seq='{message['seq']}']")
        if message["content"]:
            assert element.locator(".text, .tool-output").text_content() == message["content"]
        calls = element.locator("[data-role=tool-call]")
        expect(calls).to_have_count(len(message["tool_calls"]))
    expect(page.locator("#live > *")).to_have_count(0)


ANSWER = (
    "Two plus three is five: the add tool returned 5, so the sum of 2 and 3 is 5 and nothing else."
)


def test_a_turn_streams_its_words_and_shows_the_tool_call_and_its_result(
    page: Any, server: ApiProcess, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script(
        [
            {"tool_calls": [{"id": "call_add", "name": "add", "arguments": {"a": 2, "b": 3}}]},
            {"text": ANSWER, "stream": True, "chunks": 10, "chunk_delay": 0.3},
        ],
        match="What is 2 plus 3?",
        mode="by_iteration",
    )
    conversation_id = _send(page, "What is 2 plus 3?")

    expect(page.locator("#transcript [data-role=user] .text")).to_have_text("What is 2 plus 3?")
    call = page.locator("#transcript [data-role=tool-call]")
    expect(call).to_contain_text("add", timeout=WAIT_MS)
    expect(call).to_contain_text('{"a":2,"b":3}')
    expect(page.locator("#transcript [data-role=tool-result]")).to_contain_text("5")

    # The words arrive before the answer is committed: a partial reply, a prefix of the answer.
    partial = page.locator("#live [data-role=assistant][data-partial=true] .text")
    expect(partial).to_have_text(re.compile(r"(\S+ ){4}"), timeout=WAIT_MS)
    shown = partial.inner_text()
    assert ANSWER.startswith(shown) and len(shown) < len(ANSWER), shown
    expect(page.locator("#status")).to_have_text("Answering…")
    if os.environ.get("CHATWORKER_SCREENSHOT") == "1":
        page.screenshot(path=str(SCREENSHOT), animations="disabled")

    answer = page.locator("#transcript [data-role=assistant] > .text")
    expect(answer).to_have_text(ANSWER, timeout=WAIT_MS)
    expect(page.locator("#status")).to_have_text("Ready")
    expect(page.locator("#cancel")).to_be_disabled()
    _assert_page_shows(page, _transcript(server, conversation_id))
    expect(page.locator("#message-input")).to_be_focused()


def test_the_page_answers_a_question_approves_a_call_and_runs_a_browser_tool(
    page: Any, server: ApiProcess, fake_llm: FakeLLMServer
) -> None:
    ask = {"question": "Which report do you mean: Q2 or Q3?"}
    fake_llm.script(
        [
            {"tool_calls": [{"id": "ask", "name": "agent_clarify", "arguments": ask}]},
            {"tool_calls": [{"id": "erase", "name": "erase_notes", "arguments": {}}]},
            {"tool_calls": [{"id": "where", "name": "browser_locale", "arguments": {}}]},
            {"text": "Sent the Q3 report, erased the notes, and you are in your time zone."},
        ],
        match="Send me the report",
        mode="by_iteration",
    )
    conversation_id = _send(page, "Send me the report")

    # A question: shown as the assistant asking; the next message answers it.
    question = page.locator("#transcript [data-role=action][data-kind=clarification]")
    expect(question.locator(".question")).to_have_text(ask["question"], timeout=WAIT_MS)
    expect(page.locator("#status")).to_have_text("Waiting for your answer")
    box = page.locator("#message-input")
    box.fill("Q3")
    box.press("Enter")

    # An approval: the call runs only once approved.
    approval = page.locator("#transcript [data-role=action][data-kind=approval]")
    expect(approval).to_contain_text("erase_notes", timeout=WAIT_MS)
    approve = approval.get_by_role("button", name="Approve")
    approve.focus()
    page.keyboard.press("Enter")  # by keyboard
    expect(approval).to_contain_text("You approved it.", timeout=WAIT_MS)

    # A client tool: this browser runs it and posts its output; the turn then answers.
    ran = page.locator("#transcript [data-role=action][data-kind=client_tool]")
    expect(ran).to_contain_text("browser_locale", timeout=WAIT_MS)
    answer = page.locator("#transcript [data-role=assistant] > .text")
    expect(answer).to_have_text(
        "Sent the Q3 report, erased the notes, and you are in your time zone.", timeout=WAIT_MS
    )
    expect(page.locator("#status")).to_have_text("Ready")

    messages = _transcript(server, conversation_id)
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert results["ask"] == "Q3"
    assert results["erase"] == "All notes erased."
    assert '"timeZone"' in results["where"] and '"language"' in results["where"]
    _assert_page_shows(page, messages)
    # A reload draws what was asked and answered once, with nothing left to answer.
    page.reload()
    expect(answer).to_have_text(re.compile("Sent the Q3 report"), timeout=WAIT_MS)
    expect(page.locator("#transcript [data-role=action]")).to_have_count(3)
    expect(page.locator("#transcript [data-role=action] button")).to_have_count(0)


def test_a_message_waits_behind_a_slow_tool_that_cancel_stops(
    page: Any, server: ApiProcess, fake_llm: FakeLLMServer
) -> None:
    # The first script whose `match` occurs in the transcript answers: the second turn's
    # transcript holds both messages.
    fake_llm.script([{"text": "Then nothing more."}], match="And then?")
    fake_llm.script(
        [
            {"tool_calls": [{"id": "call_slow", "name": "slow", "arguments": {"seconds": 30}}]},
            {"text": "Finished the slow work."},
        ],
        match="Take your time",
        mode="by_iteration",
    )
    conversation_id = _send(page, "Take your time")
    expect(page.locator("#transcript [data-role=tool-call]")).to_contain_text(
        "slow", timeout=WAIT_MS
    )
    expect(page.locator("#status")).to_have_text("Running tools…")

    # Sent while the turn runs: queued behind it (the default), shown as waiting.
    _send(page, "And then?")
    waiting = page.locator("#live [data-role=waiting]")
    expect(waiting).to_contain_text("And then?")
    expect(page.locator("#status")).to_have_text("Running tools…")

    cancel = page.locator("#cancel")
    expect(cancel).to_be_enabled()
    started = time.monotonic()
    cancel.click()
    expect(page.locator("#message-input")).to_be_focused()  # the button is disabled now
    note = page.locator("#transcript [data-role=turn-note][data-event='turn.cancelled']")
    expect(note).to_have_text("Turn 1 was cancelled.", timeout=WAIT_MS)
    assert time.monotonic() - started < 15, "the 30 s tool was not stopped"

    # Then the queued message runs.
    answer = page.locator("#transcript [data-role=assistant] > .text")
    expect(answer).to_have_text("Then nothing more.", timeout=WAIT_MS)
    expect(waiting).to_have_count(0)
    expect(page.locator("#status")).to_have_text("Ready")
    expect(cancel).to_be_disabled()
    conversation = httpx.get(f"{server.url}/v1/conversations/{conversation_id}").json()
    assert conversation["status"] == "idle"
    _assert_page_shows(page, conversation["messages"])
    expect(page.locator("#transcript")).not_to_contain_text("Finished the slow work.")


STORY = " ".join(
    f"Tent {n} is {word}." for n, word in enumerate(["dry", "warm", "light", "green", "big"])
)


def test_a_dropped_connection_and_a_reload_mid_turn_miss_nothing_and_repeat_nothing(
    page: Any, server: ApiProcess, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script(
        [
            {"tool_calls": [{"id": "call_1", "name": "slow", "arguments": {"seconds": 1}}]},
            {"text": STORY, "stream": True, "chunks": 16, "chunk_delay": 0.35},
        ],
        match="Tell me about the tents",
        mode="by_iteration",
    )
    resumed_from: list[str] = []

    def on_request(request: Any) -> None:
        if "/stream" in request.url:
            resumed_from.append(request.headers.get("last-event-id", ""))

    page.on("request", on_request)
    conversation_id = _send(page, "Tell me about the tents")
    partial = page.locator("#live [data-partial=true] .text")
    expect(partial).to_have_text(re.compile(r"\S"), timeout=WAIT_MS)

    # The connection drops mid-reply: the page resumes after the last delta it showed.
    before = partial.inner_text()
    # (waited for as such: the text may change before the request's event reaches this side)
    with page.expect_request(lambda request: "/stream" in request.url, timeout=WAIT_MS) as again:
        page.evaluate("window.chatworker.dropConnection()")
    expect(page.locator("#live [data-partial=true] .text")).not_to_have_text(
        before, timeout=WAIT_MS
    )
    assert resumed_from[0] == "", resumed_from  # the first open: from the start
    cursor = again.value.headers.get("last-event-id", "")
    assert re.fullmatch(r"\d+:\d+:\w+:\d+", cursor), resumed_from
    grown = partial.inner_text()
    assert STORY.startswith(grown), grown  # a delta shown twice would break the prefix

    # A reload mid-turn: the URL reopens the conversation, replayed from the start.
    assert page.locator("#live [data-partial=true]").count() == 1, "the turn ended too soon"
    page.reload()
    expect(page.locator("#transcript [data-role=user] .text")).to_have_text(
        "Tell me about the tents"
    )
    for shown in partial.all_text_contents():  # the words so far, replayed (if still forming)
        assert STORY.startswith(shown), shown
    answer = page.locator("#transcript [data-role=assistant] > .text")
    expect(answer).to_have_text(STORY, timeout=WAIT_MS)
    expect(page.locator("#status")).to_have_text("Ready")
    messages = _transcript(server, conversation_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    _assert_page_shows(page, messages)

    # The list opens it again, as it was. Its links are kept when it is shown again (a refresh
    # replacing the link between a press and its release would lose the click).
    link = f"[data-testid=conversation-link][data-id='{conversation_id}']"
    page.evaluate(f"window.kept = document.querySelector(`{link}`)")
    page.locator("#new-conversation").click()
    expect(page.locator("#transcript > *")).to_have_count(0)
    assert page.evaluate(f"window.kept === document.querySelector(`{link}`)")
    page.locator(link).click()
    expect(page).to_have_url(re.compile(f"#c={conversation_id}$"))
    expect(answer).to_have_text(STORY, timeout=WAIT_MS)
    _assert_page_shows(page, messages)


MARKDOWN = """Here is the fix:

```python
print("<b>hi</b>")
```

- first
- second

| name | value |
|------|-------|
| a    | 1     |

See [the docs](https://example.com/docs).

<script>window.pwned = "script"</script>
<img src="data:," onerror="window.pwned = 'img'">
<a href="javascript:window.pwned = 'link'">a trap</a>

1. [x] a task, done

<form action="/v1/api-keys" method="post"><label>Your session expired: paste your API key
<input name="key" autofocus></label><textarea name="note"></textarea><select><option>a</option>
</select><button formaction="/v1/api-keys">Sign in again</button></form>
<iframe src="/"></iframe><style>#transcript { display: none }</style>
<p style="position: fixed; inset: 0">an overlay</p>"""


def test_a_reply_in_markdown_shows_its_code_list_table_and_link_and_runs_no_script(
    page: Any, server: ApiProcess, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script([{"text": MARKDOWN}], match="Show me Markdown")
    _send(page, "Show me Markdown")

    reply = page.locator("#transcript [data-role=assistant] > .text")
    code = reply.locator("pre > code")
    expect(code).to_have_text('print("<b>hi</b>")\n', timeout=WAIT_MS)  # as text, not a tag
    expect(reply.locator("ul > li")).to_have_text(["first", "second"])
    expect(reply.locator("table td")).to_have_text(["a", "1"])
    link = reply.locator("a[href='https://example.com/docs']")
    expect(link).to_have_text("the docs")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    expect(reply).to_contain_text("a trap")

    # What would run is gone from the page, and nothing ran.
    expect(page.locator("#transcript script")).to_have_count(0)
    expect(page.locator("#transcript [onerror]")).to_have_count(0)
    expect(page.locator("#transcript a[href^='javascript:']")).to_have_count(0)
    expect(code.locator("b")).to_have_count(0)
    assert page.evaluate("window.pwned") is None

    # A reply draws no control to fill in or press (a fake "paste your key" form), no frame, no
    # style of its own; its words stay as text. A task list's checkbox stays, disabled.
    for control in ("form", "textarea", "select", "button", "iframe", "style", "label"):
        expect(reply.locator(control)).to_have_count(0)
    expect(reply.locator("[style]")).to_have_count(0)
    expect(reply).to_contain_text("paste your API key")
    expect(reply).to_contain_text("an overlay")
    expect(reply.locator("input")).to_have_count(1)
    expect(reply.locator("li input[type=checkbox][disabled]")).to_have_count(1)


def test_a_refusal_shows_the_problem_detail(page: Any, server: ApiProcess) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    problem = httpx.get(f"{server.url}/v1/conversations/{missing}").json()
    assert problem["code"] == "conversation_not_found"
    page.goto(f"{server.url}/#c={missing}")
    expect(page.locator("#error-text")).to_have_text(problem["detail"], timeout=WAIT_MS)
    expect(page.locator("#error")).to_have_attribute("role", "alert")


def test_the_page_is_usable_on_a_phone_and_with_the_keyboard(
    browser: Any, server: ApiProcess
) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 780}, is_mobile=True)
    page = context.new_page()
    page.goto(server.url + "/")
    box = page.locator("#message-input")
    expect(box).to_be_focused()
    box.press_sequentially("line one")
    box.press("Shift+Enter")  # a new line, not a send
    box.press_sequentially("line two")
    expect(box).to_have_value("line one\nline two")
    assert "#c=" not in page.url

    expect(page.locator("#sidebar")).to_be_hidden()
    page.locator("#toggle-list").click()
    expect(page.locator("#sidebar")).to_be_visible()
    expect(page.locator("#toggle-list")).to_have_attribute("aria-expanded", "true")
    expect(page.locator("#new-conversation")).to_be_focused()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways ({width}px)"
    context.close()


def test_a_message_is_edited_an_answer_regenerated_and_the_versions_stepped_through(
    page: Any, server: ApiProcess, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script([{"text": "Red."}], match="Name a colour.")
    fake_llm.script([{"text": "Apple."}, {"text": "Pear."}], match="Name a fruit.")
    conversation_id = _send(page, "Name a colour.")
    answer = page.locator("#transcript [data-role=assistant] > .text")
    expect(answer).to_have_text("Red.", timeout=WAIT_MS)

    # edit the message in place: a new version, answered on its own path
    user = page.locator("#transcript [data-role=user]")
    user.locator("[data-action=edit]").click()
    user.locator("[data-role=edit-box]").fill("Name a fruit.")
    user.locator("[data-action=save-edit]").click()
    expect(answer).to_have_text("Apple.", timeout=WAIT_MS)
    expect(page.locator("#transcript [data-role=user] .text")).to_have_text("Name a fruit.")
    expect(user.locator("[data-role=version]")).to_have_text("2 / 2")
    expect(page.locator("#status")).to_have_text("Ready", timeout=WAIT_MS)

    # regenerate the answer: a second version of it
    page.locator("#transcript [data-role=assistant] [data-action=regenerate]").click()
    expect(answer).to_have_text("Pear.", timeout=WAIT_MS)
    assistant = page.locator("#transcript [data-role=assistant]")
    expect(assistant.locator("[data-role=version]")).to_have_text("2 / 2")
    expect(page.locator("#status")).to_have_text("Ready", timeout=WAIT_MS)
    assistant.locator("[data-action=previous-version]").click()
    expect(answer).to_have_text("Apple.", timeout=WAIT_MS)

    # back to the first version of the question, with its own answer
    expect(page.locator("#status")).to_have_text("Ready", timeout=WAIT_MS)
    user.locator("[data-action=previous-version]").click()
    expect(page.locator("#transcript [data-role=user] .text")).to_have_text(
        "Name a colour.", timeout=WAIT_MS
    )
    expect(answer).to_have_text("Red.")
    expect(user.locator("[data-role=version]")).to_have_text("1 / 2")
    expect(page.locator("#status")).to_have_text("Ready")
    path = _transcript(server, conversation_id)
    assert [m["content"] for m in path] == ["Name a colour.", "Red."]
    _assert_page_shows(page, path)

    page.reload()  # the same path after a reload: the server's, replayed
    expect(answer).to_have_text("Red.", timeout=WAIT_MS)
    expect(page.locator("#transcript [data-role=user] [data-role=version]")).to_have_text("1 / 2")
    _assert_page_shows(page, _transcript(server, conversation_id))
    user.locator("[data-action=next-version]").click()  # forward: to its newest message
    expect(answer).to_have_text("Pear.", timeout=WAIT_MS)


def test_an_image_attached_by_the_picker_and_one_dropped_are_sent_and_shown(
    page: Any, server: ApiProcess, fake_llm: FakeLLMServer
) -> None:
    from tests.integration.test_files import png

    picked, dropped = png(8, 8, seed=40), png(6, 6, seed=90)
    fake_llm.script([{"text": "Two grey squares."}], match="What are these squares?")
    page.set_input_files(
        "#attach-input", files=[{"name": "picked.png", "mimeType": "image/png", "buffer": picked}]
    )
    page.evaluate(
        """([name, bytes]) => {
            const data = new DataTransfer();
            data.items.add(new File([new Uint8Array(bytes)], name, {type: "image/png"}));
            const composer = document.querySelector("#composer");
            composer.dispatchEvent(new DragEvent("drop", {dataTransfer: data, bubbles: true}));
        }""",
        ["dropped.png", list(dropped)],
    )
    chips = page.locator("#attachments [data-role=attachment]")
    expect(chips).to_have_count(2)
    expect(chips.first).to_contain_text("picked.png")
    conversation_id = _send(page, "What are these squares?")

    expect(chips).to_have_count(0, timeout=WAIT_MS)  # sent: the list is empty again
    images = page.locator("#transcript [data-role=user] img[data-role=file]")
    expect(images).to_have_count(2, timeout=WAIT_MS)
    # each shown from its bytes, read with the page's credentials (a blob: URL), decoded
    page.wait_for_function(
        """() => [...document.querySelectorAll("#transcript img[data-role=file]")]
            .every(img => img.src.startsWith("blob:") && img.complete && img.naturalWidth > 0)""",
        timeout=WAIT_MS,
    )
    assert images.evaluate_all("els => els.map(e => e.naturalWidth)") == [8, 6]
    expect(page.locator("#transcript [data-role=assistant] > .text")).to_have_text(
        "Two grey squares.", timeout=WAIT_MS
    )
    (sent,) = fake_llm.requests(match="What are these squares?")
    parts = sent["body"]["messages"][-1]["content"]
    urls = [part["image_url"]["url"] for part in parts if part["type"] == "image_url"]
    assert urls == [
        "data:image/png;base64," + base64.b64encode(image).decode() for image in (picked, dropped)
    ]
    (message,) = [m for m in _transcript(server, conversation_id) if m["role"] == "user"]
    assert [f["name"] for f in message["files"]] == ["picked.png", "dropped.png"]
