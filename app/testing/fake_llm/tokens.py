"""How many tokens a request to the fake LLM holds, counted the way a provider would come close
to: every text of the request (messages, system prompt, tool calls and results, the tool
definitions) through a real tokenizer (tiktoken's `o200k_base`, the files litellm ships, so no
network), plus a few tokens per message for its framing. Used when a script sets a
`context_window`: the fake then refuses a longer request with the provider's own error.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from functools import cache
from pathlib import Path
from typing import Any

PER_MESSAGE = 4  # role and separators, as OpenAI counts them
_lock = threading.Lock()


@cache
def encoding() -> Any:
    """o200k_base, from the files litellm ships."""
    spec = importlib.util.find_spec("litellm")
    if spec is not None and spec.origin is not None:
        bundled = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(bundled))
    import tiktoken

    return tiktoken.get_encoding("o200k_base")


def count_text(text: str) -> int:
    with _lock:
        found = encoding()
    return len(found.encode(text, disallowed_special=()))


def count_prompt(body: Any) -> int:
    """The request's prompt tokens: its texts through the tokenizer, plus each message's framing."""
    if not isinstance(body, dict):
        return 0
    messages = body.get("messages") or []
    texts: list[str] = []
    _texts(body.get("system"), texts)
    _texts(messages, texts)
    if body.get("tools"):
        texts.append(json.dumps(body["tools"]))
    framing = PER_MESSAGE * (len(messages) if isinstance(messages, list) else 0)
    return framing + sum(count_text(text) for text in texts)


_SKIPPED = frozenset({"role", "type", "id", "tool_call_id", "tool_use_id", "cache_control"})


def _texts(value: Any, into: list[str]) -> None:
    """Every string of a JSON value but the framing keys (roles, block types, ids)."""
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, list):
        for item in value:
            _texts(item, into)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in _SKIPPED:
                _texts(item, into)


__all__ = ["count_prompt", "count_text", "encoding"]
