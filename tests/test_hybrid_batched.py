"""The batched array path of the hybrid graph index (G11), on numpy here and on cupy where a GPU is:
the same k-NN lists, the same pruned graph (byte for byte) as the numba build, the same search results
as the numba search, and exact fused scores equal to the scipy reference."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import noisy_queries, synthetic, walk_one, with_near_copies
from graphlake.kernels.hybrid import batched
from graphlake.kernels.hybrid.graph_index import BuildConfig, Searcher, build, exact_knn, prune_candidates, self_inner_products
from graphlake.kernels.hybrid.nndescent import nn_descent
from graphlake.kernels.hybrid.pairs import row_operands


def _cuda_ready() -> str:
    """Why the cupy runs cannot happen here ('' when they can)."""
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
        cupy.zeros(1).sum()
    except Exception as error:  # noqa: BLE001 - any failure means no usable GPU
        return f"no cupy with a CUDA device here ({type(error).__name__}: {error})"
    return ""


def same_up_to_ties(found: np.ndarray, expected: np.ndarray, scores: np.ndarray, tolerance: float = 1e-5) -> None:
    """Two top lists (−1: no candidate) name candidates of the same scores rank by rank (within float rounding),
    and differ only where the expected list's scores tie at that rank."""
    assert ((found >= 0) == (expected >= 0)).all()
    rows = np.arange(len(found))[:, None]
    mine, theirs = (np.where(ids >= 0, scores[rows, np.maximum(ids, 0)], 0.0) for ids in (found, expected))
    np.testing.assert_allclose(mine, theirs, atol=tolerance)
    assert (found != expected).mean() < 0.05  # ties are a few: not a different ranking


DEVICES = [pytest.param("numpy"), pytest.param("cuda", marks=pytest.mark.skipif(bool(_cuda_ready()), reason=_cuda_ready() or "cuda"))]


@pytest.mark.parametrize("device", DEVICES)
def test_the_batched_build_is_the_numba_build(device):
    xp = batched.array_module(device)
    vectors, nodes = with_near_copies(*synthetic(450, seed=3), copies=50)  # 500 nodes
    scales = vectors.calibration(nodes)
    on_device = batched.DeviceVectors.of(xp, vectors)
    expected = exact_knn(vectors, nodes, scales, 64, 16)
    found = batched.exact_knn(on_device, nodes, scales, 64, 16)
    # the same lists up to the order of candidates that score alike: a node and its near copy share a dense
    # vector, and their scores differ by float rounding, whose direction the BLAS of the machine decides
    parts = [batched.host(part) for part in batched.path_scores(on_device, batched.QueryBatch.of(xp, nodes, np.ones(3)))]
    fused = sum(np.float32(scale) * part for scale, part in zip(scales, parts, strict=True))
    same_up_to_ties(found[0], expected[0], fused)
    for path, part in enumerate(parts):
        same_up_to_ties(found[2][path], expected[2][path], part)
    np.testing.assert_allclose(found[1], expected[1], rtol=1e-6, atol=1e-6)
    knn_ids, knn_sims, _ = expected
    self_ip = self_inner_products(vectors, nodes, scales)
    numba = prune_candidates(knn_ids, knn_sims, self_ip, 32, 8, *row_operands(vectors, nodes, scales))
    vectorised = batched.prune(on_device, nodes.lexical, scales, knn_ids, knn_sims, self_ip, 32, 8)
    for left, right in zip(numba, vectorised, strict=True):  # from the same lists: byte-identical arrays
        assert left.dtype == right.dtype and left.tobytes() == right.tobytes()
    for steps in ((True, False), (False, True)):  # the ablations: detour order only, IP rule only
        ablated = prune_candidates(knn_ids, knn_sims, self_ip, 32, 8, *row_operands(vectors, nodes, scales), *steps)
        for left, right in zip(ablated, batched.prune(on_device, nodes.lexical, scales, knn_ids, knn_sims, self_ip, 32, 8, *steps), strict=True):
            assert left.tobytes() == right.tobytes(), steps
        assert ablated[0].tobytes() != numba[0].tobytes()
    assert (prune_candidates(knn_ids, knn_sims, self_ip, 32, 8, *row_operands(vectors, nodes, scales), True, False)[1] == 32).all()  # no IP rule: lists fill up
    assert (numba[2] >= 0).sum() > 0 and (numba[0] != knn_ids[:, :32]).any()  # keyword edges recycled, lists reordered and cut
    whole, whole_batched = build(vectors, nodes, BuildConfig()), build(vectors, nodes, BuildConfig(device=device))
    assert whole.entry.tobytes() == whole_batched.entry.tobytes()
    for name in ("semantic", "keyword"):  # the same graph but where the kNN's tied candidates came in another order
        assert (getattr(whole, name) != getattr(whole_batched, name)).mean() < 0.03, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weights", [(1, 1, 1), (1, 0, 0), (0, 1, 0), (0, 0, 1), (0.3, 0.7, 0)])
def test_the_batched_search_is_the_numba_search(device, weights):
    xp = batched.array_module(device)
    vectors, nodes = synthetic(1500, seed=5)
    graph = build(vectors, nodes, BuildConfig())
    graph.deleted[np.random.default_rng(7).choice(1500, 150, replace=False)] = True  # 10 % mark-deleted
    queries = noisy_queries(nodes, 120, seed=6)
    scaled = np.asarray(weights, dtype=np.float64) * graph.scales
    on_device = batched.DeviceVectors.of(xp, vectors)
    batch = batched.QueryBatch.of(xp, queries, scaled)
    index = batched.DeviceGraph.of(xp, graph.semantic, graph.entry, graph.deleted)
    searcher = Searcher(graph, vectors)
    exact = vectors.fused(queries, scaled)
    for pool in (16, 96):
        scores, rows = (batched.host(part) for part in batched.search(on_device, index, batch, pool, 10))
        same = 0
        for i in range(len(queries)):
            expected_rows, expected_scores = walk_one(searcher, queries.take([i]), scaled, pool, 10)
            found = rows[i][rows[i] >= 0]
            same += np.array_equal(found, expected_rows)
            np.testing.assert_allclose(scores[i][: len(found)], exact[i, found], rtol=1e-5, atol=1e-5)
            assert not graph.deleted[found].any() and len(found) == 10
        assert same >= 0.99 * len(queries), (pool, same)
    _, wide = batched.search(on_device, index, batch, 96, 10, width=4)  # four expansions per step: fewer steps
    live = np.where(graph.deleted, -np.inf, exact)
    truth = np.argsort(-live, axis=1, kind="stable")[:, :10]
    recall = np.mean([len(set(r.tolist()) & set(t.tolist())) / 10 for r, t in zip(batched.host(wide), truth, strict=True)])
    assert recall >= 0.9, recall


@pytest.mark.parametrize("device", DEVICES)
def test_exact_fused_scores_equal_the_scipy_reference(device):
    xp = batched.array_module(device)
    vectors, nodes = synthetic(400, seed=8)
    queries = noisy_queries(nodes, 50, seed=9)
    weights = np.array([0.5, 1.5, 0.25])
    on_device = batched.DeviceVectors.of(xp, vectors)
    batch = batched.QueryBatch.of(xp, queries, weights)
    reference = vectors.fused(queries, weights)
    scores, rows = (batched.host(part) for part in batched.exact_top(on_device, batch, 10))
    np.testing.assert_allclose(scores, np.take_along_axis(reference, rows, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scores, -np.sort(-reference, axis=1)[:, :10], rtol=1e-5, atol=1e-5)
    pairs = np.random.default_rng(10).integers(0, 400, size=(50, 200))  # gathered candidates, −1 among them
    pairs[:, ::17] = -1
    scored = batched.host(batched.score(on_device, batch, xp.arange(50), xp.asarray(pairs)))
    expected = np.where(pairs >= 0, np.take_along_axis(reference, np.maximum(pairs, 0), axis=1), -np.inf)
    np.testing.assert_allclose(scored, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_nn_descent_finds_the_exact_neighbours(device):
    """G2/G11: NN-Descent's lists against the exact k-NN at K = 64, on near-copies (many ties of a node's
    own copies) as on plain nodes; a build from them keeps the graph's invariants and records its recall."""
    xp = batched.array_module(device)
    vectors, nodes = with_near_copies(*synthetic(450, seed=3), copies=50)
    scales = vectors.calibration(nodes)
    exact, _, _ = exact_knn(vectors, nodes, scales, 64, 1)
    found, sims, report = nn_descent(batched.DeviceVectors.of(xp, vectors), nodes, scales, 64, 25, 16, seed=1)
    recall = np.mean([len(set(e.tolist()) & set(f.tolist())) / 64 for e, f in zip(exact, found, strict=True)])
    assert recall >= 0.90, (recall, report)
    assert (found >= 0).all() and not (found == np.arange(len(found))[:, None]).any()
    assert all(len(set(row.tolist())) == 64 for row in found) and (np.diff(sims, axis=1) <= 0).all()
    rows = np.arange(len(found))[:, None]
    fused = np.tensordot(scales.astype(np.float32), vectors.path_scores(nodes), axes=1)
    np.testing.assert_allclose(sims, fused[rows, found], rtol=1e-5, atol=1e-5)  # each score is the pair's fused score
    graph = build(vectors, nodes, BuildConfig(knn="nndescent", device=device, seed=1))
    assert graph.build["knn"]["knn_recall"] >= 0.90
    semantic = graph.semantic
    assert (semantic >= 0).all() and not (semantic == rows).any() and all(len(set(r.tolist())) == semantic.shape[1] for r in semantic)
