"""Progress of a long step in words a person reads: items done of the total, the rate, the time
left. It is reported through a callback (an asset's run log) when the step starts, at most every
``every_s`` seconds while it runs, and when it ends; lines open with ``PREFIX`` so that the
command line (``pipelines/runner.py``) can show the latest one beside its asset count."""

from __future__ import annotations

import time
from collections.abc import Callable

PREFIX = "progress: "


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class StepProgress:
    def __init__(self, what: str, total: int, report: Callable[[str], None] | None, unit: str = "items", every_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.report = report
        self.every_s = every_s
        self.clock = clock
        self.done = 0
        self.started = self.last = clock()
        self._say()

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = self.clock()
        if self.done >= self.total or now - self.last >= self.every_s:
            self.last = now
            self._say()

    def line(self) -> str:
        elapsed = self.clock() - self.started
        head = f"{PREFIX}{self.what} {self.done}/{self.total} {self.unit}"
        if not self.done or elapsed <= 0:
            return head
        rate = self.done / elapsed
        # a slow step's rate reads as time per item: 0.0/s says nothing
        speed = f"{rate:.1f}/s" if rate >= 1 else f"{1 / rate:.1f} s each"
        if self.done >= self.total:
            return f"{head} in {duration(elapsed)} ({speed})"
        return f"{head} ({speed}, about {duration((self.total - self.done) / rate)} left)"

    def _say(self) -> None:
        if self.report is not None and self.total:  # nothing to do (a corpus without queries): nothing to say
            self.report(self.line())
