"""The digits and their split without scikit-learn's import are scikit-learn's, bit for bit:
the same pixels and labels, the same train and test indices for every seed and test size
(the course's numbers rest on them)."""
import doctest

import numpy as np
import pytest

from milktea import digits_data

sklearn_datasets = pytest.importorskip("sklearn.datasets")
from sklearn.model_selection import StratifiedShuffleSplit  # noqa: E402


def test_the_data_are_sklearns():
    X, y = digits_data.load_digits()
    ref = sklearn_datasets.load_digits()
    assert X.dtype == np.float64 and y.dtype == np.int64
    np.testing.assert_array_equal(X, ref.data)
    np.testing.assert_array_equal(y, ref.target)


@pytest.mark.parametrize("seed,test_size", [(0, 0.2), (1, 0.2), (7, 0.25), (3, 0.1), (12345, 0.5)])
def test_the_split_is_sklearns(seed, test_size):
    _, y = digits_data.load_digits()
    want_train, want_test = next(StratifiedShuffleSplit(1, test_size=test_size, random_state=seed).split(y, y))
    train, test = digits_data.stratified_split(y, test_size, seed)
    np.testing.assert_array_equal(train, want_train)
    np.testing.assert_array_equal(test, want_test)


def test_uneven_classes_and_ties_as_sklearn():
    """Remainders that tie (the random tie-break) and a class of two."""
    y = np.array([0] * 2 + [1] * 5 + [2] * 5 + [3] * 7)
    for seed in range(20):
        want = next(StratifiedShuffleSplit(1, test_size=0.3, random_state=seed).split(y, y))
        got = digits_data.stratified_split(y, 0.3, seed)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_docstring():
    assert doctest.testmod(digits_data).failed == 0
