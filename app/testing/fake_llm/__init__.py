"""A scriptable OpenAI-compatible chat-completions server, run as a real process on 127.0.0.1:
the real litellm HTTP path, offline. `FakeLLMServer` starts, scripts, inspects and stops it.

Chaos option (for soaks): a script with `"transient_error_rate": 0.1` (and an optional `"seed"`)
answers that fraction of its requests with a transient error instead of its step: HTTP 429 with
`Retry-After: 0` or HTTP 503, half each. An injected error consumes no step (in sequence mode the
next request gets the step this one would have had) and is recorded like any request, with the
error as its `step` and `"chaos": true` in it, so `requests()` counts what was injected.
"""

from app.testing.fake_llm.control import FakeLLMServer, fake_llm_server
from app.testing.fake_llm.script import BY_ITERATION, SEQUENCE, Step

__all__ = ["BY_ITERATION", "SEQUENCE", "FakeLLMServer", "Step", "fake_llm_server"]
