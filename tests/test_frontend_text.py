"""TfIdfVectorizer over token ids against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_util import assert_matches, make_model
from onnx import helper


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize(("lo", "hi", "skips"), [(1, 1, 0), (1, 2, 0), (2, 2, 2), (1, 3, 1)])
@pytest.mark.parametrize("rows", [(9,), (3, 9)])
def test_tfidf_vectorizer(mode, lo, hi, skips, rows):
    x = np.random.default_rng(5).integers(1, 5, rows).astype(np.int32)
    # unigrams 1, 2, 3; bigrams (1 2), (3 4), (2 2); the trigram (1 2 3)
    pool = [1, 2, 3, 1, 2, 3, 4, 2, 2, 1, 2, 3]
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode=mode, min_gram_length=lo, max_gram_length=hi,
                            max_skip_count=skips, ngram_counts=[0, 3, 9], ngram_indexes=[0, 1, 2, 3, 4, 5, 6],
                            pool_int64s=pool, weights=[0.5, 1.0, 2.0, 0.25, 3.0, 1.5, 4.0])
    assert_matches(make_model(node, {"x": x}, opset=9), {"x": x})
