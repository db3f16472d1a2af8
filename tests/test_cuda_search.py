"""Allan-Poe's search as one CUDA kernel (``kernels/hybrid/cuda_search.py``) returns exactly the numba
searcher's top 10, for dense-only, three-path and keyword-constrained weightings: on numba's CUDA
simulator here (a subprocess, since the simulator is chosen when numba is imported), and on the device
where one is (skipped, saying so, where none is)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba import cuda

HERE = Path(__file__).parent


def check(found: dict[str, dict[str, dict]]) -> None:
    for mode, weightings in found.items():
        for name, result in weightings.items():
            assert result["differ"] == [], (mode, name, result)  # every query: the same rows in the same order
            assert result["score_gap"] < 1e-5 and result["returned"] > 0 and result["scored"] >= 10, (mode, name, result)


def test_the_kernel_on_the_simulator_returns_the_numba_searchers_top_ten():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    done = subprocess.run([sys.executable, "cuda_search_check.py", "3", "1", "8"], cwd=HERE, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    check(found)
    assert found["as_built"]["keywords"]["returned"] < found["as_built"]["three_paths"]["returned"]  # two keywords leave fewer than 10
    assert found["forgetful"]["three_paths"]["scored"] > 200  # more scorings than the corpus has nodes: the hash forgot, nothing changed


@pytest.mark.skipif(not cuda.is_available(), reason="no CUDA device here: the kernel ran on the simulator only")
def test_the_kernel_on_the_device_returns_the_numba_searchers_top_ten():
    from cuda_search_check import compare

    check({"as_built": compare(queries=100, threads=128)})


def test_the_index_loader_picks_the_kernel_where_a_device_is_and_it_ranks_as_the_cpu(demo_lake):
    """The simulator stands for a device: the demo's hybrid graph loads its CUDA searcher, ap_three goes
    through it (and says so), and both queries get the CPU searcher's rows. The device is configuration:
    ``auto`` chose it and says why; ``cpu`` walks on the CPU though a device is here; an index the kernel
    cannot hold walks on the CPU with a note under ``auto`` and is an error naming the corpus under ``cuda``."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    done = subprocess.run([sys.executable, "cuda_loader_check.py", str(demo_lake.home)], cwd=HERE, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["device"] == "cuda" and any("cuda kernel" in note for note in found["notes"])
    assert found["rows"] == found["cpu_rows"] and all(len(rows) == 10 for rows in found["rows"])
    assert found["score_gap"] < 1e-5
    assert found["chosen"] == ["cuda", "numba sees a CUDA device"] and found["asked_cpu"] == "cpu"
    assert found["fallback_rows"] == found["rows"][0] and any("CUDA kernel cannot hold this index" in n and "walked on the CPU" in n for n in found["fallback_notes"])
    assert "corpus 'demo': the CUDA kernel cannot search its hybrid graph (the kernel reads at most 1 edges" in found["strict"]
