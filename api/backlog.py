"""Back-pressure on writes: a write is encoded by the process that acknowledges it, before it does
(``retrieval/pending/encodings.py``), so a search never waits on encoding; the documents being encoded
at once are bounded (``$GRAPHLAKE_WRITE_BACKLOG``), and a write past the bound is refused at once
(``Overloaded``: 429 with ``Retry-After`` over HTTP) rather than queued without end, as Elasticsearch's
full write queue answers 429."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from graphlake.api.results import Overloaded
from graphlake.common.settings import WRITE_BACKLOG


class Backlog:
    """The documents being encoded for writes now, against the bound; the rate they were encoded at
    lately says how long a refused writer should wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pending, self._rate = 0, 0.0  # documents a second, smoothed

    @contextmanager
    def holding(self, documents: int) -> Iterator[None]:
        """Count ``documents`` in while the body encodes them; ``Overloaded`` when that would pass the
        bound (a write on an idle backlog is always taken, however large)."""
        bound = int(WRITE_BACKLOG.number())
        with self._lock:
            if self.pending and self.pending + documents > bound:
                wait = max(1, math.ceil(self.pending / self._rate)) if self._rate else 1
                raise Overloaded(
                    f"{self.pending:,} documents are being encoded for earlier writes and this write's {documents:,} would pass the bound of {bound:,} ({WRITE_BACKLOG.name}): retry in {wait} s",
                    retry_after=wait,
                )
            self.pending += documents
        started = time.perf_counter()
        try:
            yield
        finally:
            seconds = max(time.perf_counter() - started, 1e-3)
            with self._lock:
                self.pending -= documents
                self._rate = documents / seconds if not self._rate else 0.8 * self._rate + 0.2 * documents / seconds
