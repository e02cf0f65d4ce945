"""A scriptable OpenAI- and Anthropic-compatible chat server, run as a real process on 127.0.0.1:
the real litellm HTTP path, offline. `FakeLLMServer` starts, scripts, inspects and stops it.

Routes: POST /v1/chat/completions (litellm `openai/...` with `api_base=server.api_base`) and
POST /v1/messages (litellm `anthropic/...` with `api_base=server.anthropic_base`). The same
scripts and steps drive both; each answer, stream and error is in the format of its route.
Beyond answers and HTTP errors, a step can fail a stream after N chunks (`stream_error`: the
provider's in-stream error event) or drop it (`stream_cut`): see `FakeLLMServer.script`.

Window and cache: a script's `context_window` refuses a longer prompt with the route's own 400
(`tokens.py` counts it with a real tokenizer), and a request marked for the prompt cache gets the
cached tokens each provider would report (`caching.py`); see `FakeLLMServer.script`.

Chaos option (for soaks): a script with `"transient_error_rate": 0.1` (and an optional `"seed"`)
answers that fraction of its requests with a transient error instead of its step: HTTP 429 with
`Retry-After: 0` or the route's overload status (503 for OpenAI, 529 for Anthropic), half each.
An injected error consumes no step (in sequence mode the next request gets the step this one
would have had) and is recorded like any request, with the error as its `step` and
`"chaos": true` in it, so `requests()` counts what was injected.
"""

from app.testing.fake_llm.control import FakeLLMServer, fake_llm_server
from app.testing.fake_llm.script import BY_ITERATION, SEQUENCE, Step

__all__ = ["BY_ITERATION", "SEQUENCE", "FakeLLMServer", "Step", "fake_llm_server"]
