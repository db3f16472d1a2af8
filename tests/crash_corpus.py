"""The small corpus that is killed, written twice at once and edited: the crash tests and the
reliability probe (``benchmarks/reliability.py``) build the same one."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = "tiny"
ASSETS = ("documents", "queries", "qrels", "nodes", "contextual_edges", "dense_vectors", "bm25_index", "dense_hnsw_index", "run_bm25", "run_dense", "run_rrf")
SELECTION = " or ".join(f"key:{name}" for name in ASSETS)
METHODS = ("bm25", "dense", "dense_hnsw", "rrf")  # every method the selection builds what it reads for
TEXTS = {
    "d0": "The lighthouse keeper logged every storm on the northern cape.",
    "d1": "Tidal charts for the harbour were redrawn after the survey of 1911.",
    "d2": "A brass telescope was found in the keeper's cottage.",
    "d3": "Fishing boats sheltered in the bay during the winter gales.",
    "d4": "The survey ship mapped reefs south of the harbour.",
    "d5": "Storm warnings were raised with flags on the pier.",
}
# two documents changed, one removed, one added: everything downstream changes
EDITED = {**{k: v for k, v in TEXTS.items() if k != "d5"}, "d0": TEXTS["d0"] + " It burned whale oil.", "d2": "The cottage was sold.", "d9": "A new pier opened."}


def write_corpus(folder: Path, texts: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "docs.jsonl").write_text("".join(json.dumps({"id": i, "title": f"doc {i}", "text": t}) + "\n" for i, t in texts.items()))
    query = {"id": "q1", "text": "storm on the cape", "qrels": {next(iter(texts)): 1}}  # no split: held out, as `test`
    (folder / "queries.jsonl").write_text(json.dumps(query) + "\n")
