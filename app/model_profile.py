"""What both sides know of a model, and each provider's quirks, in one place: which kinds of file a
model takes, and how a request's stable prefix is marked for its provider's prompt cache. A new
provider quirk goes here. Pure but for one read of litellm's model map, as data.

The map is litellm's bundled `model_prices_and_context_window_backup.json`, found beside the
package without importing it (the web side never imports litellm: `tests/boundaries.py`), read
once per process on the first question; only the flags used are kept. What litellm itself works
out from a model string (its provider, its window, whether it takes a response schema) the worker
asks litellm (`app/worker/llm/`): the map alone answers otherwise for one model name in twenty.

A model the map does not know takes no image and no PDF: say so with
`CHATWORKER_MODEL_FILE_KINDS` (`{"openai/my-vision-model": ["image"]}`), which is asked first.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import Any

FEATURES = {"image": "supports_vision", "pdf": "supports_pdf_input"}
MAP_FILE = "model_prices_and_context_window_backup.json"
# Anthropic caches a prompt's prefix up to a marked block (and finds earlier marks up to 20
# blocks back): one mark after the tools and system prompt, one on the newest message.
ANTHROPIC_MARKS = [{"location": "message", "role": "system"}, {"location": "message", "index": -1}]
CLAUDE_HOSTS = ("bedrock", "vertex_ai", "vertex_ai_beta")  # providers that also serve Claude

NONE_DECLARED: Mapping[str, Sequence[str]] = MappingProxyType({})


def takes(model: str, kind: str, declared: Mapping[str, Sequence[str]] = NONE_DECLARED) -> bool:
    """Whether `model` takes files of `kind` (`image`, `pdf`): as `declared` (the operator's
    `CHATWORKER_MODEL_FILE_KINDS`) says, else as the map says."""
    if model in declared:
        return kind in declared[model]
    return FEATURES[kind] in _flags(model)


def cache_marks(provider: str, model: str, key: str) -> dict[str, Any]:
    """How to mark a request's stable prefix for the model's `provider` (litellm's name of it):
    OpenAI's `prompt_cache_key` (requests of one key land on the same cache), Anthropic's
    `cache_control` breakpoints (through litellm's injection points); nothing for the rest,
    which cache on their own or not at all (a parameter they do not take would be refused)."""
    if provider in ("openai", "azure"):
        return {"prompt_cache_key": key}
    if provider == "anthropic" or (provider in CLAUDE_HOSTS and "claude" in model):
        return {"cache_control_injection_points": ANTHROPIC_MARKS}
    return {}


@lru_cache(maxsize=512)
def _flags(model: str) -> frozenset[str]:
    table = _table()
    found = table.get(model)
    if found is None and "/" in model:
        provider, bare = model.split("/", 1)
        entry = table.get(bare)
        if entry is not None and entry[0] in (provider, f"{provider}_chat"):
            found = entry
    return frozenset() if found is None else found[1]


@lru_cache(maxsize=1)
def _table() -> dict[str, tuple[str, frozenset[str]]]:
    """model -> (its provider, the file features it has)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = os.path.join(next(iter(spec.submodule_search_locations)), MAP_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
    except (OSError, ValueError):
        return {}
    return {
        name: (
            str(info.get("litellm_provider", "")),
            frozenset(flag for flag in FEATURES.values() if info.get(flag)),
        )
        for name, info in raw.items()
        if isinstance(info, dict)
    }


__all__ = ["ANTHROPIC_MARKS", "FEATURES", "cache_marks", "takes"]
