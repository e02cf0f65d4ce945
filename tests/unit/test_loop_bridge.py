"""`app/worker/loop_bridge.py`: plain functions run on the event loop, each `await_` in them
awaited there; their results, exceptions and cancels pass through unchanged."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.worker import loop_bridge


async def doubled(value: int) -> int:
    await asyncio.sleep(0)
    return value * 2


def twice(value: int) -> int:
    assert loop_bridge.on_loop()
    return loop_bridge.await_(doubled(value)) + loop_bridge.await_(doubled(1))


def test_a_function_s_awaits_run_on_the_loop_s_thread_and_its_result_comes_back() -> None:
    threads: set[int] = set()

    def where(value: int) -> int:
        threads.add(threading.get_ident())
        return twice(value)

    async def main() -> int:
        threads.add(threading.get_ident())
        return await loop_bridge.run(where, 5)

    assert asyncio.run(main()) == 12
    assert len(threads) == 1  # no thread of its own


def test_an_exception_raised_by_the_awaited_reaches_the_function_then_the_caller() -> None:
    seen: list[str] = []

    async def fails() -> None:
        raise LookupError("gone")

    def catches_and_raises() -> None:
        try:
            loop_bridge.await_(fails())
        except LookupError as exc:
            seen.append(str(exc))
            raise ValueError("the function's own") from exc

    with pytest.raises(ValueError, match="the function's own"):
        asyncio.run(loop_bridge.run(catches_and_raises))
    assert seen == ["gone"]


def test_a_cancel_is_raised_inside_the_function_where_it_awaits() -> None:
    cleaned: list[str] = []

    def waits() -> None:
        try:
            loop_bridge.await_(asyncio.sleep(30))
        finally:
            cleaned.append("finally ran")

    async def main() -> None:
        task = asyncio.ensure_future(loop_bridge.run(waits))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert cleaned == ["finally ran"]


def test_await_outside_run_is_refused_and_on_loop_is_false() -> None:
    assert not loop_bridge.on_loop()
    coroutine = doubled(1)
    with pytest.raises(RuntimeError, match=r"outside loop_bridge\.run"):
        loop_bridge.await_(coroutine)
    coroutine.close()


def test_many_functions_interleave_on_one_loop() -> None:
    order: list[str] = []

    def step(name: str) -> str:
        order.append(f"{name} start")
        loop_bridge.await_(asyncio.sleep(0.01))
        order.append(f"{name} end")
        return name

    async def main() -> list[str]:
        return list(await asyncio.gather(*(loop_bridge.run(step, n) for n in "abc")))

    assert asyncio.run(main()) == ["a", "b", "c"]
    assert order[:3] == ["a start", "b start", "c start"]  # all waited at once
