"""Per-step communication statistics, filled in by the hooks, read by the training loop.

    stats = milktea.ddp.compress(model, TopK(0.01)).stats
    ...train a step...
    stats.last            # StepStats(step 3, compressed, 409.6 kB -> 4.1 kB (100x), ...)
"""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field


@dataclass
class StepStats:
    """What one rank's hook did in one backward pass.

    dense_bytes: the gradient's size (what plain DDP hands to all-reduce).
    payload_bytes: what this rank handed to collectives instead (packets, factors, dense parts).
    wire_bytes: what this rank transmitted given the collectives' algorithms
      (ring all-reduce 2(N-1)/N * M, ring all-gather (N-1) * M, padding included).
    compress_s / comm_s / decode_s: seconds spent compressing (error feedback included),
      inside collectives (emulated link included), and decoding + averaging.
    predicted_comm_s: the link model's time for the same collectives (0 without a link).
    ops: every collective as (kind, bytes), to price the step with another link model.
    """
    step: int
    compressed: bool = False
    dense_bytes: int = 0
    payload_bytes: int = 0
    wire_bytes: float = 0.0
    compress_s: float = 0.0
    comm_s: float = 0.0
    decode_s: float = 0.0
    predicted_comm_s: float = 0.0
    collectives: int = 0
    buckets: int = 0
    ops: list = field(default_factory=list)   # (collective, bytes per rank), in issue order

    @property
    def ratio(self) -> float:
        """Compression ratio of this step: dense bytes / payload bytes."""
        return self.dense_bytes / self.payload_bytes if self.payload_bytes else float("nan")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ratio"] = self.ratio
        d["ops"] = [list(o) for o in self.ops]
        return d

    def __repr__(self) -> str:
        kind = "compressed" if self.compressed else "dense"
        return (f"StepStats(step {self.step}, {kind}, {self.dense_bytes / 1e3:.1f} kB -> "
                f"{self.payload_bytes / 1e3:.1f} kB ({self.ratio:.1f}x), compress {self.compress_s * 1e3:.1f} ms, "
                f"comm {self.comm_s * 1e3:.1f} ms (link model {self.predicted_comm_s * 1e3:.1f} ms), "
                f"decode {self.decode_s * 1e3:.1f} ms, {self.collectives} collectives)")


@dataclass
class StatsLog:
    """History of StepStats; thread-safe (the hooks' communication thread writes to it)."""
    history: list[StepStats] = field(default_factory=list)
    keep: int | None = None   # keep only the last `keep` steps (None: all)

    def __post_init__(self):
        self._lock = threading.Lock()
        self._current: StepStats | None = None

    def current(self, step: int) -> StepStats:
        with self._lock:
            if self._current is None:
                self._current = StepStats(step)
            return self._current

    def add(self, step: int, **amounts) -> None:
        """Add amounts (seconds, bytes, counts) to the step in progress."""
        with self._lock:
            if self._current is None:
                self._current = StepStats(step)
            for k, v in amounts.items():
                if k == "compressed":
                    self._current.compressed |= bool(v)
                elif k == "op":
                    self._current.ops.append(v)
                else:
                    setattr(self._current, k, getattr(self._current, k) + v)

    def close_step(self) -> StepStats | None:
        with self._lock:
            s, self._current = self._current, None
            if s is not None:
                self.history.append(s)
                if self.keep is not None and len(self.history) > self.keep:
                    del self.history[: len(self.history) - self.keep]
            return s

    @property
    def last(self) -> StepStats | None:
        return self.history[-1] if self.history else None

    def mean(self, skip: int = 0) -> dict:
        """Averages over the steps after the first `skip` (warm-up) steps."""
        rows = self.history[skip:]
        if not rows:
            return {}
        keys = ["dense_bytes", "payload_bytes", "wire_bytes", "compress_s", "comm_s", "decode_s",
                "predicted_comm_s", "collectives"]
        out = {k: sum(getattr(r, k) for r in rows) / len(rows) for k in keys}
        out["ratio"] = out["dense_bytes"] / out["payload_bytes"] if out["payload_bytes"] else float("nan")
        return out

    def __len__(self) -> int:
        return len(self.history)

    def __repr__(self) -> str:
        return f"StatsLog({len(self.history)} steps, last={self.last!r})"
