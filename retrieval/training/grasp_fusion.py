"""GRASP's Stage-2 tuning (App. A): for every declared ``plan_rrf`` with ``mode: tuned``, the paper's whole
static and dynamic grids scored on validation queries, and the best setting by Hit@1 stored per corpus
(the ``grasp_fusion`` index).

Validation queries come from the corpus's ``train_corpus`` (all its queries) or, when none is declared,
the corpus's own ``train`` split: a seeded 20 % of them. The other 80 % is what GRASP's reranker trains
on. The evaluated corpus's queries are never read: the artefact records the validation ids, and
learning refuses to go on if one of them is a query of the evaluated corpus outside its train split.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from graphlake.kernels.eval.metrics import recall_at_k
from graphlake.kernels.plan.fusion import ValidationQuery, fuse_stage2, search_grid
from graphlake.retrieval.core import Op
from graphlake.retrieval.learned_kinds import open_index_set, tuned_fusions
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.grasp_fusion import DEFAULT_CHOICE, TunedFusion
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.queries import check_disjoint, gold_by_query, held_out, training_queries
from graphlake.warehouse.storage import LakeStorage, StorageError


def validation_queries(lake: LakeStorage, corpus: str, share: float, seed: int) -> tuple[str, list[dict], list[dict]]:
    """(training corpus, validation queries, reranker-training queries) for ``corpus``; each query a row of ``queries``."""
    source, rows = training_queries(lake, corpus)
    if not rows:
        return source, [], []
    validation, learning = held_out(len(rows), share, seed)
    return source, [rows[i] for i in sorted(validation)], [rows[i] for i in sorted(learning)]


def gold_rows(lake: LakeStorage, corpus: str, indexes: LakeIndexSet) -> dict[str, set[int]]:
    """Query id -> the node rows of its gold documents (every node of a gold document counts)."""
    by_doc: dict[str, list[int]] = {}
    for row, doc_id in enumerate(indexes.snapshot.doc_ids().tolist()):
        by_doc.setdefault(doc_id, []).append(row)
    return {q: {r for doc in docs for r in by_doc.get(doc, ())} for q, docs in gold_by_query(lake.read("qrels", {"corpus": corpus})).items()}


def learn(lake: LakeStorage, corpus: str, config: Any, log: Callable[[str], None]) -> tuple[TunedFusion, dict]:
    """Tune every declared tuned fusion for ``corpus``; the artefact and the metadata to show."""
    started = time.perf_counter()
    methods = load_methods(lake.home)
    fusions = tuned_fusions(methods)
    source, validation, _ = validation_queries(lake, corpus, config.validation_share, config.seed)
    if not validation or not fusions:
        reason = "no plan_rrf is declared with mode: tuned" if not fusions else f"corpus {source!r} has no training queries"
        log(f"grasp_fusion: {reason}; tuned fusions use {DEFAULT_CHOICE}")
        return TunedFusion({}, {"default": reason, "untuned": dict.fromkeys(fusions, reason)}), {"tuned": False, "reason": reason}
    check_disjoint(lake, corpus, source, validation, "grasp_fusion")
    indexes = open_index_set(lake, source)
    gold_docs = gold_by_query(lake.read("qrels", {"corpus": source}))
    gold = gold_rows(lake, source, indexes)
    choices, report = {}, {"train_corpus": source, "validation_queries": [q["query_id"] for q in validation], "fusions": {}, "untuned": {}}
    for name, op in fusions.items():
        graph, partner = op.inputs
        try:
            items = [_validation_query(graph, partner, query, gold, indexes) for query in validation]
        except StorageError as error:  # e.g. an oracle SKB the training corpus lacks: that method cannot run here, the others can
            report["untuned"][name] = f"on {source!r}: {error}"
            log(f"grasp_fusion: a fusion cannot be tuned {report['untuned'][name]}")
            continue
        searched = time.perf_counter()
        found = search_grid(items)
        seconds = time.perf_counter() - searched
        best = found.static if found.mode == "static" else found.dynamic
        choices[name] = {"mode": found.mode, **{m: {k: v for k, v in s.items() if k != "hits"} for m, s in (("static", found.static), ("dynamic", found.dynamic))}}
        report["fusions"][name] = found.as_json() | {
            "grid_seconds": round(seconds, 3),
            "table2": _table2(items, found, indexes, gold_docs, validation),
            "partner_hits": sum(bool(len(q.partner)) and int(q.partner[0]) in q.gold for q in items),
        }
        log(f"grasp_fusion: {found.mode} chosen, validation Hit@1 {best['hits']}/{len(items)} ({seconds:.2f} s for {sum(found.settings.values())} settings)")
    summary = {"tuned": True, "train_corpus": source, "validation_queries": len(validation), "seconds": round(time.perf_counter() - started, 1)}
    return TunedFusion(choices, report), summary


def _validation_query(graph: Op, partner: Op, query: dict, gold: dict, indexes: LakeIndexSet) -> ValidationQuery:
    g, p = graph.run(query["text"], indexes), partner.run(query["text"], indexes)
    return ValidationQuery(g.rows, p.rows, frozenset(gold.get(query["query_id"], ())), bool(g.meta.get("valid", True)), int(g.meta.get("n_cand", len(g.rows))), g.meta.get("risk_level", "normal"))


def _table2(items: list[ValidationQuery], found, indexes: LakeIndexSet, gold_docs, validation) -> dict:
    """Validation Hit@1 and R@20 (documents) of the best static and the best dynamic setting (the paper's Table 2)."""
    doc_ids = indexes.snapshot.doc_ids()
    out = {}
    for mode, setting in (("static", found.static), ("dynamic", found.dynamic)):
        recalls = []
        for item, query in zip(items, validation, strict=True):
            meta = {"valid": item.valid, "n_cand": item.n_cand, "risk_level": item.risk_level}
            rows = fuse_stage2(item.graph, item.partner, meta, mode, setting).rows
            ranking = list(dict.fromkeys(doc_ids[rows].tolist()))
            recalls.append(recall_at_k(ranking, gold_docs.get(query["query_id"], {}), 20))
        out[mode] = {"hit@1": setting["hits"] / len(items), "recall@20": float(np.mean(recalls))}
    return out
