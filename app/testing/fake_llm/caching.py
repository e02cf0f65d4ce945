"""The fake LLM's prompt cache, accounted the way each provider does (no speed-up is faked, only
the usage): what share of a request's prompt it read from the cache and wrote to it, measured in
real-tokenizer tokens of the request's serialised prefix (the server scales the shares to the
prompt's own count).

- OpenAI (`prompt_cache_key`): requests of one key share a cache; a request reads the longest
  prefix it has in common with the one before it of that key, in blocks of 128 tokens, from
  1,024 tokens on. `usage.prompt_tokens_details.cached_tokens`; `prompt_tokens` counts all.
- Anthropic (`cache_control` on a block): a request writes the prefix up to each marked block
  (from 1,024 tokens on) and reads the longest one already written that ends at a marked block
  or at any of the 20 blocks before one. `cache_read_input_tokens`,
  `cache_creation_input_tokens`, and `input_tokens` the rest.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from app.testing.fake_llm.tokens import count_text

MINIMUM = 1_024
OPENAI_BLOCK = 128
LOOKBACK = 20


class PromptCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, list[int]] = {}  # OpenAI: the previous prompt of each key
        self._written: set[str] = set()  # Anthropic: the prefixes written (their hashes)

    def reset(self) -> None:
        with self._lock:
            self._last.clear()
            self._written.clear()

    def openai(self, body: dict[str, Any], prompt: int) -> int:
        """The tokens of this request (of `prompt`) read from the cache of its key."""
        key = body.get("prompt_cache_key")
        if not isinstance(key, str):
            return 0
        tokens = _encode(json.dumps([body.get("tools"), body.get("messages")], sort_keys=True))
        with self._lock:
            before = self._last.get(key)
            self._last[key] = tokens
        if before is None:
            return 0
        common = 0
        for old, new in zip(before, tokens, strict=False):
            if old != new:
                break
            common += 1
        read = int(prompt * common / max(1, len(tokens)))
        return read // OPENAI_BLOCK * OPENAI_BLOCK if read >= MINIMUM else 0

    def anthropic(self, body: dict[str, Any], prompt: int) -> tuple[int, int]:
        """(read, written): the tokens of this request (of `prompt`) read from the cache and
        written to it."""
        blocks = _blocks(body)
        marked = [i for i, (_, mark) in enumerate(blocks) if mark]
        if not marked:
            return 0, 0
        totals, hashes, total, digest = [], [], 0, hashlib.sha256()
        for text, _ in blocks:
            total += count_text(text)
            digest.update(text.encode())
            totals.append(total)
            hashes.append(digest.copy().hexdigest())
        with self._lock:
            read = 0
            for mark in marked:
                for index in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                    if hashes[index] in self._written:
                        read = max(read, totals[index])
                        break
            for mark in marked:
                if totals[mark] >= MINIMUM:
                    self._written.add(hashes[mark])
        scale = prompt / max(1, totals[-1])
        read, last = int(read * scale), int(totals[marked[-1]] * scale)
        if read < MINIMUM:
            read = 0
        written = last - read if last >= MINIMUM else 0
        return read, max(0, written)


def _encode(text: str) -> list[int]:
    from app.testing.fake_llm.tokens import encoding

    return list(encoding().encode(text, disallowed_special=()))


def _blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The request's blocks in the order Anthropic caches them (tools, system, messages), each
    as its JSON text and whether it carries a `cache_control` mark."""
    blocks: list[tuple[str, bool]] = []
    for tool in body.get("tools") or []:
        blocks.append((json.dumps(tool, sort_keys=True), "cache_control" in tool))
    system = body.get("system")
    if isinstance(system, str):
        blocks.append((system, False))
    for block in system if isinstance(system, list) else []:
        blocks.append((_text(block), "cache_control" in block))
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            blocks.append((f"{message.get('role')}:{content}", False))
            continue
        for block in content or []:
            blocks.append((f"{message.get('role')}:{_text(block)}", "cache_control" in block))
    return blocks


def _text(block: Any) -> str:
    if not isinstance(block, dict):
        return json.dumps(block)
    return json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True)


__all__ = ["PromptCache"]
