"""The 8x8 digits and their stratified train/test split, without importing scikit-learn.

scikit-learn ships the data (`sklearn/datasets/data/digits.csv.gz`), but importing it costs
about a second on an idle core and several on a busy one, in every worker process a run
starts. This module reads the same file and splits it with the same draws as
`sklearn.model_selection.train_test_split(..., stratify=y, random_state=seed)`, so every
number the course prints stays the same (a unit test compares the indices with sklearn's).

>>> X, y = load_digits()
>>> X.shape, y.shape, int(y.max())
((1797, 64), (1797,), 9)
>>> train, test = stratified_split(y, 0.2, 0)
>>> len(train), len(test), len(set(train.tolist()) | set(test.tolist()))
(1437, 360, 1797)
"""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np


def _data_file() -> Path:
    spec = importlib.util.find_spec("sklearn")      # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the digits data ship with scikit-learn: pip install scikit-learn")
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 images as float64 rows of 64 pixels, and their labels (int64)."""
    data = np.loadtxt(_data_file(), delimiter=",")
    return data[:, :-1].astype(np.float64), data[:, -1].astype(np.int64)


def _approximate_mode(counts: np.ndarray, draws: int, rng: np.random.RandomState) -> np.ndarray:
    """How many of `draws` each class gets: floor of its share, the rest by largest
    remainder, ties broken at random (sklearn.utils.extmath._approximate_mode)."""
    continuous = counts / counts.sum() * draws
    floored = np.floor(continuous)
    need = int(draws - floored.sum())
    if need > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (inds,) = np.where(remainder == value)
            add = min(len(inds), need)
            floored[rng.choice(inds, size=add, replace=False)] += 1
            need -= add
            if need == 0:
                break
    return floored.astype(int)


def stratified_split(y: np.ndarray, test_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices, each class split in proportion, drawn as scikit-learn's
    StratifiedShuffleSplit draws them with random_state=seed."""
    n = len(y)
    n_test = math.ceil(test_size * n)
    n_train = n - n_test
    classes, y_idx, counts = np.unique(y, return_inverse=True, return_counts=True)
    members = np.split(np.argsort(y_idx, kind="stable"), np.cumsum(counts)[:-1])
    rng = np.random.RandomState(seed)
    n_i = _approximate_mode(counts, n_train, rng)
    t_i = _approximate_mode(counts - n_i, n_test, rng)
    train, test = [], []
    for i in range(len(classes)):
        perm = members[i].take(rng.permutation(counts[i]), mode="clip")
        train.extend(perm[:n_i[i]])
        test.extend(perm[n_i[i]:n_i[i] + t_i[i]])
    return rng.permutation(train), rng.permutation(test)
