"""The encoders of one corpus's queries: its dense and SPLADE models as functions of texts and the
cross-encoder's pair features, each model resolved once per snapshot. What a ``Request`` is given to
encode its queries with (it holds this object, never the index set), and the one place that tells a
hosted model (an OpenAI-compatible endpoint) from a local one (ONNX Runtime for queries, torch for a
build's passages)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from graphlake.common.once import once
from graphlake.retrieval.index.snapshot import Snapshot
from graphlake.warehouse.encoder_specs import ModelSpec, Side

if TYPE_CHECKING:
    from graphlake.warehouse.pair_cache import PairCache


def dense_encoder(spec: ModelSpec, queries: bool = False, batch_size: int = 0, cache: Path | None = None, light: bool = False, model_cache: Path | None = None) -> Callable[[list[str]], np.ndarray]:
    """The dense model ``spec`` as one function of texts, resolved once (its folder, or its endpoint):
    its endpoint (answered batches kept in ``cache``), or locally ONNX Runtime for ``queries`` (its graphs
    exported into the lake's ``model_cache``) and torch for passages (``batch_size`` 0: the encoder's measured best);
    ``light``: passages through ONNX Runtime too (within 2e-7 of torch's vectors, without loading torch:
    a server's few pending passages)."""
    if spec.kind != "dense" or spec.tune:
        raise ValueError(f"model {spec.name!r} is a {spec.kind} model, not a dense one" if spec.tune is None else f"model {spec.name!r} is not tuned for this corpus yet")
    side: Side = "query" if queries else "passage"
    if spec.endpoint is not None:
        from graphlake.common.embeddings import embed

        settings = spec.endpoint_settings(side)
        # a query waits for one answer within the timeout, not a build's retries: the person asking is waiting
        encode = partial(embed, dataclasses.replace(settings, max_retries=0) if queries else settings, cache=cache)
    elif queries or light:
        from graphlake.kernels.text.query_encoders import encode_queries_dense

        if model_cache is None:
            raise ValueError(f"model {spec.name!r}: its ONNX query encoder needs the lake's model cache")

        encode = partial(encode_queries_dense, folder=spec.path(), cache=model_cache)
    else:
        from graphlake.common.settings import encoder_precision
        from graphlake.kernels.text.encoders import encode_dense as encode_passages

        encode = partial(encode_passages, batch_size=batch_size, dtype=encoder_precision(), folder=spec.path())
    prompt = spec.prompts().get(side)
    return encode if not prompt else lambda texts: encode([prompt + text for text in texts])


def encode_dense(spec: ModelSpec, texts: list[str], queries: bool = False, batch_size: int = 0, cache: Path | None = None, model_cache: Path | None = None) -> np.ndarray:
    """``texts`` encoded by the dense model ``spec`` (see :func:`dense_encoder`)."""
    return dense_encoder(spec, queries, batch_size, cache, model_cache=model_cache)(texts)


class QueryEncoders:
    """A snapshot's query-side encoders. ``reranker``: the index set's cross-encoder, asked for only by
    ``pair_features``; ``reuse_pairs``: read pair features back from the lake's pair cache
    (``graphlake eval --reuse-pairs``)."""

    def __init__(self, snapshot: Snapshot, reranker: Callable[[], Any], reuse_pairs: bool = False) -> None:
        self.snapshot, self._reranker, self._reuse_pairs = snapshot, reranker, reuse_pairs
        self._resolving = threading.Lock()
        self._dense: dict[bool, Callable[[list[str]], np.ndarray]] = {}
        self._pair_cache: PairCache | None | bool = False  # False: not opened yet

    def dense(self, texts: list[str]) -> np.ndarray:
        """Queries encoded by the corpus's dense model: ONNX for a local one, its endpoint for a hosted one."""
        return self._dense_model(light=False)(texts)

    def dense_passages(self, texts: list[str]) -> np.ndarray:
        """Passages encoded by the corpus's dense model without torch (a fresh segment's pending nodes)."""
        return self._dense_model(light=True)(texts)

    def splade(self, texts: list[str]) -> sp.csr_matrix:
        """Texts encoded by the corpus's SPLADE model, one row each (queries and passages alike)."""
        from graphlake.kernels.text.query_encoders import encode_queries_splade

        return encode_queries_splade(texts, self._splade_folder(), self.snapshot.models.cache)

    def pair_features(self, query: str, rows: np.ndarray) -> np.ndarray:
        """The cross-encoder's [CLS] vectors of (query, node row) pairs."""
        encoder, texts = self._reranker(), self.snapshot.texts()

        def compute(missing: np.ndarray) -> np.ndarray:
            return encoder.features(query, [texts[r] for r in missing])

        cache = self.pair_cache()
        return cache.features(query, rows, compute) if cache else compute(rows)

    def pair_cache(self) -> PairCache | None:
        """The lake's pair cache where these encoders reuse pairs, else None."""
        if self._pair_cache is False:
            with self._resolving:
                if self._pair_cache is False:
                    self._pair_cache = self._open_pair_cache() if self._reuse_pairs else None
        return self._pair_cache  # type: ignore[return-value]

    def _open_pair_cache(self) -> PairCache:
        from graphlake.warehouse.pair_cache import PairCache

        lake, corpus = self.snapshot.lake, self.snapshot.corpus
        stamp = f"{lake.artifact_written_at('reranker', {}):.6f}-{lake.written_at('nodes', {'corpus': corpus}):.6f}"
        return PairCache(lake.home, corpus, stamp)

    @once
    def _splade_folder(self) -> Path | None:
        return self.snapshot.models.spec("sparse").path()

    def _dense_model(self, light: bool) -> Callable[[list[str]], np.ndarray]:
        if light not in self._dense:
            with self._resolving:
                if light not in self._dense:
                    spec, cache = self.snapshot.models.spec("dense"), self.snapshot.models.cache
                    self._dense[light] = dense_encoder(spec, queries=not light, light=light, model_cache=cache)
        return self._dense[light]
