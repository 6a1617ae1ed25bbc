"""Naming a hung rank, in process: where a rank is, which rank stopped, what a timeout says.
(The launches that exercise it end to end are in tests/integration/test_launch.py.)"""
import json
import threading
import time

from milktea.distributed import hang
from milktea.distributed.hang import Beat, after_timeout, stopped, timed_out, where

GLOO = "RuntimeError: [../unbound_buffer.cc:78] Timed out waiting 6000ms for recv operation to complete"


def _blocked_in(path: str):
    """A thread blocked inside a function whose code says it lives in `path`; (thread, release)."""
    scope: dict = {}
    exec(compile("def wait(event):\n    event.wait()\n", path, "exec"), scope)
    release = threading.Event()
    thread = threading.Thread(target=scope["wait"], args=(release,), daemon=True)
    thread.start()
    time.sleep(0.05)
    return thread, release


def test_a_frame_without_a_code_object_does_not_stop_the_heartbeat(monkeypatch):
    """A frame caught mid-construction (seen with torch's compiler) holds no code object: the
    heartbeat names what it can and goes on, where it raised AttributeError in its thread."""
    from types import SimpleNamespace
    inner = SimpleNamespace(f_code={}, f_lineno=None, f_back=None)
    outer = SimpleNamespace(f_code=SimpleNamespace(co_filename="/x/torch/distributed/c10d.py", co_name="wait"),
                            f_lineno=3, f_back=None)
    monkeypatch.setattr(hang.sys, "_current_frames", lambda: {1: inner, 2: outer})
    assert where(1) == ("?:None in ?", True)


def test_a_thread_inside_a_collective_makes_the_rank_waiting():
    spot, waiting = where(threading.get_ident())
    assert not waiting and spot.endswith("in where")              # called from the main thread itself
    for path in ("/x/torch/distributed/distributed_c10d.py", "/x/milktea/distributed/comm.py"):
        thread, release = _blocked_in(path)                       # DDP hook's thread in Comm, say
        try:
            assert where(threading.get_ident())[1], path
        finally:
            release.set()
            thread.join()
    thread, release = _blocked_in("/x/milktea/distributed/hooks.py")   # an idle queue: not waiting
    try:
        assert not where(threading.get_ident())[1]
    finally:
        release.set()
        thread.join()


def beats(*states):
    out = {}
    for r, (steps, waiting) in enumerate(states):
        out[r] = Beat()
        out[r].update(steps, f"train.py:{10 + r} in step", waiting)
    return out


def test_the_rank_named_is_the_one_not_waiting_then_the_one_behind():
    assert stopped(beats((5, True), (5, False), (5, True)), [0, 1, 2]) == 1
    assert stopped(beats((5, False), (4, False)), [0, 1]) == 1
    assert stopped(beats((3, True), (4, True)), [0, 1]) == 0


def test_after_a_timeout_the_silent_peer_is_named_with_what_it_was_doing():
    b = beats((5, True), (5, False))
    h = after_timeout("launch", b, 0, GLOO, [1])
    assert h.rank == 1 and h.steps == {0: 5, 1: 5}
    assert "rank 1 stopped making progress after 5 steps" in str(h) and "busy at train.py:11 in step" in str(h)
    assert "Rank 0 waited for it in a collective until that timed out (Timed out waiting 6000ms for recv " \
           "operation to complete)" in str(h)
    assert after_timeout("launch", b, 0, "ValueError: bad lr", [1]) is None    # not a timeout: as it was
    assert after_timeout("launch", b, 0, GLOO, []) is None                     # nobody else alive
    assert after_timeout("launch", beats((5, True), (5, True)), 0, GLOO, [1]) is None   # all wait
    silent = beats((5, True), (5, False))
    silent[1] = Beat()                                            # never beat: holding the interpreter
    assert "no heartbeat ever" in str(after_timeout("launch", silent, 0, GLOO, [1]))


def test_timeouts_are_recognised_and_nothing_else():
    assert timed_out(GLOO) and timed_out("Watchdog caught collective operation timeout: WorkNCCL")
    assert not timed_out("") and not timed_out("ValueError: k=11 is out of range")


class DictStore:
    """The two calls `watch` makes of a c10d store, over a dict."""

    def __init__(self):
        self.data = {}

    def set(self, key, value):
        self.data[key] = value.encode() if isinstance(value, str) else value

    def check(self, keys):
        return all(k in self.data for k in keys)

    def get(self, key):
        return self.data[key]


def test_under_torchrun_the_peers_beats_come_from_the_store():
    store = DictStore()
    now = time.time()
    store.set("milktea/beat/1", json.dumps([5, "train.py:42 in step", False, now - 0.3, 7.0]))
    store.set("milktea/beat/2", json.dumps([5, "comm.py:36 in _finish", True, now - 0.3, 6.0]))
    h = hang._peer_hang(store, 0, 3, GLOO)
    assert h.rank == 1 and "busy at train.py:42 in step" in str(h) and "7 s ago" in str(h)
    assert str(h).startswith("seen from rank 0: rank 1 stopped making progress")
    assert hang._peer_hang(DictStore(), 0, 2, GLOO) is None                    # no peer ever beat
