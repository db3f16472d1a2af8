"""Which queries a step reads: the evaluated split and sample, the gold of each, and the training
queries a learned index learns from (a corpus's ``train_corpus``, else its own ``train`` split; never
the evaluated ones), with the seeded share held out to choose a model on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.storage import LakeStorage, StorageError

TRAIN_SPLIT = "train"
SPLIT_PARAM = "query_split"  # in a run's params when it ran one split's queries only
SAMPLE_PARAM = "query_sample"  # and when it ran a seeded sample of that many of them


def select_queries(queries: pa.Table, split: str | None, sample: int | None) -> pa.Table:
    """The queries a run covers: the split's (every one if None), then, with ``sample``, that many of them
    drawn with seed 0 (all when there are fewer), in stored order. Slow methods (a cross-encoder over
    100 serialised candidates) are evaluated on such a sample on a CPU; its metrics say how many queries."""
    import pyarrow.compute as pc

    if split is not None:
        queries = queries.filter(pc.equal(queries.column("split"), split))
    if sample is None or sample >= queries.num_rows:
        return queries
    picked = np.sort(np.random.default_rng(0).choice(queries.num_rows, sample, replace=False))
    return queries.take(picked)


def gold_by_query(qrels: pa.Table, positive: bool = True) -> dict[str, dict[str, int]]:
    """Relevance per query and document; only relevant pairs unless ``positive`` is False."""
    gold: dict[str, dict[str, int]] = {}
    for row in qrels.select(["query_id", "doc_id", "relevance"]).to_pylist():
        if row["relevance"] > 0 or not positive:
            gold.setdefault(row["query_id"], {})[row["doc_id"]] = row["relevance"]
    return gold


def held_out(count: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(held-out positions, learning positions) of ``count`` items: a seeded ``share``, at least one."""
    order = np.random.default_rng(seed).permutation(count)
    cut = max(1, int(round(count * share)))
    return order[:cut], order[cut:]


def training_source(home: Path, corpus: str) -> tuple[str, str | None]:
    """Whose queries train GraphER's rankers for ``corpus``: (corpus, split to keep or None for all)."""
    spec = CorpusRegistry(home).get(corpus)
    if spec.train_corpus:
        CorpusRegistry(home).get(spec.train_corpus)  # fails clearly if undeclared
        return spec.train_corpus, None
    return corpus, TRAIN_SPLIT


def training_queries(lake: LakeStorage, corpus: str) -> tuple[str, list[dict]]:
    """(training corpus, its training queries as rows of ``queries``) for ``corpus``: all of its
    ``train_corpus``'s, else its own ``train`` split."""
    source, split = training_source(lake.home, corpus)
    rows = lake.read("queries", {"corpus": source}).to_pylist()
    return source, [row for row in rows if split is None or row["split"] == split]


def check_disjoint(lake: LakeStorage, corpus: str, source: str, queries: list[dict], learner: str) -> None:
    """Refuse to learn on a query the corpus is evaluated on: any of its queries, or outside its train
    split when it learns from itself."""
    if source == corpus:
        leaked = [row["query_id"] for row in queries if row["split"] != TRAIN_SPLIT]
    else:
        evaluated = set(lake.read("queries", {"corpus": corpus}).column("query_id").to_pylist())
        leaked = [row["query_id"] for row in queries if row["query_id"] in evaluated]
    if leaked:
        raise StorageError(f"{learner} for {corpus!r} would learn from its evaluated queries ({leaked[:3]}); check train_corpus in corpora.yaml")


def training_corpora(home: Path, corpus: str) -> list[str]:
    """The corpus whose queries train ``corpus``'s learned indexes, as a learned kind's sources."""
    return [training_source(home, corpus)[0]]


def alpha_source(home: Path, corpus: str) -> tuple[str, str | None]:
    """(corpus whose queries pick alpha, split or None for all): ``alpha_corpus``, else the training queries."""
    spec = CorpusRegistry(home).get(corpus)
    if spec.alpha_corpus:
        CorpusRegistry(home).get(spec.alpha_corpus)
        return spec.alpha_corpus, None
    return training_source(home, corpus)


def graph_ranker_sources(home: Path, corpus: str) -> list[str]:
    """The corpora GraphER's rankers for ``corpus`` learn from (training, then alpha queries)."""
    return list(dict.fromkeys([training_source(home, corpus)[0], alpha_source(home, corpus)[0]]))


def has_train_queries(lake: LakeStorage, corpus: str) -> bool:
    if not lake.has("queries", {"corpus": corpus}):
        return False
    return TRAIN_SPLIT in set(lake.read("queries", {"corpus": corpus}).column("split").to_pylist())


def reranker_sources(home: Path) -> list[str]:
    """The corpora the lake's cross-encoder learns from by default: every declared one with train queries."""
    lake = LakeStorage(home)
    return [name for name in CorpusRegistry(home).all() if has_train_queries(lake, name)]
