"""How a corpus's stored rows read as what the encoders and indexes take: a node's retrieval text, a
numeric Arrow column as numpy without a copy, the dense vectors as one matrix. Shared by the build
(assets) and the snapshot that serves them (``snapshot.py``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from graphlake.warehouse.storage import StorageError


def retrieval_texts(nodes: pa.Table, documents: pa.Table) -> list[str]:
    """``title + " " + text`` per node: the input every encoder and index sees (BEIR's convention)."""
    titles = dict(zip(documents.column("doc_id").to_pylist(), documents.column("title").to_pylist(), strict=True))
    return [retrieval_text(titles[doc_id], text) for doc_id, text in zip(nodes.column("doc_id").to_pylist(), nodes.column("text").to_pylist(), strict=True)]


def retrieval_text(title: str, text: str) -> str:
    """One node's ``title + " " + text``."""
    return f"{title} {text}".strip() if title else text


def numbers(array: pa.Array) -> np.ndarray:
    """A numeric Arrow array without nulls as a numpy view of its buffer: ``Array.to_numpy`` (and
    ``np.asarray``) import pandas, a tenth of a fresh query's CPU."""
    if array.null_count:
        raise StorageError("a stored vector holds a null: materialize the vectors again")
    dtype = np.dtype(array.type.to_pandas_dtype())
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


def dense_matrix(vectors: pa.Table, dimension: int) -> np.ndarray:
    """The dense vectors as one ``(nodes, dimension)`` float32 matrix (``dimension``: an empty table's)."""
    column = vectors.column("dense").combine_chunks()
    if len(column) == 0:
        return np.zeros((0, dimension), dtype=np.float32)
    return np.ascontiguousarray(numbers(column.flatten()).reshape(len(column), -1), dtype=np.float32)
