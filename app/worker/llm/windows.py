"""The input window of a model, in tokens: litellm's bundled model map (no network), or what a
provider's overflow error stated for it in this process (`learn`); None when neither knows."""

from __future__ import annotations

import threading

_known: dict[str, int | None] = {}
_learnt: dict[str, int] = {}
_lock = threading.Lock()


def model_window(model: str) -> int | None:
    """The model's input window: learnt from its own overflow error, else litellm's map."""
    with _lock:
        if model in _learnt:
            return _learnt[model]
        if model in _known:
            return _known[model]
    found = _from_map(model)
    with _lock:
        _known[model] = found
    return found


def learn(model: str, window: int) -> None:
    """The provider said the model's window is `window` tokens (in an overflow error)."""
    with _lock:
        _learnt[model] = window


def _from_map(model: str) -> int | None:
    from app.worker.llm.client import prepare_litellm  # (it imports this module)

    prepare_litellm()
    import litellm

    try:
        info = litellm.get_model_info(model)
    except Exception:  # litellm: "This model isn't mapped yet" (a local or gateway model)
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if window else None


__all__ = ["learn", "model_window"]
