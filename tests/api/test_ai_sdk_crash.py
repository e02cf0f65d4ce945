"""`/v1/ai-sdk/chat` through a worker SIGKILLed mid-reply, read by the AI SDK's own chat (Node, the
`ai` package): the turn goes on by itself; the page that watched the dead attempt has its partial
text part ended and marked discarded (the AI SDK cannot take text out of a message), and shows the
committed reply once; a page opened after the kill resumes the same turn into the same message."""

from __future__ import annotations

from tests.aisdk_driver import AiSdkChat, assistant, require_node, shown_text
from tests.api.conftest import Deployment
from tests.api.private_services import boot

ANSWER = (
    "Two and three make five; the add tool agrees, and so does every accountant who has "
    "ever balanced a ledger at the end of a long and quiet afternoon."
)


def discarded(message: dict[str, object]) -> list[dict[str, object]]:
    return [
        part
        for part in message["parts"]  # type: ignore[attr-defined]
        if part["type"] == "text"
        and (part.get("providerMetadata") or {}).get("chatworker", {}).get("discarded")
    ]


def test_a_worker_killed_mid_reply_leaves_no_text_twice_on_the_page(
    deployment: Deployment,
) -> None:
    require_node()
    deployment.fake_llm.script(
        [{"text": ANSWER, "stream": True, "chunks": 30, "chunk_delay": 0.1}], mode="by_iteration"
    )
    boot(deployment, workers=2)
    doomed, replacement = deployment.workers
    replacement.pause()  # frozen: the doomed worker must be the one answering
    key = deployment.key("erin")
    url = deployment.apis[0].url
    watching = AiSdkChat(url, key, "killed-mid-reply")
    reloaded = AiSdkChat(url, key, "killed-mid-reply")  # the same chat, in another tab
    try:
        sent = watching.send("send", text="tell me about sums", wait=False)
        deltas = 0
        while deltas < 4:
            watching.wait_for(lambda r: r["op"] == "chunk" and r["chunk"] != "[DONE]")
            deltas = sum(c != "[DONE]" and c["type"] == "text-delta" for c in watching.chunks())
        doomed.kill()
        replacement.resume()  # it claims the turn when the dead lease (3 s) expires
        resumed = reloaded.call("resume")
        done = watching.wait_for(lambda r: r["op"] == "done" and r["id"] == sent)

        assert done["status"] == "ready" and done["error"] is None  # every chunk was accepted
        live = assistant(done)
        (dead,) = discarded(live)
        assert ANSWER.startswith(str(dead["text"])) and dead["text"]
        assert shown_text(live) == ANSWER
        assert len(done["messages"]) == 2

        assert resumed["status"] == "ready" and resumed["error"] is None
        other = assistant(resumed)
        assert other["id"] == live["id"]
        assert shown_text(other) == ANSWER
        assert len(discarded(other)) <= 1  # it may have joined before the dead attempt's end
    finally:
        watching.close()
        reloaded.close()
