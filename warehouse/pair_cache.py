"""Cross-encoder [CLS] vectors of (query, node) pairs, kept on disk for sweeps over many methods.

Re2, GAR and FastInsight score mostly the same pairs, and a budget or alpha/beta sweep re-scores
nearly all of them again; on a 2-core CPU the cross-encoder is almost the whole cost. With
``graphlake eval --reuse-pairs`` each pair is encoded once per (model, corpus) and read back after
that, across methods and sessions. Results are those of a cold run (a vector does not depend on the
batch it was computed in, up to float rounding); latencies are not, so a reusing run's timings are
no query processing time.

Layout: ``<lake>/pair_cache/<corpus>/<stamp>/<query hash>.npz`` holding ``rows`` and ``features``.
The stamp names the reranker and the nodes it read (their write times); a new stamp drops the
corpus's older ones, whose rows or scores no longer hold. Files are replaced atomically, so a
killed run or two runs racing on one query lose at most a cache entry, never the cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

FOLDER = "pair_cache"


class PairCache:
    """``features(query, rows, compute)``: cached vectors, ``compute`` called for the missing rows only."""

    def __init__(self, home: Path, corpus: str, stamp: str) -> None:
        corpus_folder = Path(home) / FOLDER / corpus
        self.folder = corpus_folder / stamp
        if not self.folder.is_dir():
            if corpus_folder.is_dir():
                shutil.rmtree(corpus_folder)
            self.folder.mkdir(parents=True)
        self.hits = self.misses = 0

    def features(self, query: str, rows: np.ndarray, compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        path = self.folder / f"{hashlib.blake2b(query.encode(), digest_size=16).hexdigest()}.npz"
        known: dict[int, np.ndarray] = {}
        if path.is_file():
            with np.load(path) as saved:
                known = dict(zip(saved["rows"].tolist(), saved["features"], strict=True))
        rows = np.asarray(rows, dtype=np.int64)
        missing = np.array([r for r in dict.fromkeys(rows.tolist()) if r not in known], dtype=np.int64)
        self.hits += len(rows) - len(missing)
        self.misses += len(missing)
        if len(missing):
            known.update(zip(missing.tolist(), compute(missing), strict=True))
            self._write(path, known)
        return np.stack([known[r] for r in rows.tolist()]) if len(rows) else compute(rows)

    def _write(self, path: Path, known: dict[int, np.ndarray]) -> None:
        handle, temporary = tempfile.mkstemp(dir=self.folder, suffix=".npz.tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                np.savez(out, rows=np.fromiter(known, dtype=np.int64, count=len(known)), features=np.stack(list(known.values())))
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
