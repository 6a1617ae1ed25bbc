"""A fault-tolerant run on this machine: a lighthouse, one process per replica group, the
faults to inject, and the end of every process it started (also on an error, Ctrl-C or
SIGTERM: each process leads a session of its own and is killed with it, and each dies
with its parent if the parent itself is killed).

    from milktea.local import DiLoCo
    from milktea.local.dist import RunConfig
    from milktea.local.ft import Kill, start
    job = start(DiLoCo(inner_steps=20), RunConfig(task="gpt", steps=600), groups=3,
                faults=[Kill(group=2, at_step=5, restart_after=10.0)])
    ...                                   # the run goes on in the background
    result = job.wait()                   # FTResult: result.quorum_log, result.groups, ...

`python -m milktea.local --ft --groups 3 ...` does the same from the shell.
"""
from __future__ import annotations

import glob
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from ...checks import check_number
from ..config import DiLoCo
from ..dist import RunConfig
from .config import FTConfig, check_groups, check_kills
from .proc import MARK, kill_session, left_behind

ENGINES = {"milktea": "milktea.local.ft.group", "torchft": "milktea.local.ft.reference"}


class FTError(RuntimeError):
    """A replica group failed (not a fault the run injected): `group`, `error`, `log`."""

    def __init__(self, group: int, error: str, log: str = ""):
        self.group, self.error, self.log = group, error, log
        super().__init__(f"replica group {group} failed: {error}" + (f"\n--- its log ends ---\n{log}" if log else ""))


class _Proc:
    def __init__(self, group: int, incarnation: int, popen: subprocess.Popen, events: str, standby: bool):
        self.group, self.incarnation, self.popen, self.events = group, incarnation, popen, events
        self.offset, self.t, self.killed, self.code, self.failure = 0, 0, False, None, None
        self.started, self.standby = time.time(), standby


def check_run(scheme, run: RunConfig, engine: str = "milktea") -> None:
    if not isinstance(scheme, DiLoCo):
        raise TypeError(f"a fault-tolerant run takes a milktea.local.DiLoCo(...) scheme, got {type(scheme).__name__}"
                        f" (under data parallelism every step would wait for every group)")
    if not isinstance(run, RunConfig):
        raise TypeError(f"run must be milktea.local.dist.RunConfig(...), got {type(run).__name__}")
    if run.steps % scheme.inner_steps:
        raise ValueError(f"steps={run.steps} is not a multiple of inner_steps H={scheme.inner_steps}: a run ends on "
                         f"an outer step")
    if run.link_gbit is not None or run.checkpoint or run.resume:
        raise ValueError("a fault-tolerant run has no emulated link and no checkpoint files: a group that fails "
                         "is recovered from a live peer (leave link_gbit, checkpoint and resume unset)")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {tuple(ENGINES)}, got {engine!r}")
    if engine == "torchft" and (scheme.compressor is not None or scheme.fragments != 1 or scheme.alpha):
        raise ValueError("engine='torchft' runs torchft's own DiLoCo, the yardstick: fp32 pseudo-gradients "
                         "(compressor=None), one fragment, alpha 0")


class FTJob:
    """One run: `start()` it, then `wait()` for its FTResult (or `stop()` it).

    groups: how many replica groups (ids 0 .. n-1), or a list of ids; ft: FTConfig;
    faults: Kill(...)s; folder: where the events, logs, quorum.json and result.json go (a
    new temporary folder by default); lighthouse: a running lighthouse's address (default:
    start one); engine: "milktea" or "torchft" (torchft's own DiLoCo, fp32 only); timeout:
    the whole run's limit in seconds. standby: the process that restarts a killed group is
    started with the others and waits, loaded, until its restart time (a standby replica):
    its recovery then measures torchft's part (heartbeats, quorum, state transfer) without
    the seconds Python and torch take to load; by default it is started at its restart
    time, cold."""

    def __init__(self, scheme, cfg: RunConfig, *, groups=3, ft: FTConfig | None = None, faults=(),
                 folder: str | None = None, lighthouse: str | None = None, engine: str = "milktea",
                 timeout: float = 900.0, env: dict | None = None, standby: bool = False):
        from .engine import require
        require()                                    # a clear ImportError before anything starts
        check_run(scheme, cfg, engine)
        self.ft = ft if ft is not None else FTConfig()
        if not isinstance(self.ft, FTConfig):
            raise TypeError(f"ft must be milktea.local.ft.FTConfig(...), got {type(self.ft).__name__}")
        self.scheme, self.cfg, self.engine = scheme, cfg, engine
        self.ids = check_groups(groups)
        self.world = max(self.ids) + 1 if not isinstance(groups, int) else groups
        self.faults = check_kills(faults, self.ids, cfg.steps // scheme.inner_steps)
        self.timeout = check_number(timeout, "timeout", 0, open_low=True)
        self.lighthouse, self.standby = lighthouse, bool(standby)
        if lighthouse is not None:
            from .lighthouse import address, status
            self.lighthouse = address(lighthouse)
            status(self.lighthouse)                  # LighthouseUnreachable: nothing is started
        if folder is not None and glob.glob(os.path.join(folder, "group*-*.jsonl")):
            raise ValueError(f"{folder} holds another run's events already: give each run a folder of its own")
        self.folder = folder
        self.env = dict(env or {})
        self.run_id = uuid.uuid4().hex[:12]
        self.procs: list[_Proc] = []
        self.kills: dict[int, dict] = {}
        self.error: BaseException | None = None
        self.result = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._light = None

    # --- the parent's side -----------------------------------------------------------------
    def start(self) -> "FTJob":
        if self._thread is not None:
            raise RuntimeError("this run was started already; make a new FTJob for another run")
        self.folder = self.folder or tempfile.mkdtemp(prefix="milktea-ft-")
        os.makedirs(self.folder, exist_ok=True)
        self.t0 = time.time()
        self._thread = threading.Thread(target=self._main, name="milktea-ft", daemon=True)
        self._thread.start()
        return self

    def _env(self) -> dict:
        env = dict(os.environ, **self.env)
        for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k, None)                         # a replica group is a world of its own
        env[MARK] = self.run_id
        for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = str(self.ft.threads)
        env.setdefault("RUST_LOG", "warn")
        return env

    def _group_env(self, group: int) -> dict:
        # the device rule (milktea.device.rank_device) sees each group as one local rank of the
        # machine: group g takes cuda:g when every group has a GPU of its own (then NCCL), else the CPU
        return dict(self._env(), LOCAL_RANK=str(group), LOCAL_WORLD_SIZE=str(self.world))

    def _spawn(self, group: int, incarnation: int, standby: bool = False) -> None:
        name = os.path.join(self.folder, f"group{group}-{incarnation}")
        with open(name + ".log", "ab") as log:
            p = subprocess.Popen([sys.executable, "-m", ENGINES[self.engine], self.spec_path, str(group),
                                  str(incarnation)] + (["standby"] if standby else []), stdout=log,
                                 stderr=subprocess.STDOUT, env=self._group_env(group), start_new_session=True,
                                 cwd=os.getcwd())
        self.procs.append(_Proc(group, incarnation, p, name + ".jsonl", standby))

    def _main(self) -> None:
        # every process is started here, in this thread: the kernel's parent-death signal
        # follows the thread that started a process, and this one lives until they are gone
        try:
            if self.lighthouse is None:
                from .lighthouse import start
                self._light, self.lighthouse = start(os.path.join(self.folder, "lighthouse.log"), self.ft.min_groups,
                                                     self.ft.heartbeat_ms, self.ft.join_ms, self.ft.host,
                                                     env=self._env())
            self.spec_path = os.path.join(self.folder, "spec.pkl")
            with open(self.spec_path, "wb") as f:
                pickle.dump({"scheme": self.scheme, "run": self.cfg, "ft": self.ft, "groups": self.world,
                             "expect": list(self.ids),
                             "lighthouse": self.lighthouse, "folder": self.folder, "run_id": self.run_id}, f)
            for g in self.ids:
                self._spawn(g, 0)
            if self.standby:               # each restart's process loads now and waits to be let go
                for k in self.faults:
                    if k.restart_after is not None:
                        self._spawn(k.group, 1, standby=True)
            self._watch()
        except BaseException as e:   # noqa: BLE001  (handed to wait())
            self.error = e
        finally:
            self._end_all()
        if self.error is None:
            from .log import collect
            try:
                self.result = collect(self)
            except BaseException as e:   # noqa: BLE001
                self.error = e

    def _watch(self) -> None:
        H, deadline = self.scheme.inner_steps, time.monotonic() + self.timeout
        restarts: dict[int, float] = {}
        while True:
            if self._stop.is_set():
                raise KeyboardInterrupt("the run was stopped")
            for p in self.procs:
                self._read(p)
            for k in self.faults:
                p = self._current(k.group)
                if k.group not in self.kills and p.incarnation == 0 and p.code is None \
                        and p.t >= k.at_step * H + max(1, H // 2):
                    kill_session(p.popen.pid)
                    p.killed = True
                    self.kills[k.group] = {"group": k.group, "at_step": k.at_step, "killed": time.time(),
                                           "at_inner_step": p.t}
                    if k.restart_after is not None:
                        restarts[k.group] = time.time() + k.restart_after
            for g, when in list(restarts.items()):
                if time.time() >= when:
                    del restarts[g]
                    others = [q for q in self._live() if q.group != g]
                    spare = [q for q in self.procs if q.group == g and q.standby]
                    if not others:
                        self.kills[g]["restarted"] = None     # the others had finished
                    elif spare:
                        self.kills[g]["restarted"] = time.time()
                        spare[0].standby = False
                        open(spare[0].events[:-6] + ".go", "w").close()
                    else:
                        self.kills[g]["restarted"] = time.time()
                        self._spawn(g, self._current(g).incarnation + 1)
            for p in self.procs:
                if p.code is None and p.popen.poll() is not None:
                    p.code = p.popen.returncode
                    self._read(p)
                    if not p.killed and p.code != 0:
                        raise FTError(p.group, p.failure or f"exit code {p.code}", _tail(p.events[:-6] + ".log"))
            if not self._live() and not restarts:
                return                      # a standby never let go is ended with the rest
            if time.monotonic() > deadline:
                raise TimeoutError(f"the run did not end within {self.timeout:g} s; every process was stopped "
                                   f"(logs in {self.folder})")
            time.sleep(0.05)

    def _read(self, p: _Proc) -> None:
        import json
        try:
            with open(p.events, "rb") as f:
                f.seek(p.offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        end = chunk.rfind(b"\n") + 1
        p.offset += end
        for line in chunk[:end].splitlines():
            ev = json.loads(line)
            if ev["e"] == "step":
                p.t = ev["t"]
            elif ev["e"] == "error":
                p.failure = ev["error"]

    def _current(self, group: int) -> _Proc:
        return [p for p in self.procs if p.group == group and not p.standby][-1]

    def _live(self) -> list[_Proc]:
        return [p for p in self.procs if p.code is None and not p.standby]

    def _end_all(self) -> None:
        for p in self.procs:
            kill_session(p.popen.pid)
        for p in self.procs:
            try:
                p.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
            if p.code is None:
                p.code = p.popen.returncode
        if self._light is not None:
            from .lighthouse import stop
            stop(self._light)

    def left_behind(self) -> list[int]:
        """Pids of this run's processes still alive (none once the run has ended)."""
        return left_behind(self.run_id)

    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def wait(self, timeout: float | None = None):
        """The run's FTResult once every process has ended (TimeoutError if that takes
        longer than `timeout` seconds: the run goes on, wait again or stop it)."""
        if self._thread is None:
            raise RuntimeError("start() the run first")
        end = None if timeout is None else time.monotonic() + timeout
        while self._thread.is_alive():          # short joins: Ctrl-C reaches this thread
            self._thread.join(0.2)
            if end is not None and time.monotonic() > end and self._thread.is_alive():
                raise TimeoutError(f"the run is still going after {timeout:g} s")
        if self.error is not None:
            raise self.error
        return self.result

    def stop(self) -> None:
        """Stop every process of the run now and wait until they are gone."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def _tail(path: str, lines: int = 25) -> str:
    try:
        with open(path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")
    except OSError:
        return ""


def start(scheme, cfg: RunConfig, **kw) -> FTJob:
    """Start a fault-tolerant run in the background (see FTJob for the settings)."""
    return FTJob(scheme, cfg, **kw).start()


def run(scheme, cfg: RunConfig, **kw):
    """A fault-tolerant run from start to end: its FTResult. Ctrl-C or an error stops
    every process it started."""
    job = FTJob(scheme, cfg, **kw).start()
    try:
        return job.wait()
    finally:
        job.stop()
