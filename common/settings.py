"""Every ``GRAPHLAKE_*`` environment variable, declared once: its name, type, default and what it
does. Only this module reads them, so a bad value gets the same message naming the variable wherever
it is read, ``graphlake config`` lists each with its value and where the value came from, and
``docs/configuration.md`` is checked against this list by a test."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Variable:
    """One environment variable: read when asked (a process may set it after importing this)."""

    name: str
    default: str | float | None
    help: str
    kind: type = str  # str, int or float
    least: float | None = None
    most: float | None = None
    secret: bool = False

    def set(self) -> bool:
        return bool(os.environ.get(self.name, "").strip())

    def text(self) -> str | None:
        """The value as written (stripped), or the default when unset or empty."""
        raw = os.environ.get(self.name, "").strip()
        return raw if raw else (None if self.default is None else str(self.default))

    def number(self, error: type[Exception] = ValueError) -> float:
        """The value as ``kind``, within ``[least, most]``; else ``error`` naming the variable and what it must be."""
        raw = os.environ.get(self.name, "").strip()
        if not raw:
            return self.default  # type: ignore[return-value]
        try:
            value = self.kind(raw)
        except ValueError:
            raise error(f"{self.name}={raw!r} is not {'a whole number' if self.kind is int else 'a number'}") from None
        if not math.isfinite(value):
            raise error(f"{self.name}={raw!r} is not a finite number")
        least, most = self.least, self.most
        if (least is not None and value < least) or (most is not None and value > most):
            bounds = f"between {least:g} and {most:g}" if least is not None and most is not None else f"at least {least:g}" if least is not None else f"at most {most:g}"
            raise error(f"{self.name}={raw!r} must be {bounds}")
        return value

    def flag(self) -> bool:
        """Set to anything but 0."""
        return (self.text() or "0") != "0"

    def shown(self) -> str:
        """The effective value for a listing: a secret's only as set or not."""
        value = self.text()
        if value is None:
            return "(unset)"
        return "(set)" if self.secret and self.set() else value

    def source(self) -> str:
        return "environment" if self.set() else "default"


# The lake and the command line
HOME = Variable("GRAPHLAKE_HOME", None, "The lake: a folder, or s3://bucket/prefix (default: lake/ beside the project, or in the working folder).")
SERVER = Variable("GRAPHLAKE_SERVER", None, "A running `graphlake serve` (http://host:port) that `graphlake query` asks instead of the lake.")
LOCK_WAIT = Variable("GRAPHLAKE_LOCK_WAIT", 1800.0, "Seconds a writer waits for another writer of the same corpus; 0: fail at once.", float, least=0)
LEASE_S = Variable("GRAPHLAKE_LEASE_S", 30.0, "Seconds a writer's lease on an object-store lake lasts between renewals.", float, least=1)
CACHE = Variable("GRAPHLAKE_CACHE", None, "Local folder an object-store lake is cached in (default: under ~/.cache/graphlake).")
# Ingest and builds
DATASETS = Variable("GRAPHLAKE_DATASETS", None, "The benchmark datasets' folder that benchmarks and the tests read (default: ../shared/datasets beside the project).")
MAX_LINE_BYTES = Variable("GRAPHLAKE_MAX_LINE_BYTES", 10 * 1024 * 1024, "Longest line a JSON-lines reader accepts, in bytes.", int, least=1)
MAX_FAILURE_SHARE = Variable("GRAPHLAKE_MAX_FAILURE_SHARE", 0.25, "Share of a step's items (LLM calls, files) that may fail before the step fails.", float, least=0, most=1)
SHARD_NODES = Variable("GRAPHLAKE_SHARD_NODES", 512, "Nodes in one shard of the per-node steps (a Dask task, a progress step).", int, least=1)
DASK = Variable("GRAPHLAKE_DASK", None, "Run builds on Dask: a scheduler's address (tcp://host:8786), or `local` for a local cluster.")
REINDEX_CRON = Variable("GRAPHLAKE_REINDEX_CRON", "0 2 * * *", "When the scheduled reindex runs (cron, 5 fields, UTC).")
FOLD_WRITES = Variable("GRAPHLAKE_FOLD_WRITES", 1000, "Pending writes of a lake-owned corpus that start a build folding them in (the fold sensor).", int, least=1)
WRITE_BACKLOG = Variable("GRAPHLAKE_WRITE_BACKLOG", 2000, "Documents a process encodes for writes at once; a write past it is refused (429, Retry-After).", int, least=1)
BUILD_NICE = Variable("GRAPHLAKE_BUILD_NICE", 10, "The CPU priority a build runs at below the searches (its nice value; 0: the same as theirs).", int, least=0, most=19)
FOLD_AGE_S = Variable("GRAPHLAKE_FOLD_AGE_S", 300.0, "Seconds the oldest pending write of a lake-owned corpus waits before a build folds it in.", float, least=0)
# Models
MODEL_CACHE = Variable("GRAPHLAKE_MODEL_CACHE", None, "Folder for exported query-encoder graphs (default: ~/.cache/graphlake/_models).")
ENCODER_PRECISION = Variable("GRAPHLAKE_ENCODER_PRECISION", "auto", "The encoders' dtype: auto, float32, bfloat16 or float16.")
DEVICE = Variable("GRAPHLAKE_DEVICE", "auto", "Where the hybrid graph is searched and the cross-encoder runs: auto (CUDA where one is, said once), cpu, or cuda (an error where it cannot).")
# The LLM
LLM_BASE_URL = Variable("GRAPHLAKE_LLM_BASE_URL", None, "An OpenAI-compatible server for the LLM steps (http://127.0.0.1:8000/v1).")
LLM_MODEL = Variable("GRAPHLAKE_LLM_MODEL", None, "The model that server is asked for.")
LLM_API_KEY = Variable("GRAPHLAKE_LLM_API_KEY", None, "The key sent to that server.", secret=True)
LLM_PRICE = Variable("GRAPHLAKE_LLM_PRICE_PER_1K_TOKENS", None, "Price of 1,000 tokens, for the cost a build reports.", float, least=0)
LLM_TIMEOUT = Variable("GRAPHLAKE_LLM_TIMEOUT", None, "Seconds one LLM call may take.", float, least=1e-3)
LLM_RETRIES = Variable("GRAPHLAKE_LLM_RETRIES", None, "Attempts after a failed LLM call's first.", int, least=0)
# Serving
API_KEY = Variable("GRAPHLAKE_API_KEY", None, "Set: `graphlake serve` requires this key; `graphlake query --server` and RemoteLake send it.", secret=True)
SERVE_MEMORY_MB = Variable("GRAPHLAKE_SERVE_MEMORY_MB", 384, "Memory (MB) the searches a server runs at once may hold together.", int, least=16)
SERVE_REQUEST_MB = Variable("GRAPHLAKE_SERVE_REQUEST_MB", 384, "Memory (MB) one search may hold; a larger one is refused (422).", int, least=16)
SERVE_QUEUE_S = Variable("GRAPHLAKE_SERVE_QUEUE_S", 30.0, "Seconds a search waits for the memory budget before a 503.", float, least=0)
SERVE_DEADLINE_S = Variable("GRAPHLAKE_SERVE_DEADLINE_S", 60.0, "Seconds a search or SQL statement may take; a request may ask for less (timeout_s), never more.", float, least=0.1)
SERVE_GRACE_S = Variable("GRAPHLAKE_SERVE_GRACE_S", 10.0, "Seconds a server given SIGTERM lets running requests finish before it stops them and exits.", float, least=0)
SERVE_HEAD_TIMEOUT_S = Variable(
    "GRAPHLAKE_SERVE_HEAD_TIMEOUT_S", 10.0, "Seconds a request's line and headers may take to arrive (from the connection, or the request's first byte); past it: 408, closed.", float, least=0.1
)
SERVE_BODY_TIMEOUT_S = Variable("GRAPHLAKE_SERVE_BODY_TIMEOUT_S", 30.0, "Seconds a request's body may take to arrive after its headers; past it: 408, closed.", float, least=0.1)
SERVE_CLIENT_CONNECTIONS = Variable("GRAPHLAKE_SERVE_CLIENT_CONNECTIONS", 64, "Connections one client address may hold open at once; past them: 429, closed.", int, least=1)
SERVE_SQL_PROCESSES = Variable("GRAPHLAKE_SERVE_SQL_PROCESSES", 2, "SQL statements a server runs at once, each holding one request's memory budget; the next waits as a search does.", int, least=1)
SERVE_PRIVATE_DOCS = Variable("GRAPHLAKE_SERVE_PRIVATE_DOCS", None, "Set (not 0): /openapi.json and /docs want the API key too (open by default: they hold no data).")
SQL_TIMEOUT = Variable("GRAPHLAKE_SQL_TIMEOUT", 60.0, "Seconds one SQL statement may run.", float, least=0.1)
SQL_MEMORY_MB = Variable("GRAPHLAKE_SQL_MEMORY_MB", 2048, "Memory (MB) the SQL sandbox's process may use.", int, least=64)

VARIABLES: tuple[Variable, ...] = (
    HOME, SERVER, LOCK_WAIT, LEASE_S, CACHE,
    DATASETS, MAX_LINE_BYTES, MAX_FAILURE_SHARE, SHARD_NODES, DASK, REINDEX_CRON, FOLD_WRITES, FOLD_AGE_S, WRITE_BACKLOG, BUILD_NICE,
    MODEL_CACHE, ENCODER_PRECISION, DEVICE,
    LLM_BASE_URL, LLM_MODEL, LLM_API_KEY, LLM_PRICE, LLM_TIMEOUT, LLM_RETRIES,
    API_KEY, SERVE_MEMORY_MB, SERVE_REQUEST_MB, SERVE_QUEUE_S, SERVE_DEADLINE_S, SERVE_GRACE_S, SERVE_HEAD_TIMEOUT_S, SERVE_BODY_TIMEOUT_S, SERVE_CLIENT_CONNECTIONS, SERVE_SQL_PROCESSES, SERVE_PRIVATE_DOCS, SQL_TIMEOUT, SQL_MEMORY_MB,
)  # fmt: skip
SECRETS = tuple(v.name for v in VARIABLES if v.secret)
PRECISIONS = ("auto", "float32", "bfloat16", "float16")  # what ENCODER_PRECISION may say; auto: what the device does fastest
DEVICES = ("auto", "cpu", "cuda")  # what DEVICE may say


def model_cache() -> Path:
    """Where unpacked model archives and the exported query encoders live (``MODEL_CACHE``)."""
    configured = MODEL_CACHE.text()
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "graphlake" / "_models"


def encoder_precision() -> str:
    """The dtype the builds' encoders compute in (``ENCODER_PRECISION``), checked."""
    choice = (ENCODER_PRECISION.text() or "auto").lower()
    if choice not in PRECISIONS:
        raise ValueError(f"{ENCODER_PRECISION.name}={choice!r}: write one of {', '.join(PRECISIONS)}")
    return choice


def device() -> str:
    """The device asked for (``DEVICE``), checked; ``auto`` is resolved where the indexes are opened."""
    choice = (DEVICE.text() or "auto").lower()
    if choice not in DEVICES:
        raise ValueError(f"{DEVICE.name}={choice!r}: write one of {', '.join(DEVICES)}")
    return choice


def cuda_simulated() -> bool:
    """Whether numba's CUDA simulator is switched on (numba's own ``NUMBA_ENABLE_CUDASIM``): the tests'
    CUDA device on a machine without one."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0")


def problems() -> list[str]:
    """What is wrong with the numeric values set now, one line each (what ``graphlake config`` reports)."""
    found = []
    for variable in VARIABLES:
        if variable.kind is not str:
            try:
                variable.number()
            except ValueError as error:
                found.append(str(error))
    return found
