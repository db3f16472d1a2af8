"""The cross-encoder the pipeline trains for itself (no pretrained one can be had offline).

One model for the whole lake, fine-tuned from the packaged all-MiniLM-L6-v2 weights on the
``train``-split queries of the chosen corpora (all declared corpora by default), never on any other
split. Each gold document of a training query gives a group (multi-hop questions have two or more):
its best node (by dense score, for chunked documents) against hard negatives mined from the
project's BM25 and dense retrievers (their top ``mine_depth`` minus every gold document). A seeded
share of the training queries is held out: the model kept is the one with the best nDCG@10 when
reranking their dense top ``validation_depth``, and the report sets that against dense retrieval on
the same queries. The defaults fit a 45-minute budget on a 2-core CPU (a few thousand groups, about
one epoch); a GPU gets through more epochs in the same budget.

Training is skipped when the training queries, their corpora's nodes and the config are those the
current model was trained on, so reindexing a corpus does not retrain for nothing.
"""

import hashlib
import json
import time
from dataclasses import asdict, dataclass

import numpy as np
from dagster import AssetExecutionContext, AssetKey, Config, MetadataValue, asset

from graphlake.assets.retrieval import LakeIndexes, load_methods
from graphlake.kernels.encoders import DENSE_MODEL
from graphlake.kernels.cross_encoder import TRAINING_FILE, CrossEncoder, Group, reranked_ndcg, train
from graphlake.kernels.metrics import ndcg_at_k
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.storage import Lake, StorageError

TRAIN_SPLIT = "train"


class RerankerConfig(Config):
    corpora: list[str] = []  # whose train-split queries teach; empty: every declared corpus that has some
    negatives: int = 7  # hard negatives per group
    mine_depth: int = 30  # negatives come from each miner's top this many
    miners: list[str] = ["bm25", "dense"]  # methods (pipelines/methods.yaml) that mine them
    max_queries_per_corpus: int = 0  # a seeded sample of each corpus's train queries; 0: all
    validation_share: float = 0.05
    validation_depth: int = 30  # reranking depth of the held-out queries' dense ranking
    learning_rate: float = 1e-4
    groups_per_step: int = 4
    epochs: int = 2
    budget_minutes: float = 45.0  # training stops here even mid-epoch and anneals to it; the best checkpoint is kept
    validate_every: int = 100
    max_tokens: int = 192  # query + passage, in training and in use
    seed: int = 0


@dataclass(frozen=True)
class TrainingQuery:
    corpus: str
    query_id: str
    text: str
    gold: frozenset[str]  # relevant doc ids


@asset(
    group_name="retrieval",
    deps=[AssetKey(name) for name in ("nodes", "queries", "qrels", "bm25_index", "dense_vectors")],
)
def reranker(context: AssetExecutionContext, config: RerankerConfig, lake: LakeResource) -> None:
    """A cross-encoder fine-tuned on the lake's training queries, stored with its curve and validation."""
    store = lake.lake
    corpora = config.corpora or [name for name in CorpusRegistry(store.home).all() if _has_train_queries(store, name)]
    queries = training_queries(store, corpora, config.max_queries_per_corpus, config.seed)
    if len(queries) < 2:
        raise StorageError(f"reranker: need at least 2 train-split queries with gold in {corpora}, found {len(queries)}")
    fingerprint = _fingerprint(store, queries, config)
    current = reranker_report(store)
    if current and current.get("fingerprint") == fingerprint:
        context.log.info("reranker: training data and config unchanged; keeping the current model")
        context.add_output_metadata({"retrained": False, **_headline(current)})
        return
    data = mine(store, corpora, queries, config)
    encoder = CrossEncoder.initial(config.max_tokens, config.seed)
    report = train(
        encoder,
        data.groups,
        lambda model: reranked_ndcg(model, data.validation),
        learning_rate=config.learning_rate,
        groups_per_step=config.groups_per_step,
        epochs=config.epochs,
        budget_seconds=config.budget_minutes * 60,
        validate_every=config.validate_every,
        seed=config.seed,
    )
    summary = {
        "fingerprint": fingerprint,
        "corpora": corpora,
        **data.summary(corpora),
        "config": config.model_dump(),
        "training": asdict(report),
    }
    store.write_artifact("reranker", {}, lambda folder: encoder.save(folder, summary))
    context.add_output_metadata(
        {"retrained": True, **_headline(summary), "curve": MetadataValue.json(report.curve)}
    )


@dataclass(frozen=True)
class TrainingData:
    """What training reads: groups from the learning queries, dense top lists of the held-out ones."""

    learn: list[TrainingQuery]
    held_out: list[TrainingQuery]
    groups: list[Group]
    validation: list[dict]  # validation_item per held-out query
    seconds: float  # spent mining

    def summary(self, corpora: list[str]) -> dict:
        return {
            "training_queries": {c: sum(q.corpus == c for q in self.learn) for c in corpora},
            "validation_queries": {c: sum(q.corpus == c for q in self.held_out) for c in corpora},
            "validation_dense_ndcg@10": float(np.mean([item["dense_ndcg"] for item in self.validation])),
            "mining_seconds": self.seconds,
        }


def mine(store: Lake, corpora: list[str], queries: list[TrainingQuery], config: RerankerConfig) -> TrainingData:
    """Hold out a seeded share of ``queries``, mine the rest's groups and the held-out queries' dense lists."""
    started = time.perf_counter()
    order = np.random.default_rng(config.seed).permutation(len(queries))
    cut = max(1, int(round(len(queries) * config.validation_share)))
    held_out, learn = [queries[i] for i in order[:cut]], [queries[i] for i in order[cut:]]
    methods, _ = load_methods(store.home)
    indexes = {corpus: _indexes(store, corpus) for corpus in corpora}
    groups = [g for q in learn for g in training_groups(q, indexes[q.corpus], methods, config)]
    validation = [validation_item(q, indexes[q.corpus], methods, config.validation_depth) for q in held_out]
    return TrainingData(learn, held_out, groups, validation, time.perf_counter() - started)


def _headline(summary: dict) -> dict:
    training = summary["training"]
    return {
        "groups": training["groups"],
        "steps": training["steps"],
        "train_seconds": round(training["seconds"], 1),
        "validation_ndcg@10": round(training["best_validation"], 4),
        "validation_ndcg@10_untrained": round(training["initial_validation"], 4),
        "validation_dense_ndcg@10": round(summary["validation_dense_ndcg@10"], 4),
    }


def _has_train_queries(lake: Lake, corpus: str) -> bool:
    if not lake.has("queries", {"corpus": corpus}):
        return False
    return TRAIN_SPLIT in set(lake.read("queries", {"corpus": corpus}).column("split").to_pylist())


def training_queries(lake: Lake, corpora: list[str], max_per_corpus: int, seed: int) -> list[TrainingQuery]:
    """Every train-split query with relevant gold of each corpus, sampled down to ``max_per_corpus`` (seeded)."""
    found = []
    for corpus in corpora:
        partition = {"corpus": corpus}
        gold: dict[str, set[str]] = {}
        for row in lake.read("qrels", partition).to_pylist():
            if row["relevance"] > 0:
                gold.setdefault(row["query_id"], set()).add(row["doc_id"])
        rows = [r for r in lake.read("queries", partition).to_pylist() if r["split"] == TRAIN_SPLIT and r["query_id"] in gold]
        if max_per_corpus and len(rows) > max_per_corpus:
            keep = np.sort(np.random.default_rng(seed).choice(len(rows), max_per_corpus, replace=False))
            rows = [rows[i] for i in keep]
        found += [TrainingQuery(corpus, r["query_id"], r["text"], frozenset(gold[r["query_id"]])) for r in rows]
    return found


def _indexes(lake: Lake, corpus: str) -> LakeIndexes:
    """The training corpus's indexes; the miners need its BM25 index and dense vectors built."""
    missing = [name for name, when in (("bm25_index", lake.artifact_written_at("bm25", {"corpus": corpus})),
                                        ("dense_vectors", lake.written_at("vectors", {"corpus": corpus, "model": DENSE_MODEL})))
               if when is None]
    if missing:
        raise StorageError(
            f"reranker: training corpus {corpus!r} lacks {' and '.join(missing)}; "
            f"run: graphlake materialize --corpus {corpus} --select '{' or '.join('key:' + m for m in missing)}'"
        )
    nodes = lake.read("nodes", {"corpus": corpus})
    return LakeIndexes(lake, corpus, nodes.column("node_id").to_pylist())


def training_groups(query: TrainingQuery, indexes: LakeIndexes, methods: dict, config: RerankerConfig) -> list[Group]:
    """One group per gold document in the corpus: its best node against the miners' best non-gold nodes
    (round-robin, no repeats; the same negatives for every gold document of the query)."""
    texts, docs = indexes.texts(), indexes.doc_ids()
    dense = indexes.dense() @ indexes.encode_dense(query.text)
    positives = []
    for doc in sorted(query.gold):
        rows = np.flatnonzero(docs == doc)
        if rows.size:
            positives.append(int(rows[np.argmax(dense[rows])]))
    if not positives:
        return []
    ranked_lists = []
    for miner in config.miners:
        rows = methods[miner].run(query.text, indexes, methods).rows[: config.mine_depth]
        ranked_lists.append([int(r) for r in rows if docs[r] not in query.gold])
    negatives: list[int] = []
    for position in range(config.mine_depth):
        for rows in ranked_lists:
            if position < len(rows) and rows[position] not in negatives and len(negatives) < config.negatives:
                negatives.append(rows[position])
    if not negatives:
        return []
    return [Group(query.text, texts[positive], tuple(texts[r] for r in negatives)) for positive in positives]


def validation_item(query: TrainingQuery, indexes: LakeIndexes, methods: dict, depth: int) -> dict:
    """A held-out query's dense top ``depth`` (node texts and doc ids) and dense's own nDCG@10 on it."""
    rows = methods["dense"].run(query.text, indexes, methods).rows[:depth] if "dense" in methods else np.zeros(0, int)
    docs = [indexes.doc_ids()[r] for r in rows]
    gold = {doc: 1 for doc in query.gold}
    return {
        "query": query.text,
        "texts": [indexes.texts()[r] for r in rows],
        "docs": docs,
        "gold": gold,
        "dense_ndcg": ndcg_at_k(list(dict.fromkeys(docs)), gold, 10),
    }


def _fingerprint(lake: Lake, queries: list[TrainingQuery], config: RerankerConfig) -> str:
    """What a model was trained from: config, query ids and texts, and when each corpus's nodes were written."""
    corpora = sorted({q.corpus for q in queries})
    content = {
        "config": config.model_dump(),
        "queries": sorted((q.corpus, q.query_id, q.text, sorted(q.gold)) for q in queries),
        "nodes": {c: lake.written_at("nodes", {"corpus": c}) for c in corpora},
    }
    return hashlib.blake2b(json.dumps(content, sort_keys=True).encode(), digest_size=16).hexdigest()


def reranker_report(lake: Lake) -> dict | None:
    """The current model's training report (``training.json``), None before the first training."""
    try:
        folder = lake.artifact("reranker", {})
    except StorageError:
        return None
    path = folder / TRAINING_FILE
    return json.loads(path.read_text()) if path.is_file() else None
