"""A query's path stays short and stays in its layers: a warm search calls into the API, retrieval and
the kernels only (never the warehouse or the pipelines, which it left behind when the indexes loaded),
a fresh one imports what its method reads and nothing of the pipelines, the training code or the ingest
readers, and the Definitions load neither numba nor torch (a kernel loads them when it first runs).

Each check runs in a fresh interpreter, so that what it imports is what the path imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from graphlake.common.settings import cuda_simulated
from graphlake.kernels.hybrid.cuda_probe import cuda_possible

ROOT = Path(__file__).resolve().parents[1]
TRACE = """
import json, sys, threading
from pathlib import Path
from graphlake.api import open_lake
from graphlake.retrieval.methods import load_methods

root, home, defaults = sys.argv[1], sys.argv[2], sys.argv[3]
lake = open_lake(home)
called = {}
for name in load_methods(Path(defaults)):
    lake.search("demo", name, "Which vessel carried the sled?", 5)  # loads what it reads: not traced
    files = set()

    def profile(frame, event, arg):
        path = frame.f_code.co_filename
        if event == "call" and path.startswith(root) and "/.venv/" not in path:
            files.add(path[len(root):])

    sys.setprofile(profile), threading.setprofile(profile)
    lake.search("demo", name, "Where did the expedition winter?", 5)
    sys.setprofile(None), threading.setprofile(None)
    called[name] = sorted(files)
print(json.dumps({"called": called, "modules": sorted(sys.modules)}))
"""


FRESH = """
import atexit, json, os, sys


class TornDown:  # says so when the interpreter is torn down, which a query that only read skips
    def __del__(self, write=os.write):
        write(2, b"torn down\\n")


witness = TornDown()
atexit.register(lambda: print(json.dumps(sorted(sys.modules))))  # the console script still runs them
sys.argv = ["graphlake", "query", "--corpus", "demo", "--method", sys.argv[1], "--json", "Which vessel carried the sled?"]
from graphlake.cli.main import main

main()
"""
# what a fresh query of each method may import of graphlake (measured, plus a few; +8 with the serving core's
# snapshot, index set, encoders, derived kinds, searcher manager, once and fusion: a new module on the path
# is a decision, not an accident; +2 with the device resolved once as the lake opens: retrieval.index.config and
# kernels.hybrid.cuda_probe, no numba); its CPU seconds are benchmarks/query_path.py's to measure
# graphlake_ltr: + kernels.plan.match, GRASP's matcher; bm25 111: + warehouse.write_checks, where a name's bound and a value's kind are said once for requests and writes;
# bm25 112, ap_three 120, graphlake_ltr 126: + kernels.partners, whose family names the learned_fusion operator declares (numpy, scipy);
# bm25 113, ap_three 121, graphlake_ltr 127: + common.stopping, the deadline a request's stages check (the standard library alone)
FRESH_MODULES = {"bm25": 113, "ap_three": 121, "graphlake_ltr": 127}
NEVER = ("graphlake.pipelines", "graphlake.assets", "graphlake.retrieval.training", "dagster", "sqlglot", "torch", "transformers")


def test_a_fresh_query_imports_what_its_method_reads_and_no_pipeline(demo_lake):
    """What a fresh ``graphlake query`` imports, per method: never the pipelines, the assets, the training
    code, an ingest reader or torch (the query encoders are ONNX); a lexical method no dense encoder, no
    method spaCy or LightGBM unless it reads them, and the first stages neither pandas (which Arrow's
    ``to_numpy`` and dataset reader import), nor numba's CUDA target where no device can be. Through the
    console script, which ends a query's process without tearing the interpreter down, once its answer
    is out and the atexit handlers ran."""
    imported = {}
    for method in FRESH_MODULES:
        done = subprocess.run([sys.executable, "-c", FRESH, method], capture_output=True, text=True, env={**os.environ, "GRAPHLAKE_HOME": str(demo_lake.home)})
        assert done.returncode == 0, done.stderr[-3000:]
        answer, modules = done.stdout.splitlines()
        assert json.loads(answer)["hits"] and "torn down" not in done.stderr, (method, done.stderr[-3000:])
        imported[method] = set(json.loads(modules))
    for method, modules in imported.items():
        own = sorted(m for m in modules if m.startswith("graphlake."))
        assert len(own) <= FRESH_MODULES[method], (method, len(own), own)
        assert not [m for m in modules if m.startswith(NEVER) or m.startswith("graphlake.warehouse.readers.") and m != "graphlake.warehouse.readers.base"], method
    assert "onnxruntime" not in imported["bm25"] and "onnxruntime" in imported["ap_three"]  # the dense query encoder: read by ap_three only
    assert not {"spacy", "lightgbm"} & (imported["bm25"] | imported["ap_three"]) and {"spacy", "lightgbm"} <= imported["graphlake_ltr"]
    unused = {"pandas", "pyarrow.dataset"} | (set() if cuda_possible(cuda_simulated()) else {"numba.cuda"})
    assert not unused & (imported["bm25"] | imported["ap_three"])


def test_a_warm_search_stays_in_the_api_retrieval_and_the_kernels(demo_lake, tmp_path):
    done = subprocess.run([sys.executable, "-c", TRACE, f"{ROOT}/", str(demo_lake.home), str(tmp_path)], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.splitlines()[-1])
    called = found["called"]
    assert {"bm25", "ap_three", "grasp_fused", "graphlake_ltr"} <= set(called)  # the defaults, every one traced
    assert len(called["ap_three"]) <= 20, sorted(called["ap_three"])  # the files docs/architecture.md lists, one a job
    assert "kernels/hybrid/graph_index.py" in called["ap_three"]  # the trace reaches the kernel: it can fail
    strays = {name: [f for f in files if f.startswith(("warehouse/", "pipelines/", "assets/"))] for name, files in called.items()}
    assert not any(strays.values()), strays
    assert not [m for m in found["modules"] if m.startswith("graphlake.retrieval.training")]


def test_the_definitions_load_neither_numba_nor_torch(tmp_path):
    code = "import sys; from pathlib import Path; from graphlake.pipelines.definitions import build_definitions; build_definitions(Path(sys.argv[1])); print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "lake")], capture_output=True, text=True, check=True)
    modules = set(json.loads(done.stdout.splitlines()[-1].replace("'", '"')))
    assert "dagster" in modules and "graphlake.assets.indexes.hybrid_graph" in modules  # the assets were loaded
    assert not {name.partition(".")[0] for name in modules} & {"numba", "torch"}
