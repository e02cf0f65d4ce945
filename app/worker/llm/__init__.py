"""The model adapter: the litellm client (`client`), the one LLM retry policy (`retry`) and the
readable, credential-free text of a failure (`error_text`). Importing it does not import litellm.
"""

from app.worker.llm.client import (
    NO_CHOICES_ERROR,
    LiteLLMClient,
    model_reply,
    prepare_litellm,
    price,
)
from app.worker.llm.error_text import failure_message, redact
from app.worker.llm.retry import (
    MAX_ATTEMPTS,
    call_with_retries,
    is_transient,
    retry_after,
    retry_cause,
)

__all__ = [
    "MAX_ATTEMPTS",
    "NO_CHOICES_ERROR",
    "LiteLLMClient",
    "call_with_retries",
    "failure_message",
    "is_transient",
    "model_reply",
    "prepare_litellm",
    "price",
    "redact",
    "retry_after",
    "retry_cause",
]
