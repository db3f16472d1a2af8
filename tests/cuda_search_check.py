"""The CUDA kernel's search against the numba searcher on a small seeded corpus, query by query: run by
``tests/test_cuda_search.py`` on the device where one is, and in a subprocess on numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1`` must be set before numba is imported), which prints the comparison as JSON:
per weighting, the queries whose top 10 differ and the largest score difference; once with the kernel as
built and once with a visited hash of 16 slots that forgets most nodes (on the simulator the kernel reads
its constants as it runs), which must change nothing."""

from __future__ import annotations

import json
import sys

import numpy as np

from conftest import noisy_queries, synthetic, walk_one
from graphlake.kernels.hybrid import cuda_search
from graphlake.kernels.hybrid.graph_index import BuildConfig, Searcher, build
from graphlake.kernels.hybrid.vectors import HybridVectors

WEIGHTINGS = {"dense": (1.0, 0.0, 0.0), "three_paths": (1.0, 1.0, 1.0), "keywords": (1.0, 1.0, 1.0)}
NODES, POOL, K = 200, 32, 10


def compare(queries: int, threads: int, seed: int = 3) -> dict[str, dict]:
    """Per weighting: queries, those whose top ``K`` rows differ from the numba searcher's, the largest score gap."""
    vectors, as_queries = synthetic(NODES, seed=seed, lexical_density=0.08)
    graph = build(vectors, as_queries, BuildConfig(knn_k=32, degree=16, keyword_degree=8, entry_points=8))
    asked = noisy_queries(as_queries, queries, seed + 1)
    halved = HybridVectors(vectors.dense.astype(np.float16).astype(np.float32), vectors.sparse, vectors.lexical)  # what the kernel reads
    cpu, gpu = Searcher(graph, halved), cuda_search.CudaSearcher(graph, vectors, half=True, threads=threads)
    common = np.flatnonzero(np.diff(vectors.postings.indptr) >= NODES // 20)
    rng = np.random.default_rng(seed + 2)
    found = {}
    for name, weights in WEIGHTINGS.items():
        scaled = np.asarray(weights) * graph.scales
        required = [np.sort(rng.choice(common, 1 + i % 2, replace=False)) for i in range(queries)] if name == "keywords" else None
        rows, scores, counts, scored = gpu.walk(asked, scaled, POOL, K, required)
        differ, gap = [], 0.0
        for i in range(queries):
            expected, expected_scores = walk_one(cpu, asked.take([i]), scaled, POOL, K, None if required is None else required[i])
            if not np.array_equal(rows[i, : counts[i]], expected):
                differ.append(i)
            else:
                gap = max(gap, float(np.max(np.abs(scores[i, : counts[i]] - expected_scores), initial=0.0)))
        found[name] = {"queries": queries, "differ": differ, "score_gap": gap, "returned": int(counts.sum()), "scored": int(scored.min())}
    return found


def main(queries: int, forgetful: int, threads: int) -> dict[str, dict]:
    found = {"as_built": compare(queries, threads)}
    cuda_search.HASH_SLOTS, cuda_search.PROBES = 16, 2
    return found | {"forgetful": compare(forgetful, threads, seed=7)}


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:4]))))
