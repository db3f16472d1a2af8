"""What a search costs the server in memory, estimated from its shape before any work, and the server's
budget for every search it runs at once: Elasticsearch's request circuit breaker, which estimates a
request's memory up front and refuses it over budget, with a queue in front of it.

A batch is searched ``CHUNK_QUERIES`` queries at a time and its answers are written out one query at a
time (``GraphLake.answers``), so what one request holds at once depends on a chunk, not on the batch:
the query encoders' largest batch (``query_encoders.BATCH_TOKENS``: one 256-token query through SPLADE
holds (256, 30,522) float32 logits, 31 MB, and about 140 MB at the graph's peak), the scores of the
chunk's queries against every node, the candidate pools its operators keep, and one query's hits while
they are written. The factors were measured on this project's server (benchmarks/results/serve_load.md)
and err high: the defaults keep a demo server within 1.5 times its idle size.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from graphlake.common.settings import SERVE_MEMORY_MB, SERVE_QUEUE_S, SERVE_REQUEST_MB, SERVE_SQL_PROCESSES
from graphlake.common.stopping import Stop
from graphlake.kernels.text.encoders import MAX_TOKENS
from graphlake.kernels.text.query_encoders import BATCH, BATCH_TOKENS

CHUNK_QUERIES = 32  # queries searched at once in a batch: the batched path's speed, a chunk's memory
MB = 1 << 20
SQL_START_MB = 128  # an SQL process before its statement runs: Python, DuckDB, Arrow and the catalog (121 MB measured)

# measured factors (bytes); see the module's docstring
BASE = 8 * MB  # a request's own objects: its body, parsed, its filter's allowed rows, its notes
TOKEN_CHARS = 3  # characters a token, on the short side: the estimate errs high
ENCODER_TOKEN = {"dense": 256 << 10, "splade": 30_522 * 4 * 8}  # an encoder's batch, per token it holds (SPLADE: vocabulary-wide logits)
NODE_SCORE = 24  # a query's score of one node, as a scan keeps it (float, the sort's index, the mask)
POOL_SLOT = 400  # a query's candidate in an operator's pool (ids, scores, a graph walk's frontier)
HIT_TEXT = 6  # a hit's text as it is written out: the node's text, its snippet, Python's and JSON's copies
HIT = 2048  # a hit's other fields and metadata
M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
ARENAS = 2


@dataclass(frozen=True)
class Shape:
    """What a search's cost is estimated from."""

    queries: int
    longest_chars: int  # the longest query's characters
    k: int
    pool: int  # the widest candidate pool of the method's operators (their k, candidates, depth)
    nodes: int  # the corpus's
    text_bytes: int  # a node's text, on average
    dense: bool  # whether the method encodes its queries with the dense model
    splade: bool  # and with SPLADE


def estimate(shape: Shape) -> int:
    """The bytes a search of this shape holds at its peak: its largest encoder batch, a chunk's scores and
    pools, and one query's hits."""
    tokens = min(MAX_TOKENS, shape.longest_chars // TOKEN_CHARS + 2)
    chunk = min(shape.queries, CHUNK_QUERIES)
    encode = max(
        (_batch_tokens(kind, chunk, tokens) * ENCODER_TOKEN[kind] for kind, used in (("dense", shape.dense), ("splade", shape.splade)) if used),
        default=0,
    )
    search = chunk * (shape.nodes * NODE_SCORE + min(shape.pool, shape.nodes) * POOL_SLOT)
    answer = min(shape.k, shape.nodes) * (shape.text_bytes * HIT_TEXT + HIT)
    return BASE + encode + search + answer


def _batch_tokens(kind: str, queries: int, tokens: int) -> int:
    """The tokens of an encoder's largest batch of ``queries`` of ``tokens`` (``query_encoders.BATCH_TOKENS``)."""
    return min(queries, BATCH[kind], max(1, BATCH_TOKENS[kind] // tokens)) * tokens


def give_memory_back() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``), after each chunk of a batch
    and after each batch: freed, a batch's memory otherwise stayed with the process (1,971 MB after 8
    concurrent batches, against 1,003 idle), and within one batch each chunk's heap grew on the last's
    (a demo rrf batch: +225 MB by its end, +140 with a trim a chunk)."""
    if _libc is not None:
        _libc.malloc_trim(0)


def tame_allocator() -> None:
    """Two glibc arenas instead of eight a core, set before a server's threads start: each thread's
    arena keeps its own freed memory, which a trim then has to find in every one of them."""
    if _libc is not None:
        _libc.mallopt(M_ARENA_MAX, ARENAS)


try:
    _libc: ctypes.CDLL | None = ctypes.CDLL("libc.so.6")
    _libc.malloc_trim, _libc.mallopt  # noqa: B018 (glibc only)
except (OSError, AttributeError):
    _libc = None


class OverBudget(Exception):
    """A search the server cannot take now (``busy``: it waited for room) or ever (over one request's budget)."""

    def __init__(self, message: str, busy: bool) -> None:
        super().__init__(message)
        self.busy = busy


class MemoryBudget:
    """Bytes the searches running at once may hold, all of them together: a search takes its estimate
    before it starts and gives it back when its answer is written; one that does not fit waits in line
    up to ``wait`` seconds."""

    def __init__(self, capacity: int, per_request: int, wait: float, statements: int = 2) -> None:
        self.capacity, self.per_request, self.wait = capacity, min(per_request, capacity), wait
        self._statements = threading.BoundedSemaphore(statements)  # SQL processes at once
        self._free = capacity
        self._room = threading.Condition()
        self._resident: dict[str, int] = {}  # what stays between searches (a corpus's fresh segment), by what holds it

    @classmethod
    def from_env(cls) -> MemoryBudget:
        return cls(int(SERVE_MEMORY_MB.number()) * MB, int(SERVE_REQUEST_MB.number()) * MB, SERVE_QUEUE_S.number(), int(SERVE_SQL_PROCESSES.number()))

    @contextmanager
    def statement(self, stop: Stop | None = None) -> Iterator[int]:
        """One SQL statement's place: one of ``SERVE_SQL_PROCESSES`` and a share of the budget, held while its
        process runs; yields the DuckDB memory limit (MB) that keeps the process within it: the process's
        own start (``SQL_START_MB``), the limit, and as much again for the result's batches. The share is
        one request's, less what the pending writes keep (``resident``) when they leave less: a share that
        can never be free would only wait and be refused."""
        with self._room:
            kept = sum(self._resident.values())
        share = min(self.per_request, self.capacity - kept)
        megabytes = (share // MB - SQL_START_MB) // 2
        if megabytes < 16:
            why = f"one request's budget of {self.per_request // MB} MB" if share == self.per_request else f"the budget of {self.capacity // MB} MB less the {kept // MB} MB the pending writes keep"
            raise OverBudget(f"{why} leaves an SQL statement no room: set {SERVE_REQUEST_MB.name} and {SERVE_MEMORY_MB.name} higher (at least {SQL_START_MB + 32} MB free)", busy=False)
        if not self._statements.acquire(timeout=min(self.wait, stop.left() if stop is not None else self.wait)):
            raise OverBudget(f"the server runs as many SQL statements as it may at once ({SERVE_SQL_PROCESSES.name}); try again shortly", busy=True)
        try:
            self.take(share, stop)
            try:
                yield megabytes
            finally:
                self.give_back(share)
        finally:
            self._statements.release()

    def take(self, cost: int, stop: Stop | None = None) -> None:
        """Hold ``cost`` bytes of the budget, waiting for them if others hold too much; ``OverBudget`` past
        one request's budget, or when the wait runs out (at the ``stop``'s deadline, if sooner)."""
        if cost > self.per_request:
            raise OverBudget(
                f"this search would hold about {cost / MB:,.0f} MB, over the {self.per_request / MB:,.0f} MB one request may ({SERVE_REQUEST_MB.name}): "
                "send fewer or shorter queries, or a smaller k or candidates",
                busy=False,
            )
        deadline = time.monotonic() + min(self.wait, stop.left() if stop is not None else self.wait)
        with self._room:
            while self._free < cost:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OverBudget(f"the server is at its memory budget of {self.capacity / MB:,.0f} MB ({SERVE_MEMORY_MB.name}); try again shortly", busy=True)
                self._room.wait(left)
            self._free -= cost

    def resident(self, key: str, nbytes: int) -> None:
        """Count ``nbytes`` that ``key`` keeps between searches (a corpus's fresh segment, its size now),
        so that searches fit in what is left; a search that does not waits or is refused as any other."""
        with self._room:
            self._free -= nbytes - self._resident.get(key, 0)
            self._resident[key] = nbytes
            self._room.notify_all()

    def give_back(self, cost: int) -> None:
        with self._room:
            self._free += cost
            self._room.notify_all()

    @property
    def held(self) -> int:
        with self._room:
            return self.capacity - self._free
