"""Event-loop helpers: run a coroutine on uvloop when it is installed."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop when available (faster timers and sockets), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)  # type: ignore[no-any-return]


def cancel_requested() -> bool:
    """Has the running task been asked to stop (``Task.cancel``)?

    A background loop that goes on after ``except Exception`` must ask this, at its head and in
    its handler: on Python 3.11 a cancellation that meets a timeout inside a library
    (``asyncio.wait_for``, a client's socket timeout) can come out as an ordinary error — or
    not at all — and a loop that only waits for ``CancelledError`` then runs for ever while
    its owner waits for it to end."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def stop_task(task: asyncio.Task[Any] | None, timeout_s: float = 5.0) -> bool:
    """Cancel ``task`` and wait at most ``timeout_s`` for it to end; True when it ended.
    Its result or error is collected (never 'exception was never retrieved')."""
    if task is None:
        return True
    if not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=timeout_s)
    if not task.done():
        return False
    if not task.cancelled():
        task.exception()
    return True
