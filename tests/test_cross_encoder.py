"""The cross-encoder split at [CLS], its save/load, and its listwise training loop, on the real MiniLM weights."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from graphlake.kernels.rerank.cross_encoder import CrossEncoder, Group, _rate_factor, reranked_ndcg, train

QUERY = "Which research vessel carried the BenthoCam camera sled?"
TEXTS = [
    "The BenthoCam II camera sled was towed behind the RV Kestrel Dawn during the 2019 survey.",
    "Seagrass meadows of Zostera halvanensis cover the northern shallows.",
    "Storm Ilse flooded the harbour at Port Ostrel.",
]


@pytest.fixture(scope="module")
def encoder() -> CrossEncoder:
    return CrossEncoder.initial(max_tokens=64)


def test_head_of_features_is_the_classifiers_score(encoder):
    features = encoder.features(QUERY, TEXTS)
    assert features.shape == (3, encoder.model.config.hidden_size)
    with torch.inference_mode():
        logits = encoder.model(**encoder._encode(QUERY, TEXTS)).logits.squeeze(-1).numpy()
    np.testing.assert_allclose(encoder.head(features), logits, rtol=1e-5, atol=1e-6)
    # batching by length and padding do not change a pair's vector
    one_by_one = np.vstack([encoder.features(QUERY, [text]) for text in TEXTS])
    np.testing.assert_allclose(features, one_by_one, rtol=1e-4, atol=1e-5)


def test_batches_hold_pairs_of_like_length_on_a_cpu_and_fill_up_on_a_gpu(encoder):
    lengths = np.array([40, 10, 12, 30, 11, 13, 100])  # by length: 1, 4, 2, 5, 3, 0, 6
    assert [b.tolist() for b in encoder._batches(lengths, 3)] == [[1, 4, 2], [5], [3], [0], [6]]  # 30 > 1.25 * 13, 40 > 1.25 * 30
    on_gpu = SimpleNamespace(device=torch.device("cuda"))  # only the device type is read; no GPU needed
    assert [b.tolist() for b in CrossEncoder._batches(on_gpu, lengths, 3)] == [[1, 4, 2], [5, 3, 0], [6]]


def test_tokens_counts_the_padding_of_the_batches_features_runs(encoder):
    assert [encoder.tokens(QUERY, [text]) for text in TEXTS] == [(36, 36), (31, 31), (27, 27)]  # one pair: no padding
    # by length 27, 31 | 36 (> 1.25 * 27): the first batch pads 27 up to 31
    assert encoder.tokens(QUERY, TEXTS) == (94, 2 * 31 + 36)
    assert encoder.tokens(QUERY, TEXTS, batch_size=1) == (94, 94)
    assert encoder.tokens(QUERY, []) == (0, 0)


def test_training_learns_the_groups_and_keeps_the_best_weights(encoder, tmp_path):
    groups = [
        Group("which vessel towed the camera sled", TEXTS[0], (TEXTS[1], TEXTS[2])),
        Group("what covers the northern shallows", TEXTS[1], (TEXTS[0], TEXTS[2])),
        Group("what flooded the harbour", TEXTS[2], (TEXTS[0], TEXTS[1])),
    ]

    def accuracy(model: CrossEncoder) -> float:
        return float(np.mean([np.argmax(model.score(g.query, [g.positive, *g.negatives])) == 0 for g in groups]))

    report = train(encoder, groups * 4, accuracy, learning_rate=1e-4, groups_per_step=3, epochs=3, validate_every=2)
    assert report.best_validation == 1.0 and report.best_validation >= report.initial_validation
    assert accuracy(encoder) == report.best_validation  # the chosen weights are the ones loaded
    assert report.steps == 12 and [c["step"] for c in report.curve][:3] == [0, 2, 4]
    losses = [c["loss"] for c in report.curve[1:]]
    assert losses[-1] < losses[0]
    encoder.save(tmp_path / "model", {"note": "test"})
    again = CrossEncoder.load(tmp_path / "model")
    assert again.max_tokens == 64
    np.testing.assert_allclose(again.score(QUERY, TEXTS), encoder.score(QUERY, TEXTS), rtol=1e-5)


def test_the_learning_rate_warms_up_then_anneals_to_zero_at_the_end_of_the_run():
    assert _rate_factor(0.0) < 0.05 and _rate_factor(0.1) == pytest.approx(1.0)
    assert _rate_factor(0.55) == pytest.approx(0.5) and _rate_factor(1.0) == 0.0 and _rate_factor(1.2) == 0.0


def test_training_can_start_from_a_half_precision_copy_of_the_encoder(tmp_path):
    """A machine without the packaged model (a lent GPU) starts from a copy; it loads back in float32."""
    from transformers import AutoModel, AutoTokenizer

    from graphlake.kernels.text.encoders import dense_model_path

    AutoModel.from_pretrained(str(dense_model_path())).half().save_pretrained(str(tmp_path / "copy"))
    AutoTokenizer.from_pretrained(str(dense_model_path())).save_pretrained(str(tmp_path / "copy"))
    packaged, copied = CrossEncoder.initial(64, seed=3), CrossEncoder.initial(64, seed=3, weights=tmp_path / "copy")
    assert copied.model.dtype == torch.float32 and copied.device == packaged.device
    # the same seeded head; only the encoder's rounding to 16 bits differs
    np.testing.assert_allclose(copied.score(QUERY, TEXTS), packaged.score(QUERY, TEXTS), atol=2e-2)


def test_reranked_ndcg_scores_the_documents_in_the_models_order():
    class ByLength:
        def score(self, query, texts):
            return np.array([float(len(t)) for t in texts])

    item = {"query": QUERY, "texts": ["a", "bbb", "cc", "dddd"], "docs": ["d1", "d2", "d1", "d3"], "gold": {"d2": 1}}
    assert reranked_ndcg(ByLength(), [item]) == pytest.approx(1 / np.log2(3))  # order d3, d2, d1: gold at rank 2
    assert reranked_ndcg(ByLength(), [item, {**item, "texts": [], "docs": []}]) == pytest.approx(0.5 / np.log2(3))
