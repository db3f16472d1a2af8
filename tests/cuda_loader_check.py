"""Run with NUMBA_ENABLE_CUDASIM=1 (a subprocess of test_cuda_search.py): the hybrid graph index of a lake
loads its CUDA searcher, and ap_three through it returns the CPU searcher's rows; an index the kernel
cannot hold walks on the CPU saying why (``auto``) or is an error (``cuda``), and ``cpu`` is the CPU
walk though a device is here. Prints one JSON line."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import numpy as np

from graphlake.kernels.hybrid import cuda_search
from graphlake.kernels.hybrid.graph_index import Searcher
from graphlake.kernels.hybrid.vectors import HybridParams
from graphlake.retrieval.core import needs
from graphlake.retrieval.index.config import DeviceError, IndexConfig
from graphlake.retrieval.index.index_set import new_request
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.storage import LakeStorage

QUERIES = ["Which vessel carried the sled?", "Where did the expedition winter?"]

home = sys.argv[1]
indexes = open_index_set(LakeStorage(home), "demo")
request = new_request(indexes, QUERIES)
op = load_methods(home)["ap_three"].at_query_time({"k": 10, "candidates": 32})  # the simulator runs a block's threads one by one
request.prime(needs(op))
found = op.run_batch(request, indexes)
searcher = indexes.hybrid_graph
params = HybridParams(weights=op.scaled(request, indexes), pool=op.candidates)
cpu_scores, cpu_rows = Searcher(searcher.graph, searcher.vectors).search(op.encode(QUERIES, request, indexes), op.k, params)

chosen = IndexConfig.resolve()
asked_cpu = open_index_set(LakeStorage(home), "demo", config=replace(chosen, device="cpu", asked="cpu")).hybrid_graph.device
cuda_search.EDGES_MAX = 1  # an index the kernel cannot hold
unfit = open_index_set(LakeStorage(home), "demo")
fallback = new_request(unfit, QUERIES[:1])
fallback.prime(needs(op))
unfit_rows = op.run_batch(fallback, unfit)[0].rows.tolist()
try:
    open_index_set(LakeStorage(home), "demo", config=replace(chosen, asked="cuda")).hybrid_graph
    strict = "no error"
except DeviceError as error:
    strict = str(error)
print(
    json.dumps(
        {
            "device": searcher.device,
            "rows": [c.rows.tolist() for c in found],
            "cpu_rows": [r[r >= 0].tolist() for r in cpu_rows],
            "score_gap": max(float(np.abs(c.scores - s[: len(c.scores)]).max(initial=0.0)) for c, s in zip(found, cpu_scores, strict=True)),
            "notes": list(request.notes),
            "chosen": [chosen.device, chosen.why],
            "asked_cpu": asked_cpu,
            "fallback_notes": list(fallback.notes),
            "fallback_rows": unfit_rows,
            "strict": strict,
        }
    )
)
