"""The fake LLM's scripts and state: which step answers a request, and what it was asked.

A script is a list of steps served in order (`sequence`) or by the number of assistant messages
since the last user message (`by_iteration`, so a re-sent transcript gets the same answer).
Both wire formats (OpenAI chat completions, Anthropic messages) share the scripts and the state.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from app.testing.fake_llm.caching import PromptCache
from app.testing.fake_llm.tokens import count_prompt

Step = dict[str, Any]
JSON = dict[str, Any]

SEQUENCE = "sequence"
BY_ITERATION = "by_iteration"
DEFAULT_STEP: Step = {"text": "ok"}
# What a provider answers when it is briefly unable to serve: OpenAI's overload is a 503,
# Anthropic's a 529.
TRANSIENT_STATUSES = (429, 503)
ANTHROPIC_TRANSIENT_STATUSES = (429, 529)


@dataclass
class Script:
    steps: list[Step]
    match: str | None = None
    mode: str = SEQUENCE
    default: Step | None = None
    transient_error_rate: float = 0.0
    seed: int | None = None
    context_window: int | None = None  # longer requests get the provider's overflow error
    model: str | None = None  # serves only requests for this model (the body's `model`)
    served: int = 0
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def transient_error(self, statuses: tuple[int, int] = TRANSIENT_STATUSES) -> Step | None:
        """An injected error step, a 429 or the other of `statuses` (the overload), for this
        request, or None (then the script's step answers)."""
        if self.transient_error_rate <= 0 or self.rng.random() >= self.transient_error_rate:
            return None
        status = self.rng.choice(statuses)
        if status == 429:
            message = "fake_llm chaos: rate limit exceeded, retry later"
            return {"error": 429, "retry_after": 0, "message": message, "chaos": True}
        return {
            "error": status,
            "message": "fake_llm chaos: the model is overloaded",
            "chaos": True,
        }

    def next_step(self, messages: list[Any]) -> tuple[Step | None, int]:
        """Return the step for this request and its index; None when the script is exhausted."""
        if self.mode == BY_ITERATION:
            index = assistant_turns_since_last_user(messages)
        else:
            index = self.served
            self.served += 1
        if index < len(self.steps):
            return self.steps[index], index
        return self.default, index


def assistant_turns_since_last_user(messages: list[Any]) -> int:
    """Assistant messages after the last message a person wrote, in either wire format."""
    count = 0
    for message in reversed(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user" and not is_tool_results(message):
            break
        if role == "assistant":
            count += 1
    return count


def is_tool_results(message: JSON) -> bool:
    """Whether a user message only carries tool results: Anthropic sends those as `role: user`
    with `tool_result` blocks, where OpenAI has `role: tool` messages, so it starts no turn."""
    content = message.get("content")
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


def messages_text(body: Any) -> str:
    """The text a script's `match` is looked for in: the JSON of `messages`, preceded by the JSON
    of the top-level `system` when there is one (Anthropic format puts the system prompt there,
    OpenAI format inside `messages`), so a match on the system prompt works in both."""
    if not isinstance(body, dict):
        return "[]"
    text = json.dumps(body.get("messages", []), ensure_ascii=False)
    if body.get("system") is not None:
        return json.dumps(body["system"], ensure_ascii=False) + "\n" + text
    return text


@dataclass
class ServerState:
    scripts: list[Script] = field(default_factory=list)
    requests: list[JSON] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    cache: PromptCache = field(default_factory=PromptCache)

    def __post_init__(self) -> None:
        self.arrived = threading.Condition(self.lock)  # notified by each request recorded

    def install(self, script: Script) -> None:
        with self.lock:
            for i, existing in enumerate(self.scripts):
                if (existing.match, existing.model) == (script.match, script.model):
                    self.scripts[i] = script
                    return
            self.scripts.append(script)

    def reset(self) -> None:
        with self.lock:
            self.scripts.clear()
            self.requests.clear()
        self.cache.reset()

    def choose_step(
        self, body: Any, transient_statuses: tuple[int, int] = TRANSIENT_STATUSES
    ) -> tuple[Step | None, str]:
        """Pick the step answering `body`; the string explains an exhausted script.
        `transient_statuses` are the chaos errors of the wire format `body` came in."""
        text = messages_text(body)
        messages = body.get("messages", []) if isinstance(body, dict) else []
        model = body.get("model") if isinstance(body, dict) else None
        with self.lock:
            script = self._script_for(text, model)
            if script is None:
                return DEFAULT_STEP, ""
            injected = script.transient_error(transient_statuses)
            if injected is not None:
                return injected, ""
            window = script.context_window
            step, index = script.next_step(messages if isinstance(messages, list) else [])
        if window is not None and step is not None:
            prompt = count_prompt(body)
            if prompt > window:
                return {"error": 400, "overflow": {"tokens": prompt, "window": window}}, ""
            step = {**step, "prompt_tokens": prompt}
        if step is None:
            return None, (
                f"fake_llm: script exhausted (match={script.match!r}, mode={script.mode}, "
                f"step index {index}, {len(script.steps)} steps, no default)"
            )
        return step, ""

    def _script_for(self, text: str, model: Any) -> Script | None:
        # (a script for the request's model first, then the others)
        scripts = sorted(
            (s for s in self.scripts if s.model is None or s.model == model),
            key=lambda s: s.model is None,
        )
        matching = [s for s in scripts if s.match is not None and s.match in text]
        if matching:
            return matching[0]
        fallbacks = [s for s in scripts if s.match is None]
        return fallbacks[0] if fallbacks else None

    def record(self, entry: JSON) -> None:
        with self.lock:
            self.requests.append(entry)
            self.arrived.notify_all()

    def recorded(self, match: str | None, wait: float = 0.0) -> list[JSON]:
        """The requests recorded (those whose messages hold `match`); with `wait`, waits up to
        that many seconds for the first (a benchmark's probe, without polling the server)."""
        deadline = time.monotonic() + wait
        while True:
            with self.lock:
                entries = list(self.requests)
            found = (
                entries
                if match is None
                else [e for e in entries if match in messages_text(e["body"])]
            )
            left = deadline - time.monotonic()
            if found or left <= 0:
                return found
            with self.lock:
                if len(self.requests) == len(entries):  # (none arrived since the look)
                    self.arrived.wait(left)


def parse_json_object(raw: bytes) -> JSON | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_script(payload: Any) -> Script:
    if not isinstance(payload, dict) or not isinstance(payload.get("steps"), list):
        raise ValueError(
            'a script is {"steps": [...], "match"?, "mode"?, "default"?, '
            '"transient_error_rate"?, "seed"?, "context_window"?, "model"?}'
        )
    mode = payload.get("mode") or SEQUENCE
    if mode not in (SEQUENCE, BY_ITERATION):
        raise ValueError(f"unknown mode {mode!r}")
    rate = payload.get("transient_error_rate") or 0.0
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise ValueError(f"transient_error_rate must be a number from 0 to 1, not {rate!r}")
    seed = payload.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"seed must be an integer, not {seed!r}")
    model = payload.get("model")
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be a string, not {model!r}")
    window = payload.get("context_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)):
        raise ValueError(f"context_window must be an integer, not {window!r}")
    return Script(
        steps=payload["steps"],
        match=payload.get("match"),
        mode=mode,
        default=payload.get("default"),
        transient_error_rate=float(rate),
        seed=seed,
        context_window=window,
        model=model,
    )
