"""Dense vectors from an OpenAI-compatible ``/v1/embeddings`` endpoint: a hosted service, vLLM, or
llama.cpp's server started with ``--embedding``.

The texts go in batches; a batch is retried on timeouts, lost connections, 429 and 5xx with backoff
(``openai_retries.py``: the chat client's rules). The vectors come back float32 and unit length, as
the lake's local encoders make them, so that inner product is cosine in every index.

An answered batch is stored at once in ``cache`` (one ``.npz`` of text hashes and vectors, written
to a temporary name and renamed): a build that an outage stops keeps what it was sent, and the next
run asks only for the rest. The key is read from the environment variable the declaration names, at
call time; it is sent in the Authorization header and nowhere else, and redacted from every error.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphlake.common.llm import model_slug
from graphlake.common.openai_retries import Retries, retrying
from graphlake.common.redact import redact


class EmbeddingsError(RuntimeError):
    """The endpoint refused a batch or answered with something that is not one vector per text."""


class EmbeddingsUnavailable(EmbeddingsError):
    """The endpoint did not answer a batch after every retry."""


@dataclass(frozen=True)
class Endpoint:
    """Where to send texts and how patiently. ``key_env`` names the variable holding the key."""

    base_url: str
    model: str
    key_env: str | None = None
    dimension: int | None = None  # the declared size, checked against every answer
    batch_size: int = 64
    timeout_s: float = 60.0
    max_retries: int = 4
    backoff_s: float = 1.0
    extra_body: tuple[tuple[str, str], ...] = ()  # request fields besides the texts: the input type of a query or a passage

    def describe(self) -> str:
        return f"embeddings endpoint {self.base_url} (model {self.model})"

    def key(self) -> str:
        return (os.environ.get(self.key_env) if self.key_env else None) or "none"  # local servers ignore it; the client needs one


def embed(endpoint: Endpoint, texts: list[str], cache: Path | None = None) -> np.ndarray:
    """The ``(len(texts), dimension)`` unit-length float32 vectors of ``texts``, in order; batches
    already answered into ``cache`` are not sent again."""
    key = endpoint.key()
    try:
        return _embed(endpoint, texts, key, cache)
    except EmbeddingsError as error:
        kind, message = type(error), redact(str(error), key)
        if isinstance(error, EmbeddingsUnavailable) and cache is not None:
            message += "; the batches answered so far are kept: run the build again to resume"
    raise kind(message)  # outside the handler: the SDK's chained error would repeat the server's answer


def _embed(endpoint: Endpoint, texts: list[str], key: str, cache: Path | None) -> np.ndarray:
    import openai  # here, not at import: the Definitions load this module

    folder = Path(cache) / model_slug(f"{endpoint.model}@{endpoint.base_url}") if cache is not None else None
    told = "".join(f"{field}={value}\x1f" for field, value in endpoint.extra_body)  # a query's vector is not its passage's
    hashes = [hashlib.sha256((told + text).encode()).hexdigest()[:32] for text in texts]
    known = _stored(folder, set(hashes)) if folder is not None else {}
    client = openai.OpenAI(base_url=endpoint.base_url, api_key=key, max_retries=0)
    retries = Retries(endpoint.timeout_s, endpoint.max_retries, endpoint.backoff_s, "timeout_s in models.yaml")
    missing = list(dict.fromkeys(h for h in hashes if h not in known))
    text_of = dict(zip(hashes, texts, strict=True))
    for start in range(0, len(missing), endpoint.batch_size):
        batch = missing[start : start + endpoint.batch_size]

        def ask(timeout: float, batch: list[str] = batch):
            return client.with_options(timeout=timeout).embeddings.create(
                model=endpoint.model, input=[text_of[h] for h in batch], encoding_format="float", extra_body=dict(endpoint.extra_body) or None
            )

        answer = retrying(ask, retries, endpoint.describe(), "an OpenAI embeddings response", EmbeddingsUnavailable, EmbeddingsError)
        vectors = _vectors(endpoint, answer, len(batch))
        if folder is not None:
            _store(folder, batch, vectors)
        known.update(zip(batch, vectors, strict=True))
    if not texts:
        return np.zeros((0, endpoint.dimension or 0), dtype=np.float32)
    return np.stack([known[h] for h in hashes])


def _vectors(endpoint: Endpoint, answer, count: int) -> np.ndarray:
    """The answer's vectors in input order, checked (one flat vector per text, one size) and made unit length."""
    data = sorted(answer.data or [], key=lambda item: item.index)
    if len(data) != count:
        raise EmbeddingsError(f"{endpoint.describe()}: sent {count} texts, got {len(data)} vectors back")
    first = data[0].embedding
    if first and isinstance(first[0], list):
        raise EmbeddingsError(f"{endpoint.describe()}: answered one vector per token, not per text: serve the model with pooling (llama.cpp: mean pooling)")
    try:
        matrix = np.asarray([item.embedding for item in data], dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise EmbeddingsError(f"{endpoint.describe()}: answered vectors of different sizes or non-numbers: {error}") from None
    if endpoint.dimension is not None and matrix.shape[1] != endpoint.dimension:
        raise EmbeddingsError(f"{endpoint.describe()}: answered {matrix.shape[1]}-dimensional vectors, but models.yaml declares dimension {endpoint.dimension}")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def _stored(folder: Path, wanted: set[str]) -> dict[str, np.ndarray]:
    """The cached vectors of the ``wanted`` text hashes."""
    found: dict[str, np.ndarray] = {}
    for path in sorted(folder.glob("*.npz")) if folder.is_dir() else []:
        with np.load(path) as stored:
            for row, text_hash in enumerate(stored["hashes"].tolist()):
                if text_hash in wanted:
                    found[text_hash] = stored["vectors"][row]
    return found


def _store(folder: Path, hashes: list[str], vectors: np.ndarray) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    name = uuid.uuid4().hex
    temporary = folder / f".{name}.tmp.npz"
    np.savez(temporary, hashes=np.asarray(hashes), vectors=vectors)
    os.replace(temporary, folder / f"{name}.npz")
