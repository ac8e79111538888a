"""Bounded waits on a condition. The bound is a hang guard, not a timing: no test asserts how fast a
condition came true, and a wait ends as soon as it does."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

TIMEOUT = 120.0  # seconds for any single wait; generous, these guard against hangs on a loaded machine
STEP = 0.02  # how often a condition is checked


async def until(condition: Callable[[], Any], timeout: float = TIMEOUT, what: str = "the condition",
                step: float = STEP) -> Any:
    """Check ``condition()`` (a plain or an async function) until it returns something truthy, and return
    that; fail with ``what`` once ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last value {value!r})")
        await asyncio.sleep(step)


def until_sync(condition: Callable[[], Any], timeout: float = TIMEOUT, what: str = "the condition",
               step: float = STEP) -> Any:
    """:func:`until` for code outside an event loop: blocks the calling thread between checks."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last value {value!r})")
        time.sleep(step)

