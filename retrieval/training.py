"""What the learned indexes (the cross-encoder reranker, GraphER's graph rankers) share: which corpora
teach them, the seeded share of training queries they hold out to choose a model on, and what they
store when there is nothing to learn from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.storage import Lake

TRAIN_SPLIT = "train"
UNTRAINED_FILE = "untrained.json"


@dataclass(frozen=True)
class Untrained:
    """A learned index its asset had no training queries for (a user's own corpus, a lake without
    any): stored in its place, so the methods that read it fall back to a documented default and say
    why, and the asset is not retried on every query."""

    reason: str

    def save(self, folder: Path) -> None:
        (folder / UNTRAINED_FILE).write_text(json.dumps({"reason": self.reason}), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> Untrained | None:
        """The marker in ``folder``, None when the folder holds a trained index."""
        path = folder / UNTRAINED_FILE
        return cls(json.loads(path.read_text(encoding="utf-8"))["reason"]) if path.is_file() else None


def held_out(count: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(held-out positions, learning positions) of ``count`` items: a seeded ``share``, at least one."""
    order = np.random.default_rng(seed).permutation(count)
    cut = max(1, int(round(count * share)))
    return order[:cut], order[cut:]


def training_queries(home: Path, corpus: str) -> tuple[str, str | None]:
    """Whose queries train GraphER's rankers for ``corpus``: (corpus, split to keep or None for all)."""
    spec = CorpusRegistry(home).get(corpus)
    if spec.train_corpus:
        CorpusRegistry(home).get(spec.train_corpus)  # fails clearly if undeclared
        return spec.train_corpus, None
    return corpus, TRAIN_SPLIT


def alpha_queries(home: Path, corpus: str) -> tuple[str, str | None]:
    """(corpus whose queries pick alpha, split or None for all): ``alpha_corpus``, else the training queries."""
    spec = CorpusRegistry(home).get(corpus)
    if spec.alpha_corpus:
        CorpusRegistry(home).get(spec.alpha_corpus)
        return spec.alpha_corpus, None
    return training_queries(home, corpus)


def graph_ranker_sources(home: Path, corpus: str) -> list[str]:
    """The corpora GraphER's rankers for ``corpus`` learn from (training, then alpha queries)."""
    return list(dict.fromkeys([training_queries(home, corpus)[0], alpha_queries(home, corpus)[0]]))


def has_train_queries(lake: Lake, corpus: str) -> bool:
    if not lake.has("queries", {"corpus": corpus}):
        return False
    return TRAIN_SPLIT in set(lake.read("queries", {"corpus": corpus}).column("split").to_pylist())


def reranker_sources(home: Path) -> list[str]:
    """The corpora the lake's cross-encoder learns from by default: every declared one with train queries."""
    lake = Lake(home)
    return [name for name in CorpusRegistry(home).all() if has_train_queries(lake, name)]
