"""The alpha-beta cost model: how long a message, a collective or a training step takes.

A link moves one message of M bytes in  alpha + M / B  seconds (alpha: latency per
message, B: bandwidth in bytes per second). Collectives are chains of such messages:

    >>> link = Link.gbit(10)                       # 10 Gbit/s, 50 us per message
    >>> M = gradient_bytes(25_000_000)             # a 25M-parameter model in fp32
    >>> round(ring_allreduce_time(M, 8, link), 3)  # 2(N-1) alpha + 2(N-1)/N M/B
    0.141

Sharded training (ZeRO stages 1-3, FSDP, HSDP) is priced here too: `step_bytes` (bytes
per rank per step by collective: reduce-scatter, all-gathers in forward and backward,
compressed variants at a compressor's `bytes_per_entry`) and `memory_per_rank` (params,
grads, optimizer state, error feedback's ledger). They live in milktea/fsdp/cost.py, on
top of this module's collectives, and load on first use:

    >>> from milktea.cost import memory_per_rank, step_bytes
    >>> [round(step_bytes(25_000_000, 4, stage=s)["total"] / 1e6) for s in (0, 1, 3)]   # MB, fp32
    [150, 150, 225]
    >>> round(memory_per_rank(25_000_000, 4, stage=3, optimizer_bytes=8)["total"] / 1e6)
    100
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .checks import check_int, check_number

COLLECTIVES = ("allreduce", "allgather", "alltoall", "ps", "compressed_allreduce")


@dataclass(frozen=True)
class Link:
    """One network link: `bandwidth` in bytes per second (beta = 1/bandwidth), `latency` in
    seconds per message (alpha).

    >>> Link.gbit(1)
    Link(1.00 Gbit/s, 50 us)
    >>> Link.gbit(1).transfer_time(125e6)   # 1 Gbit/s moves 125 MB in one second (+ latency)
    1.00005
    """
    bandwidth: float
    latency: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "bandwidth", check_number(self.bandwidth, "bandwidth (bytes/s)", 0, open_low=True))
        object.__setattr__(self, "latency", check_number(self.latency, "latency (seconds)", 0))

    @classmethod
    def gbit(cls, gbit_per_s: float, latency: float = 50e-6) -> "Link":
        """A link of `gbit_per_s` Gbit/s (1 Gbit/s = 125e6 bytes/s) and `latency` seconds."""
        return cls(check_number(gbit_per_s, "gbit_per_s", 0, open_low=True) * 125e6, latency)

    def transfer_time(self, nbytes) -> float:
        """Seconds to send one message of `nbytes` bytes: alpha + nbytes / B."""
        return _seconds(self.latency + check_number(nbytes, "nbytes", 0) / self.bandwidth, self)

    def __repr__(self) -> str:
        return f"Link({self.bandwidth / 125e6:.2f} Gbit/s, {self.latency * 1e6:.0f} us)"


def _check_link(link) -> Link:
    if not isinstance(link, Link):
        raise TypeError(f"link must be a milktea.cost.Link (e.g. Link.gbit(10)), got {type(link).__name__}")
    return link


def _seconds(t: float, link: Link) -> float:
    """A modelled time, refused when the link makes it overflow (a bandwidth of 1e-320
    bytes/s, a latency of 1e308 s): a number no table or comparison can use."""
    if not np.isfinite(t):
        raise ValueError(f"this link (bandwidth {link.bandwidth:g} bytes/s, latency {link.latency:g} s) "
                         f"gives an infinite time; give the bandwidth in bytes per second (e.g. "
                         f"Link.gbit(10)) and the latency in seconds")
    return t


def ring_allreduce_time(nbytes, workers: int, link: Link) -> float:
    """Ring all-reduce of an `nbytes` tensor: 2(N-1) steps, each moving M/N bytes.
    Time = 2(N-1) alpha + 2(N-1)/N * M / B, and 0 for a single worker."""
    M, N, link = check_number(nbytes, "nbytes", 0), check_int(workers, "workers", 1), _check_link(link)
    if N == 1:
        return 0.0
    return _seconds(2 * (N - 1) * link.latency + 2 * (N - 1) / N * M / link.bandwidth, link)


def allgather_time(nbytes_per_worker, workers: int, link: Link) -> float:
    """Ring all-gather where every worker contributes `nbytes_per_worker` bytes (e.g. its
    sparse packet): N-1 steps, each forwarding one worker's message.
    Time = (N-1) alpha + (N-1) M / B."""
    M, N = check_number(nbytes_per_worker, "nbytes_per_worker", 0), check_int(workers, "workers", 1)
    link = _check_link(link)
    return _seconds((N - 1) * (link.latency + M / link.bandwidth), link)


def alltoall_time(nbytes_per_peer, workers: int, link: Link) -> float:
    """Pairwise all-to-all where every worker sends `nbytes_per_peer` bytes to each of the
    N-1 others (the compressed all-reduce's chunks): N-1 rounds of one message each.
    Time = (N-1) alpha + (N-1) M / B.

    >>> alltoall_time(1e6, 4, Link.gbit(8, latency=0))
    0.003
    """
    M, N = check_number(nbytes_per_peer, "nbytes_per_peer", 0), check_int(workers, "workers", 1)
    link = _check_link(link)
    return _seconds((N - 1) * (link.latency + M / link.bandwidth), link)


def parameter_server_time(nbytes, workers: int, link: Link, servers: int = 1) -> float:
    """Push then pull through the servers' links: every worker pushes M bytes and pulls M
    bytes, spread over `servers` shards whose links are the bottleneck.
    Time = 2 N M / (servers B) + 2 alpha."""
    M, N, link = check_number(nbytes, "nbytes", 0), check_int(workers, "workers", 1), _check_link(link)
    servers = check_int(servers, "servers", 1)
    return _seconds(2 * N * M / (servers * link.bandwidth) + 2 * link.latency, link)


def compressed_allreduce_time(nbytes, workers: int, link: Link) -> float:
    """Compressed all-reduce of a worker's `nbytes` compressed gradient (its N chunk
    packets; milktea.distributed.compressed_allreduce): an all-to-all of the chunks, then
    an all-gather of the reduced chunks, each N-1 messages of M/N bytes.
    Time = 2(N-1) alpha + 2(N-1)/N * M / B: a ring all-reduce's formula on compressed bytes.

    >>> link = Link.gbit(10)
    >>> [round(compressed_allreduce_time(1e6, n, link) * 1e3, 2) for n in (2, 64, 1024)]
    [0.9, 7.88, 103.9]
    """
    M, N, link = check_number(nbytes, "nbytes", 0), check_int(workers, "workers", 1), _check_link(link)
    if N == 1:
        return 0.0
    return _seconds(2 * (N - 1) * (link.latency + M / N / link.bandwidth), link)


def allgather_bytes(nbytes_per_worker, workers: int) -> float:
    """Bytes each worker sends in a ring all-gather: (N-1) packets of M (it forwards the others')."""
    M, N = check_number(nbytes_per_worker, "nbytes_per_worker", 0), check_int(workers, "workers", 1)
    return (N - 1) * M


def alltoall_bytes(nbytes_per_peer, workers: int) -> float:
    """Bytes each worker sends in an all-to-all: one message of M to each of the N-1 others."""
    M, N = check_number(nbytes_per_peer, "nbytes_per_peer", 0), check_int(workers, "workers", 1)
    return (N - 1) * M


def compressed_allreduce_bytes(nbytes, workers: int) -> float:
    """Bytes each worker sends in a compressed all-reduce of an `nbytes` compressed gradient:
    N-1 chunks out, then its reduced chunk to N-1 workers: 2(N-1)/N * M, under 2M for any N."""
    M, N = check_number(nbytes, "nbytes", 0), check_int(workers, "workers", 1)
    return 2 * (N - 1) / N * M


def protocol_costs(nbytes, workers: int, link: Link, *, dense_bytes=None) -> dict:
    """Bytes and seconds per worker per step of each way to exchange a compressed gradient
    of `nbytes` (one worker's packet): "allgather" and "compressed_allreduce"; with
    `dense_bytes`, also "dense" (a ring all-reduce of the uncompressed gradient).

    >>> c = protocol_costs(40_000, 64, Link.gbit(10), dense_bytes=4_000_000)
    >>> {k: round(v["bytes"] / 1e3) for k, v in c.items()}      # kB per worker
    {'allgather': 2520, 'compressed_allreduce': 79, 'dense': 7875}
    """
    out = {"allgather": dict(bytes=allgather_bytes(nbytes, workers), seconds=allgather_time(nbytes, workers, link)),
           "compressed_allreduce": dict(bytes=compressed_allreduce_bytes(nbytes, workers),
                                        seconds=compressed_allreduce_time(nbytes, workers, link))}
    if dense_bytes is not None:
        out["dense"] = dict(bytes=ring_allreduce_bytes(dense_bytes, workers),
                            seconds=ring_allreduce_time(dense_bytes, workers, link))
    return out


def choose_protocol(nbytes, workers: int, link: Link, *, reduced_nbytes=None) -> str:
    """The faster way to exchange a compressed gradient by the cost model: "allgather" (every
    packet reaches every worker; no second compression) or "compressed_allreduce" (chunks
    averaged and compressed again: flat bytes, but a second compression error, kept by a
    server-side ledger). `nbytes`: one worker's packet for all-gather; `reduced_nbytes`: its
    N chunk packets together (default: the same; chunk headers add a little). Ties go to
    all-gather, which compresses once. With a calibrated `link` (milktea.distributed.calibrate)
    this is the `auto` choice.

    >>> link = Link.gbit(1)
    >>> choose_protocol(50_000, 2, link), choose_protocol(50_000, 64, link)
    ('allgather', 'compressed_allreduce')
    """
    car = nbytes if reduced_nbytes is None else reduced_nbytes
    t_gather = allgather_time(nbytes, workers, link)
    t_car = compressed_allreduce_time(car, workers, link)
    return "compressed_allreduce" if t_car < t_gather else "allgather"


def ring_allreduce_bytes(nbytes, workers: int) -> float:
    """Bytes each worker sends in a ring all-reduce: 2(N-1)/N * M (close to 2M for large N)."""
    M, N = check_number(nbytes, "nbytes", 0), check_int(workers, "workers", 1)
    return 2 * (N - 1) / N * M


def gradient_bytes(params, bytes_per_param: int = 4) -> int:
    """Bytes of one full gradient: parameter count x bytes per parameter (fp32: 4).

    >>> gradient_bytes(175e9) / 1e9    # a 175B-parameter model, fp32 gradient, in GB
    700.0
    """
    p, b = check_number(params, "params", 0), check_number(bytes_per_param, "bytes_per_param", 0, open_low=True)
    return int(round(p * b))


def comm_time(nbytes, workers: int, link: Link, collective: str = "allreduce", servers: int = 1) -> float:
    """Time of one exchange of `nbytes` per worker with the named collective:
    "allreduce" (dense, fp16, PowerSGD factors: packets that can be summed on the wire),
    "allgather" (sparse or quantized packets, which can't), "ps" (parameter server) or
    "compressed_allreduce" (a worker's compressed gradient in chunks, reduced and re-compressed)."""
    if collective == "allreduce":
        return ring_allreduce_time(nbytes, workers, link)
    if collective == "allgather":
        return allgather_time(nbytes, workers, link)
    if collective == "alltoall":
        return alltoall_time(nbytes, workers, link)
    if collective == "ps":
        return parameter_server_time(nbytes, workers, link, servers)
    if collective == "compressed_allreduce":
        return compressed_allreduce_time(nbytes, workers, link)
    raise ValueError(f"collective must be one of {COLLECTIVES}, got {collective!r}")


def wire_bytes(nbytes, workers: int, collective: str = "allreduce") -> float:
    """Bytes each worker transmits in one exchange of `nbytes` with the named collective
    (the formulas of `ring_allreduce_bytes`, `allgather_bytes`, `alltoall_bytes` and
    `compressed_allreduce_bytes`; "ps": pushed and pulled). Called for every collective a
    hook issues, so it checks its arguments itself, with no helper calls.

    >>> wire_bytes(100, 4), wire_bytes(100, 4, "allgather"), wire_bytes(100, 4, "alltoall")
    (150.0, 300, 300)
    """
    if not (isinstance(workers, int) and workers >= 1 and nbytes >= 0):
        check_number(nbytes, "nbytes", 0)
        check_int(workers, "workers", 1)
    if collective in ("allreduce", "compressed_allreduce"):
        return 2 * (workers - 1) / workers * nbytes
    if collective in ("allgather", "alltoall"):
        return (workers - 1) * nbytes
    if collective == "ps":
        return 2 * nbytes
    raise ValueError(f"collective must be one of {COLLECTIVES}, got {collective!r}")


def iteration_time(compute, comm, *, overlap: bool = False, buckets: int | None = None) -> float:
    """One training step: compute then communicate (compute + comm), or with `overlap` the
    communication hides behind the backward pass. With `buckets` equal buckets the last
    bucket can only start once backward is done: max(c, m) + min(c, m) / buckets; without
    `buckets` the ideal limit max(c, m). Per-bucket latency is not added here: build the
    steps with `overlapped_timeline` for that.

    >>> iteration_time(0.2, 3.0), iteration_time(0.2, 3.0, overlap=True, buckets=4)
    (3.2, 3.05)
    """
    c, m = check_number(compute, "compute", 0), check_number(comm, "comm", 0)
    if not overlap:
        if buckets is not None:
            raise ValueError("buckets only matters with overlap=True")
        return c + m
    if buckets is None:
        return max(c, m)
    buckets = check_int(buckets, "buckets", 1)
    return max(c, m) + min(c, m) / buckets


def waiting_fraction(compute, comm) -> float:
    """Share of a step spent waiting for the network: comm / (compute + comm).

    >>> round(waiting_fraction(0.2, 3.0), 4)   # 0.2 s of work, 3 s on the phone
    0.9375
    """
    c, m = check_number(compute, "compute", 0), check_number(comm, "comm", 0)
    if c + m == 0:
        raise ValueError("compute and comm are both 0: nothing to divide")
    return m / (c + m)


def step_time(compute, wire_bytes, workers: int, link: Link, *, collective: str = "allreduce",
              overlap: bool = False, buckets: int | None = None) -> float:
    """A compressed (or dense) step: `compute` seconds plus exchanging `wire_bytes` per worker
    (a packet's real `nbytes`) with `collective`. Sparse and quantized packets must be
    all-gathered; dense, fp16 and PowerSGD factors are all-reduced.

    >>> link = Link.gbit(1)
    >>> dense = step_time(0.05, 4e6, 8, link)                            # 1M fp32 values
    >>> topk = step_time(0.05, 50_000, 8, link, collective="allgather")  # 1% Top-K packet
    >>> round(dense / topk, 1)
    2.0
    """
    return iteration_time(compute, comm_time(wire_bytes, workers, link, collective),
                          overlap=overlap, buckets=buckets)


@dataclass
class Timeline:
    """Start and end of every segment of an overlapped step (for Gantt charts)."""
    forward: tuple[float, float]
    backward: list[tuple[float, float]]
    comm: list[tuple[float, float]]
    total: float
    serial: float = field(default=0.0)   # the same work without overlap

    @property
    def exposed_comm(self) -> float:
        """Communication time not hidden behind compute."""
        end_of_compute = self.backward[-1][1] if self.backward else self.forward[1]
        return self.total - end_of_compute

    def __repr__(self) -> str:
        return (f"Timeline({len(self.backward)} buckets, total {self.total:.4g}s, serial {self.serial:.4g}s, "
                f"exposed comm {self.exposed_comm:.4g}s)")


def overlapped_timeline(backward_times, comm_times, forward=0.0) -> Timeline:
    """Bucketed overlap on one link: forward runs first, then the backward buckets in order;
    bucket i's communication starts when its backward is done AND the link is free (the
    previous bucket's communication finished).

    >>> overlapped_timeline([1, 1, 1], [2, 2, 2]).total    # 1 + 2 + 2 + 2
    7.0
    """
    b = [check_number(t, "backward_times[i]", 0) for t in backward_times]
    c = [check_number(t, "comm_times[i]", 0) for t in comm_times]
    if len(b) != len(c) or not b:
        raise ValueError(f"need one comm time per backward bucket (>= 1), got {len(b)} and {len(c)}")
    f = check_number(forward, "forward", 0)
    now, link_free, back, comm = f, 0.0, [], []
    for tb, tc in zip(b, c):
        back.append((now, now + tb))
        now += tb
        start = max(now, link_free)
        comm.append((start, start + tc))
        link_free = start + tc
    return Timeline((0.0, f), back, comm, max(now, link_free), serial=f + sum(b) + sum(c))


# ZeRO / FSDP pricing, defined in milktea/fsdp/cost.py (which builds on the collectives
# above): its names are this module's too, loaded on first use
#: and the fitting of a Link to timings, in milktea/calibration.py
FITTING = ("calibrate", "fit_allreduce_link")
SHARDED = ("step_bytes", "memory_per_rank", "bytes_per_entry", "reduce_scatter_bytes", "reduce_scatter_time",
           "all_gather_bytes", "all_to_all_bytes", "all_to_all_time", "STAGES")


def __getattr__(name: str):
    if name not in SHARDED and name not in FITTING:
        raise AttributeError(f"module 'milktea.cost' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module("milktea.calibration" if name in FITTING else "milktea.fsdp.cost"), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(SHARDED) | set(FITTING))
