"""One result vocabulary from the kernels up (``kernels/results.py``): every search kernel is found in
the source and declared to return a ``Ranking``; each one that runs on the CPU is run on a small index
with ties and a short list, and answers ``(scores, rows)`` of shape (queries, k), float64 scores, best
first, ties to the lower row, the fill (−inf, −1) last; one query's candidates keep that order and
dtype. Reciprocal-rank fusion is defined once."""

from __future__ import annotations

import ast
import re
import tokenize
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import synthetic
from graphlake.kernels.results import FILL_ROW, FILL_SCORE, Allowed, Ranking, SearchParams, top_k

pytestmark = pytest.mark.fast
ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels", "retrieval", "api", "assets", "warehouse", "pipelines", "cli", "common")


def search_kernels() -> list[str]:
    """Every search kernel: a ``search`` method or a top-level search function of ``kernels/`` that
    takes queries and ``k`` (the batched device walk, which answers device arrays, is the hybrid
    searchers' inside)."""
    found = []
    for path in sorted((ROOT / "kernels").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and {"k"} <= {a.arg for a in node.args.args} and (node.name == "search" or node.name in {"exact_dense", "exact_sparse", "hnsw"}):
                if path.name == "batched.py":
                    continue
                found.append(f"{path.relative_to(ROOT)}:{node.name}:{ast.unparse(node.returns) if node.returns else None}")
    return found


def test_every_search_kernel_is_declared_to_return_a_ranking():
    kernels = search_kernels()
    assert len(kernels) >= 6, kernels  # BM25, exact dense, exact SPLADE, HNSW, the hybrid graph's CPU and CUDA searchers
    assert [k for k in kernels if not k.endswith(":Ranking")] == []


def check(ranking: Ranking, queries: int, k: int, ties: bool = True) -> None:
    """``ties``: ties to the lower row (BM25's and HNSW's lists keep their library's order of ties)."""
    assert isinstance(ranking, Ranking) and ranking.scores.shape == ranking.rows.shape == (queries, k)
    assert ranking.scores.dtype == np.float64 and ranking.rows.dtype == np.int64
    for scores, rows in zip(*ranking, strict=True):
        real = rows != FILL_ROW
        assert not (real[1:] & ~real[:-1]).any(), "the fill comes last"
        assert (scores[~real] == FILL_SCORE).all()
        kept = list(zip(-scores[real], rows[real], strict=True)) if ties else [(-score,) for score in scores[real]]
        assert kept == sorted(kept), "best first, ties to the lower row"


def test_each_cpu_kernel_answers_in_the_vocabulary():
    import faiss

    from graphlake.kernels.hybrid.graph_index import BuildConfig, Searcher, build
    from graphlake.kernels.hybrid.vectors import HybridParams
    from graphlake.kernels.text.bm25 import BM25Index
    from graphlake.kernels.text.vector_search import HNSWParams, exact_dense, exact_sparse, hnsw

    texts = ["red fox", "red fox", "blue whale", "red fox den", "grey whale", "red fox"]  # three exact ties
    bm25 = BM25Index.build(texts)
    for params in (SearchParams(), SearchParams(Allowed(np.array([True, False, True, True, True, True]), np.array([0, 2, 3, 4, 5]), "x"))):
        found = bm25.search(["red fox", "whale", "absent"], 5, params)
        check(found, 3, 5, ties=False)
        assert sorted(found.rows[0, :3].tolist()) == ([0, 1, 5] if params.allowed is None else [0, 3, 5])
        assert (found.rows[2] == FILL_ROW).all()
    dense = np.array([[1, 0], [1, 0], [0, 1], [0.6, 0.8], [1, 0]], np.float32)
    check(found := exact_dense(dense, np.array([[1, 0]], np.float32), 7), 1, 7)
    assert found.rows[0, :3].tolist() == [0, 1, 4]
    check(exact_sparse(sp.csc_matrix(dense), sp.csr_matrix(np.array([[0, 1]], np.float32)), 4), 1, 4)
    index = faiss.IndexHNSWFlat(2, 8, faiss.METRIC_INNER_PRODUCT)
    index.add(dense)
    check(found := hnsw(index, np.array([[1, 0]], np.float32), 4, HNSWParams()), 1, 4, ties=False)
    assert sorted(found.rows[0, :3].tolist()) == [0, 1, 4]
    vectors, nodes = synthetic(200, seed=3)
    searcher = Searcher(build(vectors, nodes, BuildConfig()), vectors)
    check(searcher.search(nodes.take(np.arange(4)), 10, HybridParams(weights=np.ones(3), pool=40)), 4, 10)


def test_candidates_keep_the_kernels_order_and_dtype():
    from graphlake.retrieval.core import Candidates, ranked, unfill

    scores = np.array([[3.0, 2.0, 2.0, FILL_SCORE]], np.float32)
    (one,) = unfill(scores, np.array([[5, 1, 4, FILL_ROW]]))
    assert one.rows.tolist() == [5, 1, 4] and one.scores.dtype == np.float64
    assert ranked(scores=np.array([1.0, 1.0, 2.0]), rows=np.array([9, 2, 7]), k=3).rows.tolist() == [7, 2, 9]
    rows, tied = np.arange(40)[::-1].copy(), np.ones(40)  # ties across the k-th place go to the lower rows too
    assert ranked(scores=tied, rows=rows, k=5).rows.tolist() == [0, 1, 2, 3, 4]
    assert top_k(np.ones((1, 1000)), 3).rows.tolist() == [[0, 1, 2]]  # the kernels' top k keeps the rule too
    levels = np.random.default_rng(7).integers(0, 3, 2000).astype(np.float64)
    assert top_k(levels[None], 5).rows[0].tolist() == np.flatnonzero(levels == 2)[:5].tolist()
    with pytest.raises(TypeError):
        Candidates(np.zeros(0), np.zeros(0, np.int64))  # by keyword only: (rows, scores) can no longer be swapped


def code_lines(path: Path) -> list[tuple[int, str]]:
    """The file's lines of code, strings and comments left out (a docstring may state the formula)."""
    kept: dict[int, str] = {}
    with path.open("rb") as handle:
        for token in tokenize.tokenize(handle.readline):
            if token.type not in (tokenize.STRING, tokenize.COMMENT, tokenize.ENCODING):
                kept[token.start[0]] = kept.get(token.start[0], "") + " " + token.string
    return sorted(kept.items())


def test_reciprocal_rank_fusion_is_defined_once():
    term = re.compile(r"/ \( (self \. )?\w*constant \+ [\w.\[\] ]*rank")  # weight / (constant + rank), as tokens
    sources = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    found = [str(p.relative_to(ROOT)) for p in sources for _, line in code_lines(p) if term.search(line)]
    assert found == ["kernels/fusion.py"], found
    ranking_code = [p for p in sources if p.relative_to(ROOT).parts[0] in ("kernels", "retrieval", "api")]  # elsewhere 60.0 is a timeout
    constants = [str(p.relative_to(ROOT)) for p in ranking_code for _, line in code_lines(p) if re.search(r"\b60\.0?\b", line)]
    assert constants == ["kernels/fusion.py"], constants


def test_fusion_sums_terms_in_order_and_skips_a_zero_weight():
    from graphlake.kernels.fusion import reciprocal_rank, rrf_term

    scores, rows = reciprocal_rank([np.array([3, 1, 2]), np.array([1, 9])], [1.0, 2.0], constant=1.0)
    assert rows.tolist() == [1, 9, 3, 2] and scores[0] == rrf_term(2, 1.0, 1.0) + rrf_term(1, 2.0, 1.0)
    assert reciprocal_rank([np.array([3]), np.array([4])], [1.0, 0.0])[1].tolist() == [3]


@pytest.mark.fast
def test_a_method_that_searches_every_row_loses_the_rows_of_pending_deletes():
    """The fresh segment masks the snapshot's nodes of documents deleted or rewritten since; a method whose
    operators search every row (FastInsight, GAR) has what it returns of them dropped, in its order."""
    from graphlake.retrieval.core import Candidates, masked

    mask = np.array([True, False, True, True, False])
    allowed = Allowed(mask, np.flatnonzero(mask), "pending")
    found = Candidates(scores=np.array([0.9, 0.8, 0.7, 0.1]), rows=np.array([4, 2, 1, 0]))
    kept = masked(found, allowed)
    assert kept.rows.tolist() == [2, 0] and kept.scores.tolist() == [0.8, 0.1]
    assert masked(found, None) is found
