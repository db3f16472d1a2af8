"""When a request's work stops before its end: past its deadline, or because its caller called it off
(the client disconnected, the server is shutting down). The work checks between its stages (an
operator's run, a batch's chunk, the queries' encoding): a stage that has started is not interrupted,
so work stops within its longest stage after the cause. A child process (SQL) is killed instead."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Why = Literal["deadline", "disconnected", "shutdown"]
SAID = {"disconnected": "the client disconnected", "shutdown": "the server is shutting down"}


class Stopped(Exception):
    """Work stopped early; ``why`` says which cause (the message says where it stopped)."""

    def __init__(self, message: str, why: Why) -> None:
        super().__init__(message)
        self.why = why


@dataclass(eq=False)  # one per request, held in a set of the work running now
class Stop:
    """A deadline (``time.monotonic()`` seconds; infinite: none) and the cause a caller set, if any."""

    deadline: float = math.inf
    seconds: float | None = None  # the deadline as the request gave it, for the message
    called_off: Why | None = field(default=None, repr=False)
    _hooks: list[Callable[[], object]] = field(default_factory=list, repr=False)

    @classmethod
    def within(cls, seconds: float) -> Stop:
        return cls(time.monotonic() + seconds, seconds)

    def call_off(self, why: Why) -> None:
        """Stop the work at its next check, and at once what it registered (``when_called_off``)."""
        self.called_off = why
        for hook in list(self._hooks):
            hook()

    def when_called_off(self, hook: Callable[[], object]) -> None:
        """Call ``hook`` (in the caller's thread) when the work is called off: a child process killed
        there and then, even when the process that runs the work is about to exit."""
        self._hooks.append(hook)
        if self.called_off is not None:
            hook()

    def left(self) -> float:
        """Seconds to the deadline (infinite without one), at least 0."""
        return max(self.deadline - time.monotonic(), 0.0)

    def check(self, before: str) -> None:
        """``Stopped`` when the work must stop, saying it stopped ``before`` that stage."""
        if self.called_off is not None:
            raise Stopped(f"{SAID[self.called_off]}: stopped before {before}", self.called_off)
        if time.monotonic() > self.deadline:
            raise Stopped(f"past its deadline of {self.seconds:g} s: stopped before {before}", "deadline")


def check(stop: Stop | None, before: str) -> None:
    if stop is not None:
        stop.check(before)
