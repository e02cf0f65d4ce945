"""The per-key request rate (GCRA) in this process: N at once, then one per period/N; each
caller its own; the headers a caller sees."""

from __future__ import annotations

import time

from app.api.rate import MemoryRateLimiter, caller_of_key


def test_a_burst_of_n_then_one_per_interval() -> None:
    limiter = MemoryRateLimiter("4/second")
    verdicts = [limiter.check("a") for _ in range(5)]
    assert [v.allowed for v in verdicts] == [True, True, True, True, False]
    assert [v.remaining for v in verdicts[:4]] == [3, 2, 1, 0]
    refused = verdicts[4]
    assert 0.2 < refused.retry_after <= 0.25
    assert refused.headers()["Retry-After"] == "1"  # whole seconds, at least one
    assert refused.headers()["RateLimit-Limit"] == "4"
    assert limiter.check("b").allowed  # another caller is not held back
    time.sleep(0.26)
    assert limiter.check("a").allowed  # one more after an interval
    assert not limiter.check("a").allowed


def test_a_key_s_identity_is_a_digest_not_the_key() -> None:
    identity = caller_of_key("cwk_secret")
    assert "cwk_secret" not in identity and identity.startswith("key:")
    assert identity == caller_of_key("cwk_secret") != caller_of_key("cwk_other")
