"""milktea.timing: the one median and the one timing loop the library uses."""
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from milktea.timing import codec_seconds, median, time_it


@given(st.lists(st.floats(allow_nan=False), min_size=1, max_size=50))
def test_median_is_a_measured_value_at_the_middle(xs):
    m = median(xs)
    assert m in xs
    assert sum(x < m for x in xs) <= len(xs) // 2 < sum(x <= m for x in xs)
    if len(xs) % 2:
        assert m == statistics.median(xs)
    else:
        assert m == sorted(xs)[len(xs) // 2]  # the upper middle, not an average


def test_median_by_key_and_of_nothing():
    rows = [{"s": 3}, {"s": 1}, {"s": 2}]
    assert median(rows, key=lambda r: r["s"]) == {"s": 2}
    with pytest.raises(ValueError, match="no values"):
        median([])


def test_time_it_warms_up_then_times_each_call():
    calls, syncs = [], []
    times = time_it(lambda: calls.append(1), repeat=4, warmup=2, sync=lambda: syncs.append(1))
    assert len(times) == 4 and all(t >= 0 for t in times)
    assert len(calls) == 6          # 2 untimed + 4 timed
    assert len(syncs) == 8          # before and after each timed call


def test_time_it_runs_before_untimed_ahead_of_each_try():
    import time
    calls = []
    times = time_it(lambda: calls.append("fn"), repeat=3, warmup=1, sync=lambda: calls.append("sync"),
                    before=lambda: (calls.append("before"), time.sleep(0.05)))
    assert calls == ["fn"] + ["before", "sync", "fn", "sync"] * 3    # warm-up calls fn alone
    assert max(times) < 0.05                                          # the sleep is not counted


@pytest.mark.parametrize("kwargs, error", [({"repeat": 0}, ValueError), ({"warmup": -1}, ValueError),
                                           ({"repeat": 2.0}, TypeError), ({"repeat": True}, TypeError)])
def test_time_it_rejects_bad_counts(kwargs, error):
    with pytest.raises(error, match="repeat|warmup"):
        time_it(lambda: None, **kwargs)


def test_codec_seconds_times_a_real_round_trip():
    from milktea import TopK
    assert 0 < codec_seconds(TopK(0.01), 10_000, repeats=3) < 10
    with pytest.raises(ValueError, match="numel"):
        codec_seconds(TopK(0.01), 0)
