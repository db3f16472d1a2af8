"""The encoders' reduced precision (bfloat16 where the CPU does it natively): vectors agree with
float32's, and SPLADE's weights of a text do not depend on the batch it was encoded in. The query
encoders (ONNX graphs exported into a cache) give the passage encoders' float32 vectors, batch or not
(that a query imports no torch: test_cli_startup.py)."""

from __future__ import annotations

import numpy as np
import pytest

from graphlake.common.settings import ENCODER_PRECISION, encoder_precision
from graphlake.kernels.text import encoders, query_encoders

TEXTS = [
    "The lighthouse keeper logged every storm on the northern cape.",
    "Tidal charts for the harbour were redrawn after the survey of 1911.",
    "A brass telescope was found in the keeper's cottage, beside charts of reefs south of the harbour and a log of the gales of that winter.",
    "Storm warnings were raised with flags on the pier.",
]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_reduced_precision_vectors_agree_with_float32(monkeypatch):
    dense, splade = encoders.encode_dense(TEXTS, dtype="float32"), encoders.encode_splade(TEXTS, dtype="float32").toarray()
    one_by_one = np.vstack([encoders.encode_splade([text], dtype="float32").toarray() for text in TEXTS])
    np.testing.assert_allclose(one_by_one, splade, rtol=1e-3, atol=1e-5)  # a text's weights do not depend on its batch
    monkeypatch.setenv(ENCODER_PRECISION.name, "half")  # what the builds pass the encoders, checked where it is read
    with pytest.raises(ValueError, match="GRAPHLAKE_ENCODER_PRECISION='half': write one of auto, float32, bfloat16, float16"):
        encoder_precision()
    if encoders.precision("auto") == "float32":
        pytest.skip("this CPU has no native bfloat16: auto is float32 here")
    assert _cosines(encoders.encode_dense(TEXTS, dtype="auto"), dense).min() > 0.999
    assert _cosines(encoders.encode_splade(TEXTS, dtype="auto").toarray(), splade).min() > 0.999


def test_the_query_encoders_give_the_float32_vectors_whatever_the_batch(tmp_path):
    query_encoders._encoder.cache_clear()
    try:
        dense, splade = query_encoders.encode_queries_dense(TEXTS, None, tmp_path), query_encoders.encode_queries_splade(TEXTS, None, tmp_path)
        assert sorted(p.name for p in tmp_path.glob("*.onnx")) == sorted(query_encoders.graph_path(k, None, tmp_path).name for k in ("dense", "splade"))
        np.testing.assert_allclose(dense, encoders.encode_dense(TEXTS, dtype="float32"), atol=1e-6)
        np.testing.assert_allclose(splade.toarray(), encoders.encode_splade(TEXTS, dtype="float32").toarray(), atol=2e-5)
        encoder = query_encoders._encoder("dense", None, tmp_path)
        assert encoder.rows(TEXTS[:1])[0] is encoder.rows(TEXTS[:1])[0]  # a text met before is not encoded again
        query_encoders._encoder.cache_clear()  # one at a time, encoded anew
        np.testing.assert_allclose(np.vstack([query_encoders.encode_queries_dense([text], None, tmp_path) for text in TEXTS]), dense, atol=1e-6)
        one_by_one = [query_encoders.encode_queries_splade([text], None, tmp_path).toarray() for text in TEXTS]
        np.testing.assert_allclose(np.vstack(one_by_one), splade.toarray(), atol=1e-6)
    finally:
        query_encoders._encoder.cache_clear()  # the other tests' sessions read the default cache


def test_a_model_folder_of_ones_own_is_encoded_alike_at_build_and_query_time(tmp_path):
    """A sentence-transformers folder that pools by [CLS] (MiniLM's weights, its pooling config changed):
    the passages (sentence-transformers) and the queries (the exported graph) get the same unit vectors,
    which are not the packaged model's mean-pooled ones."""
    from conftest import cls_pooled_minilm
    from graphlake.kernels.text.model_files import pooling

    cache = tmp_path / "cache"
    folder = cls_pooled_minilm(tmp_path / "cls-minilm")
    assert pooling(folder) == "cls"
    try:
        passages, queries = encoders.encode_dense(TEXTS, dtype="float32", folder=folder), query_encoders.encode_queries_dense(TEXTS, folder, cache)
        np.testing.assert_allclose(queries, passages, atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)
        assert _cosines(passages, encoders.encode_dense(TEXTS, dtype="float32")).max() < 0.99  # another model's vectors
        assert query_encoders.graph_path("dense", folder, cache) != query_encoders.graph_path("dense", None, cache)
    finally:
        query_encoders._encoder.cache_clear()
