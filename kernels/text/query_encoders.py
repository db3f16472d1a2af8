"""Queries encoded through ONNX Runtime: a query needs neither torch nor transformers.

A ``graphlake query`` or a server's first request paid 2–3 s importing torch and transformers for a
10-word query. A query encoder (a dense model with its pooling, a SPLADE with its max over tokens) is
exported once per model folder and revision with ``torch.onnx`` into a local cache (``cache``, given by
the caller: ``common.settings.model_cache``, a name no object-store lake's cache folder can have); the
build exports it where it encodes the passages (``prepare``), a machine that only
serves on first use. ``folder`` None is the packaged model of the kind (MiniLM, the small SPLADE).
Afterwards a query is tokenized by ``tokenizers`` and run by ONNX Runtime, which on a 2-core EPYC
took half torch's CPU-seconds per query (10 against 21 ms dense, 5 against 12 ms SPLADE) at float32,
with vectors within 2e-7 (dense) and 5e-6 (SPLADE) of torch's. Its threads do not spin between runs:
spinning stole the CPU from the search that follows (a dense query took 12 ms instead of 8.5).

Every query is encoded here, in float32: the runs ``graphlake eval`` stores and what the API answers
come from the same graphs. (Under bfloat16 a query's vector depended on the batch it was encoded in,
up to 6e-4 a coordinate; on SciFact 15 of 100 dense top-10 lists changed.) A batch runs sorted by
length in groups (``BATCH``), so padding is short; a query's vector does not depend on the batch
beyond 1e-7.
"""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from graphlake.kernels.text.encoders import MAX_TOKENS, dense_model_path, splade_model_path
from graphlake.kernels.text.model_files import dense_dimension, folder_revision, model_config, pooling

FORMAT = 1  # bump when what a graph computes changes: older files are then ignored
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
BATCH = {"dense": 16, "splade": 4}  # the fastest measured on 2 cores; SPLADE holds (batch, tokens, vocabulary) logits
BATCH_TOKENS = {"dense": 16 * 48, "splade": 4 * 48}  # a batch's queries times its longest: BATCH queries of 48 tokens, fewer longer ones
THREADS = 4  # a query is short: more threads than this only wait on each other
CACHED_BYTES = 16 << 20  # per encoder, the texts met last and their vectors (a long query's SPLADE row is 20 KB)


def _dense_module(path: Path):
    import torch
    from transformers import AutoModel

    mode = pooling(path)

    class Pooled(torch.nn.Module):
        """The folder's pooling over real tokens (mean, [CLS] or max), then unit length: what
        sentence-transformers computes and ``encoders.encode_dense`` stores."""

        def __init__(self) -> None:
            super().__init__()
            self.body = AutoModel.from_pretrained(str(path), local_files_only=True).eval()

        def forward(self, input_ids, attention_mask, token_type_ids):
            tokens = self.body(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            if mode == "cls":
                pooled = tokens[:, 0]
            elif mode == "max":
                pooled = tokens.masked_fill(mask == 0, float("-inf")).amax(dim=1)
            else:
                pooled = (tokens * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    return Pooled()


def _splade_module(path: Path):
    import torch
    from transformers import AutoModelForMaskedLM

    class Weighted(torch.nn.Module):
        """SPLADE's ``log(1 + relu(max over real tokens of the logits))`` per vocabulary term."""

        def __init__(self) -> None:
            super().__init__()
            self.body = AutoModelForMaskedLM.from_pretrained(str(path), local_files_only=True).eval()

        def forward(self, input_ids, attention_mask, token_type_ids):
            logits = self.body(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
            logits = logits.masked_fill(attention_mask.unsqueeze(-1) == 0, float("-inf"))
            return torch.log1p(torch.relu(logits.amax(dim=1)))

    return Weighted()


PACKAGED = {"dense": dense_model_path, "splade": splade_model_path}  # kind -> the packaged model's folder
EXPORTED = {"dense": _dense_module, "splade": _splade_module}  # kind -> the torch module exported from a folder


def _folder(kind: str, folder: Path | None) -> Path:
    return folder if folder is not None else PACKAGED[kind]()


def graph_path(kind: str, folder: Path | None, cache: Path) -> Path:
    """The exported graph's file: named by the folder's content (``model_files.folder_revision``) and
    the exporter's torch version, so new weights or a torch upgrade export anew."""
    stamp = f"{folder_revision(_folder(kind, folder), cache)}-torch{importlib.metadata.version('torch')}-f{FORMAT}"
    return cache / f"{kind}-{stamp}.onnx"


_exporting = threading.Lock()


def prepare(kind: str, folder: Path | None, cache: Path) -> Path:
    """The query encoder's graph, exported first if it is missing (needs torch; about 1 s a model).
    Written to a temporary file and renamed, so a reader never sees half a graph."""
    target = graph_path(kind, folder, cache)
    if target.exists():
        return target
    with _exporting:
        if target.exists():
            return target
        import torch
        import transformers

        transformers.utils.logging.disable_progress_bar()
        target.parent.mkdir(parents=True, exist_ok=True)
        module = EXPORTED[kind](_folder(kind, folder))
        example = _tokenizer(kind, folder)(["a b", "c"])
        handle, scratch = tempfile.mkstemp(dir=target.parent, suffix=".onnx.part")
        os.close(handle)
        try:
            with torch.inference_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the tracer's notes on shapes it treats as constants: ours are dynamic axes
                torch.onnx.export(
                    module,
                    tuple(torch.from_numpy(example[name]) for name in INPUTS),
                    scratch,
                    input_names=list(INPUTS),
                    output_names=["out"],
                    dynamic_axes={**{name: {0: "batch", 1: "tokens"} for name in INPUTS}, "out": {0: "batch"}},
                    opset_version=17,
                    dynamo=False,
                )
            os.replace(scratch, target)
        finally:
            Path(scratch).unlink(missing_ok=True)
    return target


def _tokenizer(kind: str, folder: Path | None) -> Callable[[list[str]], dict[str, np.ndarray]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(_folder(kind, folder) / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding()

    def tokenize(texts: list[str]) -> dict[str, np.ndarray]:
        encoded = tokenizer.encode_batch(texts)
        return {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
        }

    return tokenize


class _Encoder:
    """A model's ONNX session, and the vectors of the texts it met last, up to ``CACHED_BYTES`` (dense
    rows as arrays, SPLADE rows sparse: a dense vocabulary row is 120 KB). Every method of a build's
    runs, and a server's repeated questions, ask for the same queries: a build's ten runs of 20 queries
    encoded them 356 times instead of 40."""

    def __init__(self, kind: str, folder: Path | None, cache: Path) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = min(THREADS, os.cpu_count() or 1)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.enable_cpu_mem_arena = False
        self._session = onnxruntime.InferenceSession(str(prepare(kind, folder, cache)), options, providers=["CPUExecutionProvider"])
        self._tokenize = _tokenizer(kind, folder)
        self._fed = [i.name for i in self._session.get_inputs()]  # a model without segments (MPNet) leaves token_type_ids out of its graph
        self._kind = kind
        self._rows: OrderedDict[str, np.ndarray | sp.csr_matrix] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def rows(self, texts: list[str]) -> list[np.ndarray | sp.csr_matrix]:
        with self._lock:
            known = {text: self._rows[text] for text in dict.fromkeys(texts) if text in self._rows}
        missing = [text for text in dict.fromkeys(texts) if text not in known]
        keep = np.copy if self._kind == "dense" else sp.csr_matrix
        found = {text: keep(vector) for text, vector in zip(missing, self._run(missing), strict=True)} if missing else {}
        with self._lock:
            for text, row in found.items():
                if text not in self._rows:
                    self._rows[text] = row
                    self._bytes += _size(text, row)
            for text in known:
                if text in self._rows:
                    self._rows.move_to_end(text)
            while self._bytes > CACHED_BYTES:
                text, row = self._rows.popitem(last=False)
                self._bytes -= _size(text, row)
        return [known[text] if text in known else found[text] for text in texts]

    def _run(self, texts: list[str]) -> np.ndarray:
        """Tokenized at once, then run sorted by length in groups of at most ``BATCH`` queries and
        ``BATCH_TOKENS`` tokens, each cut to its longest: padding stays short, and a batch of long queries
        holds what a batch of short ones does (16 dense queries of 256 tokens held 350 MB of activations,
        4 SPLADE ones 500 MB of logits, kept afterwards by ONNX Runtime's arena)."""
        encoded = self._tokenize(texts)
        lengths = encoded["attention_mask"].sum(axis=1)
        order = np.argsort(lengths, kind="stable")
        most, tokens = BATCH[self._kind], BATCH_TOKENS[self._kind]
        parts, start = [], 0
        while start < len(order):
            size = 1
            while start + size < len(order) and size < most and (size + 1) * lengths[order[start + size]] <= tokens:
                size += 1
            rows = order[start : start + size]
            width = int(lengths[rows].max())
            parts.append(self._session.run(None, {name: array[rows, :width] for name, array in encoded.items() if name in self._fed})[0])
            start += size
        return np.concatenate(parts)[np.argsort(order)]


def _size(text: str, row: np.ndarray | sp.csr_matrix) -> int:
    return len(text) + (row.nbytes if isinstance(row, np.ndarray) else row.data.nbytes + row.indices.nbytes + row.indptr.nbytes)


@lru_cache(maxsize=4)
def _encoder(kind: str, folder: Path | None, cache: Path) -> _Encoder:
    return _Encoder(kind, folder, cache)


def encode_queries_dense(texts: list[str], folder: Path | None, cache: Path) -> np.ndarray:
    """``(len(texts), dimension)`` float32 unit vectors, as :func:`encoders.encode_dense` gives them in float32."""
    if not texts:
        return np.zeros((0, dense_dimension(_folder("dense", folder))), dtype=np.float32)
    return np.stack(_encoder("dense", folder, cache).rows(texts))


def encode_queries_splade(texts: list[str], folder: Path | None, cache: Path) -> sp.csr_matrix:
    """``(len(texts), vocab)`` sparse float32 term weights, as :func:`encoders.encode_splade` gives them in float32."""
    if not texts:
        return sp.csr_matrix((0, int(model_config(_folder("splade", folder))["vocab_size"])), dtype=np.float32)
    return sp.vstack(_encoder("splade", folder, cache).rows(texts), format="csr")
