"""The per-key request rate (GCRA) in this process: N at once, then one per period/N; each
caller its own; the headers a caller sees."""

from __future__ import annotations

from app.api.rate import MemoryRateLimiter, caller_of_key


class Clock:
    """Microseconds that move only when the test says (a loaded machine cannot move them)."""

    def __init__(self) -> None:
        self.now_us = 1_000_000_000

    def __call__(self) -> int:
        return self.now_us


def test_a_burst_of_n_then_one_per_interval() -> None:
    clock = Clock()
    limiter = MemoryRateLimiter("4/second", clock_us=clock)
    verdicts = [limiter.check("a") for _ in range(5)]
    assert [v.allowed for v in verdicts] == [True, True, True, True, False]
    assert [v.remaining for v in verdicts[:4]] == [3, 2, 1, 0]
    refused = verdicts[4]
    assert refused.retry_after == 0.25
    assert refused.headers()["Retry-After"] == "1"  # whole seconds, at least one
    assert refused.headers()["RateLimit-Limit"] == "4"
    assert limiter.check("b").allowed  # another caller is not held back
    clock.now_us += 249_999
    assert not limiter.check("a").allowed  # not a moment before the interval
    clock.now_us += 1
    assert limiter.check("a").allowed  # one more after an interval
    assert not limiter.check("a").allowed


def test_a_key_s_identity_is_a_digest_not_the_key() -> None:
    identity = caller_of_key("cwk_secret")
    assert "cwk_secret" not in identity and identity.startswith("key:")
    assert identity == caller_of_key("cwk_secret") != caller_of_key("cwk_other")
