"""Which kinds of file a model takes, from litellm's model map read as data: its bundled
`model_prices_and_context_window_backup.json`, found beside the package without importing it
(the web side never imports litellm: `tests/boundaries.py`). Read once per process, on the first
message with a file; only the flags kept.

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

FEATURES = {"image": "supports_vision", "pdf": "supports_pdf_input"}
MAP_FILE = "model_prices_and_context_window_backup.json"

NONE_DECLARED: Mapping[str, Sequence[str]] = MappingProxyType({})


def takes(model: str, kind: str, declared: Mapping[str, Sequence[str]] = NONE_DECLARED) -> bool:
    """Whether `model` takes files of `kind` (`image`, `pdf`): as `declared` (the operator's
    `CHATWORKER_MODEL_FILE_KINDS`) says, else as the map says."""
    if model in declared:
        return kind in declared[model]
    return FEATURES[kind] in _flags(model)


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


__all__ = ["FEATURES", "takes"]
