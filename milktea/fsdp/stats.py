"""What one rank sent in each training step, per collective: the numbers a chapter prints.

Every collective milktea.fsdp runs (or counts, for FSDP2's own) adds to the step in
progress: bytes this rank put on the wire, the bytes FSDP2's own collective would have
sent for the same call in the same dtype, time inside the collective (an emulated link's
wait included), time compressing and decoding, and the link model's time. A step ends
where the next one's forward pass begins (the first all-gather of a forward after a
reduce-scatter), so micro-batches accumulated without a reduce-scatter belong to their step.

    >>> s = FSDPStats()
    >>> s.record("all_gather_forward", sent=300, dense=300)
    >>> s.record("reduce_scatter", sent=76, dense=300)
    >>> s.record("all_gather_forward", sent=300, dense=300)      # the next step begins
    >>> len(s), s.last.bytes("reduce_scatter"), s.steps[0].ratio("reduce_scatter")
    (2, 0, 3.9473684210526314)
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..i18n import N_, _

#: The collectives of a sharded step, in the order a step issues them.
COLLECTIVES = ("all_gather_forward", "all_gather_backward", "reduce_scatter", "all_reduce")
LABELS = {"all_gather_forward": N_("all-gather (forward)"), "all_gather_backward": N_("all-gather (backward)"),
          "reduce_scatter": N_("reduce-scatter"), "all_reduce": N_("all-reduce (replicas)")}
COLUMNS = (N_("step"), N_("collective"), N_("calls"), N_("bytes"), N_("dense bytes"), N_("ratio"),
           N_("comm s"), N_("codec s"), N_("link model s"))


@dataclass
class Traffic:
    """One collective's share of a step on this rank.

    sent: bytes this rank put on the wire (ring reduce-scatter (N-1)/N x its input, ring
      all-gather (N-1) x its shard, all-to-all: its packets for the others, size tables
      included). dense: what FSDP2's own collective sends for the same calls, in the same
      dtype. comm_s: seconds inside the collectives (an emulated link's wait included);
      codec_s: compressing and decoding; link_s: the link model's seconds (0 without a link).
    """
    calls: int = 0
    sent: float = 0.0
    dense: float = 0.0
    comm_s: float = 0.0
    codec_s: float = 0.0
    link_s: float = 0.0

    def add(self, other: "Traffic") -> None:
        for k in ("calls", "sent", "dense", "comm_s", "codec_s", "link_s"):
            setattr(self, k, getattr(self, k) + getattr(other, k))


@dataclass
class StepTraffic:
    """One training step of one rank: its `Traffic` per collective."""
    step: int
    by: dict = field(default_factory=dict)

    def bytes(self, collective: str | None = None) -> float:
        """Bytes sent by `collective` (None: every collective) in this step."""
        return sum(t.sent for k, t in self.by.items() if collective in (None, k))

    def dense_bytes(self, collective: str | None = None) -> float:
        return sum(t.dense for k, t in self.by.items() if collective in (None, k))

    def ratio(self, collective: str | None = None) -> float:
        """FSDP2's own bytes / the bytes sent (nan when nothing was sent)."""
        sent = self.bytes(collective)
        return self.dense_bytes(collective) / sent if sent else float("nan")

    def __repr__(self) -> str:
        parts = [f"{k} {_mb(t.sent)}" + (f" ({t.dense / t.sent:.2f}x fewer)" if t.sent and t.dense != t.sent else "")
                 for k, t in sorted(self.by.items(), key=lambda kv: COLLECTIVES.index(kv[0]))]
        return f"StepTraffic(step {self.step}: " + ", ".join(parts) + ")"


def _mb(n: float) -> str:
    return f"{n / 1e6:.3f} MB" if n < 1e8 else f"{n / 1e6:,.0f} MB"


class FSDPStats:
    """Per-step traffic of one rank (`steps`, a list of `StepTraffic`); thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self.steps: list[StepTraffic] = []

    def record(self, collective: str, *, sent: float, dense: float, comm_s: float = 0.0, codec_s: float = 0.0,
               link_s: float = 0.0, calls: int = 1) -> None:
        """Add one call of `collective` (one of COLLECTIVES) to the step in progress."""
        if collective not in COLLECTIVES:
            raise ValueError(f"collective must be one of {COLLECTIVES}, got {collective!r}")
        with self._lock:
            cur = self.steps[-1] if self.steps else None
            if cur is None or (collective == "all_gather_forward" and "reduce_scatter" in cur.by):
                cur = StepTraffic(len(self.steps))
                self.steps.append(cur)
            cur.by.setdefault(collective, Traffic()).add(Traffic(calls, sent, dense, comm_s, codec_s, link_s))

    @property
    def last(self) -> StepTraffic | None:
        """The latest step (the one in progress, once it has begun)."""
        return self.steps[-1] if self.steps else None

    def __len__(self) -> int:
        return len(self.steps)

    def clear(self) -> None:
        with self._lock:
            self.steps.clear()

    def series(self, collective: str | None = None, what: str = "sent") -> list[float]:
        """One number per step, for a plot: `what` ("sent", "dense", "comm_s", "codec_s",
        "link_s" or "calls") summed over `collective` (None: all of them)."""
        if what not in ("calls", "sent", "dense", "comm_s", "codec_s", "link_s"):
            raise ValueError(f"what must be a field of Traffic (sent, dense, comm_s, ...), got {what!r}")
        return [sum(getattr(t, what) for k, t in s.by.items() if collective in (None, k)) for s in self.steps]

    def mean(self, skip: int = 0) -> dict:
        """Per collective, the mean over the steps after the first `skip` (warm-up):
        {collective: {"calls", "bytes", "dense_bytes", "ratio", "comm_s", "codec_s", "link_s"}}."""
        rows = self.steps[skip:]
        out = {}
        for k in COLLECTIVES:
            tot = Traffic()
            for s in rows:
                if k in s.by:
                    tot.add(s.by[k])
            if tot.calls:
                n = len(rows)
                out[k] = {"calls": tot.calls / n, "bytes": tot.sent / n, "dense_bytes": tot.dense / n,
                          "ratio": tot.dense / tot.sent if tot.sent else float("nan"), "comm_s": tot.comm_s / n,
                          "codec_s": tot.codec_s / n, "link_s": tot.link_s / n}
        return out

    def rows(self, skip: int = 0) -> list[dict]:
        """One dict per step and collective (the table's rows, keys as COLUMNS)."""
        out = []
        for s in self.steps[skip:]:
            for k in COLLECTIVES:
                t = s.by.get(k)
                if t is not None:
                    out.append({"step": s.step, "collective": LABELS[k], "calls": t.calls, "bytes": t.sent,
                                "dense bytes": t.dense, "ratio": t.dense / t.sent if t.sent else float("nan"),
                                "comm s": t.comm_s, "codec s": t.codec_s, "link model s": t.link_s})
        return out

    def table(self, skip: int = 0) -> str:
        """The mean step (after `skip` warm-up steps) as a Markdown table, one row per collective."""
        from ..tables import markdown_table
        m = self.mean(skip)
        if not m:
            return _("no step recorded yet")
        rows = [{"collective": LABELS[k], "calls": v["calls"], "bytes": v["bytes"], "dense bytes": v["dense_bytes"],
                 "ratio": v["ratio"], "comm s": v["comm_s"], "codec s": v["codec_s"],
                 "link model s": v["link_s"]} for k, v in m.items()]
        return markdown_table(rows)

    def __repr__(self) -> str:
        return f"FSDPStats({len(self.steps)} steps, last={self.last!r})"
