"""The context section: what the model is sent once a conversation grows toward its window.

The transcript the user sees never changes; what changes is the request (`app/worker/context.py`).
A conversation's `context_policy` overrides any of these for itself.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from app.config.section import Section


class ContextSettings(Section):
    """The context budget, compaction and prompt caching."""

    title: ClassVar[str] = "Context"

    context_window: int | None = Field(
        None,
        ge=256,
        description="input window in tokens of models litellm's model map does not know (a "
        "local or gateway model); unset: such a model's window is learnt from its first "
        "overflow error. A conversation's `context_policy.window` wins over both",
    )
    context_threshold: float = Field(
        0.8,
        gt=0.1,
        le=1.0,
        description="share of the window a request may fill before the turn compacts what it "
        "sends (earlier turns' tool outputs by reference, then a summary of the oldest messages)",
    )
    context_reply_tokens: int = Field(
        4096,
        ge=16,
        description="room kept in the window for the model's reply (at most a quarter of the "
        "window)",
    )
    compaction: bool = Field(
        True,
        description="compact a request that would not fit (and retry once on the provider's "
        "own overflow error); `false`: such a turn fails with an error naming this setting",
    )
    compaction_model: str | None = Field(
        None,
        description="litellm model string that writes the summaries (unset: the conversation's "
        "own model)",
    )
    prompt_cache: bool = Field(
        True,
        description="mark the stable prefix of each request for the provider's prompt cache "
        "(Anthropic `cache_control` breakpoints, OpenAI `prompt_cache_key` = the conversation)",
    )
