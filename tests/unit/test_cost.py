import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from milktea.cost import (Link, allgather_time, calibrate, comm_time, gradient_bytes, iteration_time,
                          overlapped_timeline, parameter_server_time, ring_allreduce_bytes,
                          ring_allreduce_time, step_time, waiting_fraction)


def test_link_units_and_repr():
    link = Link.gbit(1)
    assert link.bandwidth == 125e6 and link.latency == 50e-6
    assert repr(link) == "Link(1.00 Gbit/s, 50 us)"
    assert repr(Link.gbit(25, latency=2e-6)) == "Link(25.00 Gbit/s, 2 us)"
    assert link.transfer_time(250e6) == pytest.approx(2 + 50e-6)
    assert Link(1000.0).transfer_time(0) == 0


def test_hand_computed_values():
    link = Link(bandwidth=100.0, latency=1.0)     # 100 B/s, 1 s per message
    # N=4, M=400: 2*3 messages, 2*3/4*400 = 600 bytes at 100 B/s
    assert ring_allreduce_time(400, 4, link) == pytest.approx(6 + 6)
    assert ring_allreduce_time(400, 1, link) == 0
    assert ring_allreduce_bytes(400, 4) == 600
    assert ring_allreduce_bytes(400, 1) == 0
    assert allgather_time(50, 4, link) == pytest.approx(3 + 3 * 50 / 100)
    assert allgather_time(50, 1, link) == 0
    assert parameter_server_time(100, 4, link) == pytest.approx(2 * 4 * 100 / 100 + 2)
    assert parameter_server_time(100, 4, link, servers=4) == pytest.approx(2 * 100 / 100 + 2)
    assert comm_time(400, 4, link) == ring_allreduce_time(400, 4, link)
    assert comm_time(50, 4, link, "allgather") == allgather_time(50, 4, link)
    assert comm_time(100, 4, link, "ps", servers=2) == parameter_server_time(100, 4, link, 2)


def test_seed_figures():
    # a 175B-parameter model: ~700 GB of fp32 gradient
    assert gradient_bytes(175e9) == 700_000_000_000
    assert gradient_bytes(10, bytes_per_param=2) == 20
    # 0.2 s of compute and 3 s of communication: ~94% of the step is waiting
    assert round(waiting_fraction(0.2, 3.0) * 100) == 94
    # ring all-reduce traffic tends to twice the model size
    assert ring_allreduce_bytes(1.0, 1024) == pytest.approx(2.0, rel=1e-3)


def test_iteration_time_modes():
    assert iteration_time(0.2, 3.0) == pytest.approx(3.2)
    assert iteration_time(0.2, 3.0, overlap=True) == 3.0
    assert iteration_time(3.0, 0.2, overlap=True) == 3.0
    # equal buckets: the closed form equals the bucket-by-bucket timeline
    for c, m, b in [(1.0, 3.0, 4), (3.0, 1.0, 4), (2.0, 2.0, 1), (0.7, 0.3, 7)]:
        tl = overlapped_timeline([c / b] * b, [m / b] * b)
        assert iteration_time(c, m, overlap=True, buckets=b) == pytest.approx(tl.total)
    assert step_time(1.0, 400, 4, Link(100.0, 1.0)) == pytest.approx(1 + 12)
    assert step_time(1.0, 50, 4, Link(100.0, 1.0), collective="allgather") == pytest.approx(1 + 4.5)


def brute_force_ring_allreduce(values):
    """Run a real ring all-reduce (reduce-scatter, then all-gather) on N lists of numbers,
    message by message; return the result on every worker and the bytes each one sent."""
    n = len(values)
    chunks = [np.array_split(np.array(v, dtype=np.float64), n) for v in values]  # copies
    sent = [0] * n
    for step in range(n - 1):           # reduce-scatter: pass chunk (rank - step) to the right
        msgs = [(r, (r - step) % n, chunks[r][(r - step) % n].copy()) for r in range(n)]
        for r, c, data in msgs:
            chunks[(r + 1) % n][c] += data
            sent[r] += data.size * 8
    for step in range(n - 1):           # all-gather: pass the finished chunk (rank + 1 - step)
        msgs = [(r, (r + 1 - step) % n, chunks[r][(r + 1 - step) % n].copy()) for r in range(n)]
        for r, c, data in msgs:
            chunks[(r + 1) % n][c] = data
            sent[r] += data.size * 8
    return [np.concatenate(c) for c in chunks], sent


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 9), per_chunk=st.integers(1, 20), seed=st.integers(0, 99))
def test_ring_allreduce_brute_force(n, per_chunk, seed):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(n * per_chunk) for _ in range(n)]
    result, sent = brute_force_ring_allreduce(values)
    for r in result:
        np.testing.assert_allclose(r, np.sum(values, axis=0), rtol=1e-12, atol=1e-12)
    M = n * per_chunk * 8
    assert all(s == ring_allreduce_bytes(M, n) for s in sent)
    # 2(N-1) rounds, each one message of M/N bytes per worker, all in parallel
    link = Link(bandwidth=1e3, latency=0.01)
    assert ring_allreduce_time(M, n, link) == pytest.approx(2 * (n - 1) * link.transfer_time(M / n))


def tick_simulation(forward, backward, comm):
    """Brute force: advance time one unit at a time (integer durations >= 1), one compute
    stream, one link that picks up the next bucket once its backward is finished."""
    t, compute_left, bucket, b_left = 0, forward, 0, None
    ready, sending, c_left, sent = 0, False, 0, 0
    while sent < len(comm):
        if not sending and sent < ready:
            sending, c_left = True, comm[sent]
        if compute_left > 0:
            compute_left -= 1
        elif bucket < len(backward):
            b_left = (backward[bucket] if b_left is None else b_left) - 1
        if sending:
            c_left -= 1
        t += 1
        if b_left == 0:
            ready, bucket, b_left = ready + 1, bucket + 1, None
        if sending and c_left == 0:
            sending, sent = False, sent + 1
    return t


@settings(max_examples=60, deadline=None)
@given(forward=st.integers(0, 5), pairs=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6)),
                                                 min_size=1, max_size=6))
def test_timeline_matches_tick_simulation(forward, pairs):
    backward, comm = [p[0] for p in pairs], [p[1] for p in pairs]
    tl = overlapped_timeline(backward, comm, forward=forward)
    assert tl.total == tick_simulation(forward, backward, comm)
    assert tl.serial == forward + sum(backward) + sum(comm)
    assert max(forward + sum(backward), sum(comm)) <= tl.total <= tl.serial
    # segments: compute back to back, link never does two things at once, comm after its bucket
    for (bs, be), (cs, ce), tb, tc in zip(tl.backward, tl.comm, backward, comm):
        assert be - bs == tb and ce - cs == tc and cs >= be
    for (_, e0), (s1, _) in zip(tl.comm, tl.comm[1:]):
        assert s1 >= e0
    assert tl.exposed_comm == tl.total - tl.backward[-1][1]


def test_timeline_example_and_plot():
    import matplotlib
    matplotlib.use("Agg")
    tl = overlapped_timeline([1, 1, 1], [0.5, 0.5, 3], forward=1)
    assert tl.backward == [(1, 2), (2, 3), (3, 4)]
    assert tl.comm == [(2, 2.5), (3, 3.5), (4, 7)]
    assert tl.total == 7 and tl.exposed_comm == 3
    assert "3 buckets" in repr(tl)
    import matplotlib.pyplot as plt
    from milktea.plots.engineering import gantt
    _fig, ax = plt.subplots()
    gantt(ax, tl, "three buckets")
    assert len(ax.patches) + len(ax.collections) >= 4


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "ps"])
def test_calibrate_recovers_alpha_and_bandwidth(collective):
    true = Link(bandwidth=1.25e9, latency=30e-6)
    rng = np.random.default_rng(0)
    sizes = np.repeat(np.logspace(3, 8, 12), 5)
    exact = np.array([comm_time(m, 8, true, collective) for m in sizes])
    noisy = exact * (1 + 0.02 * rng.standard_normal(sizes.size))
    fit = calibrate(sizes, noisy, 8, collective)
    assert fit.bandwidth == pytest.approx(true.bandwidth, rel=0.03)
    assert fit.latency == pytest.approx(true.latency, rel=0.1)
    exact_fit = calibrate(sizes, exact, 8, collective)
    assert exact_fit.bandwidth == pytest.approx(true.bandwidth, rel=1e-9)
    assert exact_fit.latency == pytest.approx(true.latency, rel=1e-6)


def test_calibrate_refuses_bad_data():
    with pytest.raises(ValueError, match="2 distinct"):
        calibrate([1e6, 1e6, 1e6], [1.0, 1.1, 0.9], 4)
    with pytest.raises(ValueError, match="non-positive time per byte"):
        calibrate([1e3, 1e6], [1.0, 0.5], 4)
    with pytest.raises(ValueError, match="negative latency"):
        calibrate([1e3, 1e6], [1e-4, 1.0], 4)
    with pytest.raises(ValueError, match="one time per size"):
        calibrate([1e3, 1e6], [1.0], 4)
    with pytest.raises(ValueError, match="workers >= 2"):
        calibrate([1e3, 1e6], [1.0, 2.0], 1)
    with pytest.raises(ValueError, match="collective"):
        calibrate([1e3, 1e6], [1.0, 2.0], 4, collective="broadcast")
    with pytest.raises(ValueError, match="finite"):
        calibrate([1e3, 1e6], [1.0, math.nan], 4)


def test_input_validation_messages():
    with pytest.raises(ValueError, match="bandwidth"):
        Link(-1.0)
    with pytest.raises(ValueError, match="bandwidth"):
        Link(0.0)
    with pytest.raises(ValueError, match="latency"):
        Link(1e9, -1e-6)
    with pytest.raises(TypeError, match="bandwidth"):
        Link("fast")
    with pytest.raises(ValueError, match="workers must be >= 1"):
        ring_allreduce_time(100, 0, Link.gbit(1))
    with pytest.raises(TypeError, match="workers must be an int"):
        ring_allreduce_time(100, 2.5, Link.gbit(1))
    with pytest.raises(TypeError, match="Link"):
        ring_allreduce_time(100, 2, 1e9)
    with pytest.raises(ValueError, match="nbytes"):
        allgather_time(-5, 2, Link.gbit(1))
    with pytest.raises(ValueError, match="servers"):
        parameter_server_time(100, 2, Link.gbit(1), servers=0)
    with pytest.raises(TypeError, match="servers must be an int"):    # a wrong type is a TypeError
        parameter_server_time(100, 2, Link.gbit(1), servers=2.0)
    assert parameter_server_time(100, 2, Link.gbit(1), servers=np.int64(2)) > 0
    with pytest.raises(ValueError, match="collective"):
        comm_time(100, 2, Link.gbit(1), "gossip")
    with pytest.raises(ValueError, match="buckets only matters"):
        iteration_time(1, 1, buckets=4)
    with pytest.raises(ValueError, match="buckets"):
        iteration_time(1, 1, overlap=True, buckets=0)
    with pytest.raises(TypeError, match="buckets must be an int"):
        iteration_time(1, 1, overlap=True, buckets=True)
    with pytest.raises(ValueError, match="both 0"):
        waiting_fraction(0, 0)
    with pytest.raises(ValueError, match="one comm time per backward"):
        overlapped_timeline([1, 2], [1])
    with pytest.raises(ValueError, match="finite"):
        Link.gbit(math.inf)
    with pytest.raises(dataclass_error()):
        Link.gbit(1).bandwidth = 5


def dataclass_error():
    from dataclasses import FrozenInstanceError
    return FrozenInstanceError


def test_scissors():
    from milktea.experiments.bottleneck import scissors
    from milktea.plots import bottleneck as bplots
    s = scissors(years=8, compute_growth=2.0, bandwidth_growth=1.25, points=9)
    np.testing.assert_allclose(s.years, np.arange(9))
    np.testing.assert_allclose(s.compute, 2.0 ** np.arange(9))
    np.testing.assert_allclose(s.bandwidth, 1.25 ** np.arange(9))
    np.testing.assert_allclose(s.gap, 1.6 ** np.arange(9))
    assert s.gap[0] == 1 and np.all(np.diff(s.gap) > 0)
    with pytest.raises(ValueError, match="points"):
        scissors(points=1)
    with pytest.raises(TypeError, match="points must be an int"):
        scissors(points=9.0)
    import matplotlib
    matplotlib.use("Agg")
    assert "gap" in bplots.scissors(s).get_title()


# --- the compressed all-reduce beside ring all-reduce and all-gather ---------------------------
def test_compressed_allreduce_bytes_are_flat_in_n_and_allgather_grows():
    from milktea.cost import (allgather_bytes, compressed_allreduce_bytes, compressed_allreduce_time,
                              protocol_costs, ring_allreduce_bytes)
    M = 10_000
    car = [compressed_allreduce_bytes(M, n) for n in (8, 64, 1024)]
    assert max(car) / min(car) < 1.15 and all(b < 2 * M for b in car)
    assert [allgather_bytes(M, n) for n in (2, 8, 64)] == [M, 7 * M, 63 * M]
    # the same formula as a dense ring all-reduce, applied to the compressed bytes
    for n in (1, 2, 5, 64):
        assert compressed_allreduce_bytes(M, n) == pytest.approx(ring_allreduce_bytes(M, n))
        assert compressed_allreduce_time(M, n, Link(1e8, 1e-5)) == pytest.approx(
            ring_allreduce_time(M, n, Link(1e8, 1e-5)))
    c = protocol_costs(M, 64, Link(1e8, 1e-5), dense_bytes=100 * M)
    assert c["compressed_allreduce"]["seconds"] < c["allgather"]["seconds"] < c["dense"]["seconds"]
    assert comm_time(M, 64, Link(1e8, 1e-5), "compressed_allreduce") == c["compressed_allreduce"]["seconds"]


def test_choose_protocol_switches_where_the_model_says():
    from milktea.cost import allgather_time, choose_protocol, compressed_allreduce_time
    link = Link.gbit(1, latency=1e-3)
    # small packets on a high-latency link: all-gather's N-1 messages vs 2(N-1): all-gather wins
    assert choose_protocol(1_000, 8, link) == "allgather"
    for n in (2, 3, 8, 64, 1024):
        for M in (1e3, 1e5, 1e7):
            pick = choose_protocol(M, n, link)
            faster = ("compressed_allreduce" if compressed_allreduce_time(M, n, link) < allgather_time(M, n, link)
                      else "allgather")
            assert pick == faster
    assert choose_protocol(1e6, 64, link) == "compressed_allreduce"
    # chunk headers make the reduced packets larger: at 2 workers all-gather is then faster
    assert choose_protocol(1e6, 2, link, reduced_nbytes=1.01e6) == "allgather"


def test_calibrate_fits_compressed_allreduce_times():
    from milktea.cost import compressed_allreduce_time
    link = Link(2e8, 3e-5)
    sizes = [1e3, 1e5, 1e7]
    got = calibrate(sizes, [compressed_allreduce_time(m, 6, link) for m in sizes], 6, "compressed_allreduce")
    assert got.bandwidth == pytest.approx(2e8) and got.latency == pytest.approx(3e-5)
