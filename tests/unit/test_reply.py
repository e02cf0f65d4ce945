"""Putting a streamed reply together from litellm's provider chunks: OpenAI-shaped objects and
generic dicts, each fragment sent to the sink as it comes, the whole reply at the end."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from app.worker.plan import ToolCall
from app.worker.ports import ModelReply, Usage
from app.worker.reply import ReplyAssembler


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def text(self, fragment: str) -> None:
        self.sent.append(("text", fragment))

    def call(self, index: int, call_id: str | None, name: str | None, fragment: str) -> None:
        self.sent.append(("call", index, call_id, name, fragment))

    def restart(self, reason: str) -> None:  # pragma: no cover - not part of assembling
        self.sent.append(("restart", reason))


def chunk(
    content: str | None = None,
    calls: list[Any] | None = None,
    finish: str | None = None,
    usage: Any = None,
    role: str | None = None,
) -> Any:
    delta = SimpleNamespace(content=content, tool_calls=calls, role=role)
    choice = SimpleNamespace(delta=delta, finish_reason=finish)
    return SimpleNamespace(choices=[choice], usage=usage)


def call_delta(index: int, call_id: str | None, name: str | None, arguments: str) -> Any:
    function = SimpleNamespace(name=name, arguments=arguments)
    return SimpleNamespace(index=index, id=call_id, function=function)


def test_an_openai_shaped_stream_becomes_the_reply_it_streamed() -> None:
    sink = Sink()
    assembler = ReplyAssembler(sink)
    for piece in [
        chunk("", role="assistant"),
        chunk("Let me "),
        chunk("look."),
        chunk(calls=[call_delta(0, "c1", "search", "")]),
        chunk(calls=[call_delta(0, None, None, '{"q": ')]),
        chunk(calls=[call_delta(0, None, None, '"tents"}')]),
        chunk(finish="tool_calls"),
        SimpleNamespace(choices=[], usage=SimpleNamespace(prompt_tokens=11, completion_tokens=6)),
    ]:
        assembler.add(piece)
    assert assembler.reply() == ModelReply(
        "Let me look.", (ToolCall("c1", "search", '{"q": "tents"}'),), "tool_calls", Usage(11, 6)
    )
    assert sink.sent == [
        ("text", "Let me "),
        ("text", "look."),
        ("call", 0, "c1", "search", ""),
        ("call", 0, None, None, '{"q": '),
        ("call", 0, None, None, '"tents"}'),
    ]


def test_generic_chunks_of_a_custom_provider_become_the_same_reply() -> None:
    sink = Sink()
    assembler = ReplyAssembler(sink)
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    assembler.add({"text": "Adding.", "tool_use": None, "is_finished": False})
    assembler.add({"text": "", "tool_use": {**call, "index": 0}, "is_finished": False})
    usage = {"prompt_tokens": 8, "completion_tokens": 3}
    assembler.add({"text": "", "is_finished": True, "finish_reason": "tool_calls", "usage": usage})
    assert assembler.reply() == ModelReply(
        "Adding.", (ToolCall("c1", "add", "{}"),), "tool_calls", Usage(8, 3)
    )
    assert sink.sent == [("text", "Adding."), ("call", 0, "c1", "add", "{}")]


def test_a_route_s_closing_dict_does_not_overwrite_the_finish_reason_already_given() -> None:
    assembler = ReplyAssembler(Sink())
    assembler.add(chunk(calls=[call_delta(0, "c1", "add", "{}")]))
    assembler.add(chunk(finish="tool_calls"))
    assembler.add({"text": "", "is_finished": True, "finish_reason": "stop"})
    assert assembler.reply().finish_reason == "tool_calls"


def test_the_latest_usage_wins_anthropic_counts_the_input_first_the_output_last() -> None:
    assembler = ReplyAssembler(Sink())
    assembler.add(chunk("", usage=SimpleNamespace(prompt_tokens=18, completion_tokens=1)))
    assembler.add(chunk("Hi."))
    assembler.add(
        chunk(finish="stop", usage=SimpleNamespace(prompt_tokens=18, completion_tokens=6))
    )
    assert assembler.reply().usage == Usage(18, 6)


def test_a_stream_with_nothing_in_it_has_no_reply_at_all() -> None:
    assembler = ReplyAssembler(Sink())
    assembler.add(SimpleNamespace(choices=[], usage=None))
    assembler.add(chunk(finish="stop"))  # litellm makes up a closing chunk even then
    assert assembler.choices == 0


def test_an_empty_text_reply_is_a_reply_with_empty_content() -> None:
    assembler = ReplyAssembler(Sink())
    assembler.add(chunk("", role="assistant"))
    assembler.add(chunk(finish="stop"))
    assert assembler.choices == 1
    assert assembler.reply().content == ""
