"""The encoders' CPU paths, side by side: what the default build should encode with.

For MiniLM (dense) and the bundled SPLADE, on SciFact's passages (title and abstract, 256 tokens):

- CPU-seconds per passage of each path on a seeded sample, in one process, interleaved;
- agreement with float32 (mean and minimum cosine of a passage's vectors);
- nDCG@10 of exact search over the whole corpus on SciFact's test queries, float32 against the
  default precision (``kernels/text/encoders.py``): the acceptance says within 0.005.

Paths: torch float32 (the reference); torch under bfloat16 autocast (the default where the CPU does
bfloat16 natively); torch dynamic int8 (``quantize_dynamic`` of the linear layers); ONNX Runtime in
float32 and in dynamic int8, from a graph exported here with ``torch.onnx`` (the int8 graph needs
``onnxruntime.quantization``). Run from the repo root::

    .venv/bin/python benchmarks/encoders.py [--sample 256]

Writes ``benchmarks/results/encoders.md``.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from common import DATASETS, ROOT, header, table
from graphlake.kernels.eval.metrics import ndcg_at_k
from graphlake.kernels.text import encoders

MAX_TOKENS = encoders.MAX_TOKENS


def scifact(datasets: Path) -> tuple[list[str], list[str], dict[str, dict[str, int]], dict[str, str]]:
    """Passage ids and texts (title and abstract), the test qrels, and the query texts."""
    folder = datasets / "scifact"
    with gzip.open(folder / "corpus.jsonl.gz", "rt") as lines:
        records = [json.loads(line) for line in lines]
    queries = {q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query, doc, score = line.split("\t")
        qrels.setdefault(query, {})[doc] = int(score)
    ids = [r["_id"] for r in records]
    texts = [f"{r['title']} {r['text']}".strip() for r in records]
    return ids, texts, qrels, queries


def dense_paths(scratch: Path) -> dict[str, Callable[[list[str]], np.ndarray]]:
    model = encoders._dense(None)
    tokenizer, bert = model.tokenizer, model[0].auto_model.eval()

    def pooled(run: Callable) -> Callable[[list[str]], np.ndarray]:
        def encode(texts: list[str]) -> np.ndarray:
            order = np.argsort([len(t) for t in texts], kind="stable")
            out = np.zeros((len(texts), 384), np.float32)
            for start in range(0, len(order), 64):
                rows = order[start : start + 64]
                batch = tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="np")
                out[rows] = run({k: batch[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")})
            return out

        return encode

    def torch_run(module: torch.nn.Module) -> Callable:
        def run(batch: dict) -> np.ndarray:
            with torch.inference_mode():
                return _Pool(module)(*(torch.from_numpy(batch[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))).numpy()

        return run

    paths = {
        "torch float32": lambda texts: encoders.encode_dense(texts, dtype="float32"),
        "torch bfloat16 autocast": lambda texts: encoders.encode_dense(texts, dtype="auto"),
        "torch int8 (quantize_dynamic)": pooled(torch_run(torch.ao.quantization.quantize_dynamic(bert, {torch.nn.Linear}, dtype=torch.qint8))),
    }
    paths |= _onnx_paths(_Pool(bert), tokenizer, scratch / "dense", pooled)
    return paths


class _Pool(torch.nn.Module):
    """MiniLM's mean pooling and normalisation around the transformer, so one graph gives the vector."""

    def __init__(self, body: torch.nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def _onnx_paths(module: torch.nn.Module, tokenizer, stem: Path, pooled: Callable) -> dict[str, Callable]:
    if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None:
        return {}
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tokenizer(["a b", "c"], padding=True, return_tensors="pt")
    exported, quantized = stem.with_suffix(".onnx"), stem.with_suffix(".int8.onnx")
    torch.onnx.export(
        module,
        tuple(example[k] for k in names),
        str(exported),
        input_names=names,
        output_names=["vector"],
        dynamic_axes={**{k: {0: "batch", 1: "tokens"} for k in names}, "vector": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    quantize_dynamic(str(exported), str(quantized), weight_type=QuantType.QInt8, per_channel=True)
    paths = {}
    for label, path in (("onnxruntime float32", exported), ("onnxruntime int8 (per channel)", quantized)):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        paths[label] = pooled(lambda batch, session=session: session.run(None, batch)[0])
    return paths


def splade_paths() -> dict[str, Callable[[list[str]], sp.csr_matrix]]:
    return {
        "torch float32": lambda texts: encoders.encode_splade(texts, dtype="float32"),
        "torch bfloat16 autocast": lambda texts: encoders.encode_splade(texts, dtype="auto"),
    }


def timed(encode: Callable, texts: list[str]) -> tuple[float, object]:
    started = time.process_time()
    out = encode(texts)
    return time.process_time() - started, out


def cosines(a, b) -> np.ndarray:
    if sp.issparse(a):
        a, b = a.toarray(), b.toarray()
    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


def ndcg(doc_ids: list[str], docs, queries, qrels: dict[str, dict[str, int]]) -> float:
    scores = queries @ docs.T
    scores = scores.toarray() if sp.issparse(scores) else scores
    found = []
    for row, query_id in enumerate(qrels):
        top = np.argsort(-scores[row], kind="stable")[:10]
        found.append(ndcg_at_k([doc_ids[i] for i in top], qrels[query_id], 10))
    return float(np.mean(found))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample", type=int, default=256)
    parser.add_argument("--datasets", type=Path, default=DATASETS)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "encoders.md")
    args = parser.parse_args()
    doc_ids, texts, qrels, query_texts = scifact(args.datasets)
    sample = [texts[i] for i in np.sort(np.random.default_rng(0).choice(len(texts), args.sample, replace=False))]
    lines = header("Encoders: CPU paths side by side", "python benchmarks/encoders.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    lines += [
        "",
        f"SciFact passages (title and abstract, truncated at {MAX_TOKENS} tokens); {torch.get_num_threads()} torch threads; bfloat16 native here: {torch.ops.mkldnn._is_mkldnn_bf16_supported()}.",
    ]
    with tempfile.TemporaryDirectory() as scratch:
        for model, paths in (("MiniLM (dense)", dense_paths(Path(scratch))), ("SPLADE", splade_paths())):
            lines += table(f"{model}: {args.sample} passages", ["path", "", "CPU-s / passage", "× float32", "cosine mean", "cosine min"])
            reference_seconds, reference = timed(paths["torch float32"], sample)
            for label, encode in paths.items():
                seconds, out = timed(encode, sample) if label != "torch float32" else (reference_seconds, reference)
                agree = cosines(reference, out)
                lines.append(f"| {label} | | {seconds / len(sample):.4f} | {reference_seconds / seconds:.2f} | {agree.mean():.5f} | {agree.min():.5f} |")
        lines += table("Quality: nDCG@10 on SciFact test, exact search over the whole corpus", ["encoder", "precision", "nDCG@10"])
        queries = [query_texts[q] for q in qrels]
        for model, encode in (("MiniLM (dense)", encoders.encode_dense), ("SPLADE", encoders.encode_splade)):
            for precision in ("float32", "auto"):
                found = ndcg(doc_ids, encode(texts, dtype=precision), encode(queries, dtype=precision), qrels)
                lines.append(f"| {model} | {encoders.precision(precision)} | {found:.4f} |")
    args.output.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
