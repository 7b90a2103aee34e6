"""A connection's one wait for the upstream, and its read timeout (the longest silence allowed:
waiting for the head, and between reads of the body).

The timeout is a deadline that one timer per connection checks, not a timer per wait: a
small request waits twice (head, body), and arming and cancelling a loop timer for each cost
more than the rest of the wait. It changes when how a wait is timed changes, apart from how
a response is read (`_Connection`, transport.py).
"""

from __future__ import annotations

import asyncio

import httpx

# A loop timer may fire this much before its time (libuv counts milliseconds): a deadline
# that close is reached, or the timer would be armed again for what is left, and again.
_TIMER_SLACK = 0.001


class ReadWait:
    """Until something arrives (`wake`), or ReadTimeout once the deadline passes."""

    __slots__ = ("_deadline", "_loop", "_timer", "_timer_at", "_waiter", "_waiting_for")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiter: asyncio.Future[None] | None = None
        # The current wait's deadline and what it waits for, and the one timer that checks
        # it, with the loop time it is due at.
        self._deadline: float | None = None
        self._waiting_for = ""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    async def wait(self, timeout: float | None, what: str) -> None:
        """Until `wake()`; ReadTimeout after `timeout`. A timer due before the deadline
        (armed by an earlier wait) finds it not reached and is armed again for it."""
        loop = self._loop
        waiter = self._waiter = loop.create_future()
        if timeout is not None:
            deadline = self._deadline = loop.time() + timeout
            self._waiting_for = what
            if self._timer is None or self._timer_at > deadline:
                self._arm(deadline)
        try:
            await waiter
        finally:
            self._waiter = self._deadline = None

    def wake(self) -> None:
        """Something arrived, or the response ended or failed: the wait is over."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def stop(self) -> None:
        """The connection is gone: its timer would keep it alive until it is due."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._check_deadline)

    def _check_deadline(self) -> None:
        self._timer = None
        deadline, waiter = self._deadline, self._waiter
        if deadline is None or waiter is None:
            return  # nobody waits: the next wait arms the timer again
        if self._loop.time() + _TIMER_SLACK >= deadline:
            _expire(waiter, self._waiting_for)
        else:
            self._arm(deadline)


def _expire(waiter: asyncio.Future[None], what: str) -> None:
    if not waiter.done():
        waiter.set_exception(httpx.ReadTimeout(f"no {what} within the read timeout"))
