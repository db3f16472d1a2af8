"""The project's own cross-encoder: a BERT sequence classifier with one output, split at [CLS].

No pretrained cross-encoder ships offline, so one is fine-tuned from the packaged all-MiniLM-L6-v2
weights (``encoders.dense_model_path``). FastInsight's GRanker smooths the [CLS] vectors over the
graph before scoring them, so the model is used in two halves: :meth:`CrossEncoder.features` gives
the last layer's [CLS] vector of each (query, passage) pair and :meth:`CrossEncoder.head` maps
vectors to scores with the classifier head (BERT's pooler dense + tanh, then the output layer: the
"last two layers" FastInsight takes as its MLP). ``head(features(...))`` is exactly the model's score.

Training is listwise: each group holds one relevant passage and hard negatives, and the loss is the
softmax cross-entropy of the relevant one (as in GRASP's and most rerankers' recipes).

The model runs on the GPU when torch sees one (training and scoring alike) and on the CPU otherwise;
vectors and scores always come back as NumPy arrays on the host.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoTokenizer, BertForSequenceClassification

from graphlake.kernels.eval.metrics import ndcg_at_k
from graphlake.kernels.text.encoders import dense_model_path

transformers.utils.logging.disable_progress_bar()  # weights load from disk; a bar per load is noise

MAX_TOKENS = 256
CPU_LENGTH_RATIO = 1.25  # on a CPU, a batch ends before a pair this many times as long as its first (see CrossEncoder._batches)
TRAINING_FILE = "training.json"


def default_device() -> torch.device:
    """The first GPU when torch sees one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class CrossEncoder:
    """Scores (query, passage) pairs on ``device``; eval mode unless :func:`train` is running."""

    def __init__(self, model: BertForSequenceClassification, tokenizer, max_tokens: int = MAX_TOKENS, device: torch.device | None = None):
        self.device = device or default_device()
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens

    @classmethod
    def initial(cls, max_tokens: int = MAX_TOKENS, seed: int = 0, weights: Path | None = None) -> CrossEncoder:
        """all-MiniLM-L6-v2's encoder (or the encoder saved in ``weights``) with a freshly initialised, seeded one-output head."""
        path = str(weights or dense_model_path())
        torch.manual_seed(seed)
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()  # "classifier newly initialised" is the point, not news
        try:
            model = BertForSequenceClassification.from_pretrained(path, num_labels=1, local_files_only=True, dtype=torch.float32)
        finally:
            transformers.logging.set_verbosity(verbosity)
        return cls(model, AutoTokenizer.from_pretrained(path, local_files_only=True), max_tokens)

    @classmethod
    def load(cls, folder: Path) -> CrossEncoder:
        model = BertForSequenceClassification.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        return cls(model, tokenizer, int(json.loads((folder / TRAINING_FILE).read_text())["max_tokens"]))

    def save(self, folder: Path, report: dict | None = None) -> None:
        self.model.save_pretrained(str(folder))
        self.tokenizer.save_pretrained(str(folder))
        (folder / TRAINING_FILE).write_text(json.dumps({"max_tokens": self.max_tokens, **(report or {})}, indent=2))

    def _encode(self, query: str, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Token tensors of the (query, text) pairs, padded to the longest, on the host."""
        return self.tokenizer([query] * len(texts), list(texts), truncation="only_second", max_length=self.max_tokens, padding=True, return_tensors="pt")

    def _cls(self, query: str, texts: Sequence[str]) -> torch.Tensor:
        return self._cls_of(self._encode(query, texts))

    def _cls_of(self, encoded: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model.bert(**{name: tensor.to(self.device) for name, tensor in encoded.items()}).last_hidden_state[:, 0]

    def _head(self, cls: torch.Tensor) -> torch.Tensor:
        pooled = self.model.bert.pooler.activation(self.model.bert.pooler.dense(cls))
        return self.model.classifier(self.model.dropout(pooled)).squeeze(-1)

    def _batches(self, lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
        """Positions grouped into batches of pairs of like length (token counts, shortest first).

        A batch is padded to its longest pair. On a GPU the padding runs in parallel and each batch
        costs a launch, so batches are only cut at ``batch_size``. On a CPU a padding token costs what
        a real one does, so a batch also ends before a pair more than ``CPU_LENGTH_RATIO`` times as
        long as its first: ten HotpotQA passages scored in one batch carried 37% padding, and cut this
        way they cost a third less (benchmarks/results/cross_encoder_batching.md).
        """
        ratio = CPU_LENGTH_RATIO if self.device.type == "cpu" else math.inf
        batches: list[list[int]] = []
        for position in np.argsort(lengths, kind="stable").tolist():
            if batches and len(batches[-1]) < batch_size and lengths[position] <= ratio * lengths[batches[-1][0]]:
                batches[-1].append(position)
            else:
                batches.append([position])
        return [np.asarray(batch) for batch in batches]

    def _planned(self, query: str, texts: Sequence[str], batch_size: int) -> tuple[dict[str, torch.Tensor], np.ndarray, list[tuple[np.ndarray, int]]]:
        """The pairs' tokens, each pair's token count, and the batches ``features`` runs them in, each
        with its width: padding is on the right, so a batch's own longest pair sets it."""
        encoded = self._encode(query, texts)
        lengths = encoded["attention_mask"].sum(dim=1).numpy()
        return encoded, lengths, [(rows, int(lengths[rows].max())) for rows in self._batches(lengths, batch_size)]

    def tokens(self, query: str, texts: Sequence[str], batch_size: int = 32) -> tuple[int, int]:
        """Real and padded token counts of what ``features`` runs for these pairs: on a CPU a call's
        cost follows the padded count, so it tells apart a method that picks longer passages from a
        slower implementation."""
        if not texts:
            return 0, 0
        _, lengths, batches = self._planned(query, texts, batch_size)
        return int(lengths.sum()), sum(len(rows) * width for rows, width in batches)

    @torch.inference_mode()
    def features(self, query: str, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """[CLS] vectors ``(len(texts), hidden)`` of the (query, text) pairs, tokenized once and batched by length."""
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        if not texts:
            return out
        encoded, _, batches = self._planned(query, texts, batch_size)
        for rows, width in batches:
            batch = {name: tensor[torch.from_numpy(rows), :width] for name, tensor in encoded.items()}
            out[rows] = self._cls_of(batch).float().cpu().numpy()
        return out

    @torch.inference_mode()
    def head(self, features: np.ndarray) -> np.ndarray:
        """Scores ``(n,)`` for [CLS] vectors (raw or smoothed)."""
        vectors = torch.as_tensor(np.asarray(features, dtype=np.float32), device=self.device)
        return self._head(vectors).float().cpu().numpy().astype(np.float64)

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        return self.head(self.features(query, texts))


def reranked_ndcg(model: CrossEncoder, items: Sequence[dict]) -> float:
    """Mean nDCG@10 of documents (a document ranks at its first node) after ``model`` reranks each item's
    candidates; an item holds ``query``, node ``texts``, their ``docs`` and ``gold`` ({doc: relevance})."""
    values = []
    for item in items:
        if not item["texts"]:
            values.append(0.0)
            continue
        order = np.argsort(-model.score(item["query"], item["texts"]), kind="stable")
        values.append(ndcg_at_k(list(dict.fromkeys(item["docs"][i] for i in order)), item["gold"], 10))
    return float(np.mean(values))


@dataclass(frozen=True)
class Group:
    """One training example: a query, a relevant passage, and non-relevant passages ranked high by a retriever."""

    query: str
    positive: str
    negatives: tuple[str, ...]


@dataclass(frozen=True)
class Pool:
    """A stored training record with one positive (GRASP §3.3): every visit draws a fresh group of the
    positive and ``size - 1`` negatives sampled uniformly from the stored hard ones."""

    query: str
    positive: str
    negatives: tuple[str, ...]
    size: int

    def draw(self, rng: np.random.Generator) -> Group:
        picked = rng.choice(len(self.negatives), size=min(self.size - 1, len(self.negatives)), replace=False)
        return Group(self.query, self.positive, tuple(self.negatives[i] for i in sorted(picked.tolist())))


@dataclass
class TrainingReport:
    """What :func:`train` did: the data, the budget, and the validation metric over the steps."""

    groups: int
    negatives_per_group: int
    steps: int
    seconds: float
    learning_rate: float
    best_step: int
    best_validation: float
    initial_validation: float
    curve: list[dict] = field(default_factory=list)  # {"step", "loss", "validation", "seconds"}


def train(
    encoder: CrossEncoder,
    groups: Sequence[Group | Pool],
    validate: Callable[[CrossEncoder], float],
    learning_rate: float = 3e-5,
    groups_per_step: int = 4,
    epochs: int = 1,
    budget_seconds: float = math.inf,
    validate_every: int = 50,
    seed: int = 0,
    schedule: str = "linear",
    warmup: float = 0.1,
    batched: bool = False,
    advance: Callable[[int], None] = lambda steps: None,
) -> TrainingReport:
    """Fine-tune ``encoder`` in place with a listwise softmax loss; keeps the weights of the best validation.

    A :class:`Pool` draws a new group each time it is visited. ``schedule`` is ``linear`` or ``cosine``
    decay after ``warmup``. ``batched`` scores all of a step's groups in one forward pass (the GPU
    recipe); otherwise each group is its own pass (less padding on a CPU). Both give the same loss.
    ``advance(1)`` after each step, for progress.

    ``validate`` returns a higher-is-better metric on held-out queries (nDCG@10 of reranking, say);
    it runs before training, every ``validate_every`` steps and at the end. Training stops at the end
    of ``epochs`` or once ``budget_seconds`` have passed, whichever is first. The learning rate warms
    up linearly over the first 10% of the run and then decays linearly to zero, where the run's
    progress is the larger of its share of the planned steps and its share of the budget: a run the
    budget cuts short still anneals instead of stopping at its peak rate.
    """
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    planned = max(1, epochs * math.ceil(len(groups) / groups_per_step))
    optimizer = torch.optim.AdamW(encoder.model.parameters(), lr=learning_rate, weight_decay=0.01)
    started = time.perf_counter()

    def evaluated() -> float:
        encoder.model.eval()  # scoring assumes eval mode (no dropout); setting it per call costs ~1 ms
        return validate(encoder)

    initial = best = evaluated()
    best_state = _weights(encoder)
    curve = [{"step": 0, "loss": None, "validation": initial, "seconds": 0.0}]
    step, best_step, losses = 0, 0, []
    for batch in _batches(groups, epochs, groups_per_step, rng):
        progress = max(step / planned, (time.perf_counter() - started) / budget_seconds)
        for param_group in optimizer.param_groups:
            param_group["lr"] = learning_rate * _rate_factor(progress, warmup, schedule)
        losses.append(_take_step(encoder, optimizer, batch, batched))
        step += 1
        advance(1)
        out_of_time = time.perf_counter() - started > budget_seconds
        if step % validate_every == 0 or step == planned or out_of_time:
            value = evaluated()
            curve.append({"step": step, "loss": float(np.mean(losses)), "validation": value, "seconds": time.perf_counter() - started})
            losses = []
            if value > best:
                best, best_step, best_state = value, step, _weights(encoder)
        if out_of_time:
            break
    encoder.model.load_state_dict(best_state)
    encoder.model.eval()
    return TrainingReport(
        groups=len(groups),
        negatives_per_group=max((len(g.negatives) for g in groups), default=0),
        steps=step,
        seconds=time.perf_counter() - started,
        learning_rate=learning_rate,
        best_step=best_step,
        best_validation=best,
        initial_validation=initial,
        curve=curve,
    )


def _batches(groups: Sequence[Group | Pool], epochs: int, groups_per_step: int, rng: np.random.Generator) -> Iterator[list[Group]]:
    """Each step's groups: every epoch a new order, a pool's group drawn when its step comes."""
    for _ in range(epochs):
        order = rng.permutation(len(groups))
        for start in range(0, len(order), groups_per_step):
            yield [_drawn(groups[i], rng) for i in order[start : start + groups_per_step]]


def _take_step(encoder: CrossEncoder, optimizer: torch.optim.Optimizer, batch: list[Group], batched: bool) -> float:
    """One optimizer step on ``batch``'s listwise loss (gradients clipped to norm 1); the loss."""
    encoder.model.train()
    loss = step_loss(encoder, batch, batched)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(encoder.model.parameters(), 1.0)
    optimizer.step()
    return float(loss.detach())


def _weights(encoder: CrossEncoder) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in encoder.model.state_dict().items()}


def _rate_factor(progress: float, warmup: float = 0.1, schedule: str = "linear") -> float:
    """Share of the peak learning rate at ``progress`` in [0, 1]: linear warm-up, then linear or cosine decay to 0."""
    if progress < warmup:
        return (progress + 1e-3) / warmup
    rest = min(1.0, (progress - warmup) / (1.0 - warmup))
    return max(0.0, 1.0 - rest) if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * rest))


def _drawn(item: Group | Pool, rng: np.random.Generator) -> Group:
    return item.draw(rng) if isinstance(item, Pool) else item


def step_loss(encoder: CrossEncoder, groups: Sequence[Group], batched: bool = False) -> torch.Tensor:
    """Mean listwise loss of ``groups``: one forward pass per group, or (``batched``) one for all of their pairs."""
    if not batched:
        return torch.stack([_group_loss(encoder, group) for group in groups]).mean()
    queries = [group.query for group in groups for _ in range(1 + len(group.negatives))]
    texts = [text for group in groups for text in (group.positive, *group.negatives)]
    encoded = encoder.tokenizer(queries, texts, truncation="only_second", max_length=encoder.max_tokens, padding=True, return_tensors="pt")
    scores = encoder._head(encoder._cls_of(encoded))
    losses, start = [], 0
    for group in groups:  # groups may differ in size (a query with fewer stored negatives)
        size = 1 + len(group.negatives)
        losses.append(torch.nn.functional.cross_entropy(scores[None, start : start + size], torch.zeros(1, dtype=torch.long, device=scores.device)))
        start += size
    return torch.stack(losses).mean()


def _group_loss(encoder: CrossEncoder, group: Group) -> torch.Tensor:
    """Softmax cross-entropy of the relevant passage (index 0) among the group's passages."""
    scores = encoder._head(encoder._cls(group.query, [group.positive, *group.negatives]))
    return torch.nn.functional.cross_entropy(scores[None, :], torch.zeros(1, dtype=torch.long, device=scores.device))
