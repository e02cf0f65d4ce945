"""The synchronous clients are derived from the asynchronous ones: `blocking(Async.method)` is the
method's blocking twin, with its exact signature (typed by `ParamSpec`, so mypy checks every call).

An asynchronous client made with `offload=inline` does its blocking work (the SQL, a Redis
notice) in the calling thread, as it is asked: its coroutines never wait on an event loop, so
`run_inline` drives one to its end in a single step, with no loop and no thread hop. A twin's
call therefore blocks the calling thread, also one that runs an event loop (which it never
touches: on a loop, use the asynchronous client instead).
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")
C = TypeVar("C")
C_co = TypeVar("C_co", covariant=True)


class Offload(Protocol):
    """Runs a blocking call off the event loop (`asyncio.to_thread`, an app's own pool), or, for
    a synchronous twin, right here (`inline`)."""

    def __call__(self, call: Callable[[], T], /) -> Awaitable[T]: ...


class _Done(Generic[T]):
    """An awaitable whose value is known: awaiting it never suspends."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, T]:
        return self.value
        yield  # (a generator that returns at once)


def inline(call: Callable[[], T], /) -> Awaitable[T]:
    """The `Offload` of a synchronous twin: `call` runs now, in this thread."""
    return _Done(call())


def run_inline(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine of an `inline` client, driven in this thread without a loop."""
    try:
        waited = coroutine.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coroutine.close()
    raise RuntimeError(f"{coroutine!r} waited on {waited!r}: only an inline client can block")


class Twin(Protocol[C_co]):
    """A synchronous client: the `inline` asynchronous client its methods drive."""

    @property
    def core(self) -> C_co: ...


class Blocking(Generic[C, P, R]):
    """The blocking twin of an asynchronous method (a descriptor: see `blocking`)."""

    def __init__(
        self,
        method: Callable[Concatenate[C, P], Coroutine[Any, Any, S]],
        then: Callable[[S], R],
    ) -> None:
        def call(twin: Twin[C], /, *args: P.args, **kwargs: P.kwargs) -> R:
            return then(run_inline(method(twin.core, *args, **kwargs)))

        self.function = functools.wraps(method)(call)
        if then is not _same:  # (what the twin returns is `then`'s)
            returned = inspect.signature(then).return_annotation
            signature = inspect.signature(method).replace(return_annotation=returned)
            self.function.__signature__ = signature  # type: ignore[attr-defined]

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Callable[Concatenate[Twin[C], P], R]: ...
    @overload
    def __get__(self, instance: Twin[C], owner: type[Any]) -> Callable[P, R]: ...
    def __get__(self, instance: Twin[C] | None, owner: type[Any]) -> Any:
        if instance is None:
            return self.function
        return types.MethodType(self.function, instance)


def _same(value: T) -> T:
    return value


@overload
def blocking(
    method: Callable[Concatenate[C, P], Coroutine[Any, Any, R]],
) -> Blocking[C, P, R]: ...
@overload
def blocking(
    method: Callable[Concatenate[C, P], Coroutine[Any, Any, S]], then: Callable[[S], R]
) -> Blocking[C, P, R]: ...
def blocking(method: Any, then: Any = _same) -> Any:
    """`Sync.name = blocking(Async.name)`: the method of a synchronous twin that runs its
    `core`'s coroutine in the calling thread; `then` turns its result into the twin's (an
    asynchronous iterator into its blocking one)."""
    return Blocking(method, then)


__all__ = ["Blocking", "Offload", "Twin", "blocking", "inline", "run_inline"]
