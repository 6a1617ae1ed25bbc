"""A real, shaped network between local ranks (Linux, root): network namespaces and tc.

    from milktea.distributed.netns import NetnsLink
    with NetnsLink(workers=2, rate_bits=1e9) as net:       # 1 Gbit/s each way, each rank
        launch(my_fn, 2, netns=net)

Layout: one namespace per rank plus a hub namespace holding a bridge; each rank is joined
to the hub by a veth pair. Both ends of every pair get a token-bucket filter
(`tc qdisc add ... tbf rate R burst B latency L`), so each rank sends and receives at most
R. Ranks get link-local addresses 169.254.77.(rank+1) on their own veth end, inside their
own namespace; nothing is added to the machine's own namespace, and every namespace is
deleted on exit, on error, and at interpreter exit. (netem is not available everywhere,
so there is no added delay: the latency is the real one of the path.)
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import os
import re
import shutil
import subprocess
import sys

IFNAME = "mt0"          # the rank's interface, same name in every rank namespace
SUBNET = "169.254.77"   # link-local; exists only inside namespaces built here
_counter = itertools.count()
_live: set[str] = set()  # namespaces this process created and has not removed yet


_probed: list = []


def unavailable_reason() -> str | None:
    """None if shaped namespaces can be built here, else why not (for skip messages).
    Tries it once: a throw-away namespace with a bridge, a veth pair and a tbf qdisc."""
    if not os.path.exists("/proc/self/ns/net"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "building network namespaces needs root (run as root, e.g. in CI)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the '{tool}' command is missing (install iproute2)"
    if not _probed:
        ns = f"mt{os.getpid()}xprobe"
        steps = [("ip", "netns", "add", ns),
                 ("ip", "netns", "exec", ns, "ip", "link", "add", "br0", "type", "bridge"),
                 ("ip", "netns", "exec", ns, "ip", "link", "add", "a0", "type", "veth", "peer", "name", "b0"),
                 ("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "a0", "root", "tbf",
                  "rate", "1gbit", "burst", "64kb", "latency", "100ms")]
        reason = None
        for cmd in steps:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            if r.returncode != 0:
                reason = f"`{' '.join(cmd[-6:])}` failed here: {(r.stderr or r.stdout).strip()[:200]}"
                break
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)
        _probed.append(reason)
    return _probed[0]


def _run(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {r.stderr.strip() or r.stdout.strip()}")


def _in(ns: str, *cmd: str) -> None:
    _run("ip", "netns", "exec", ns, *cmd)


def _delete(ns: str) -> None:
    subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)
    _live.discard(ns)


def _cleanup_all() -> None:
    for ns in list(_live):
        _delete(ns)


atexit.register(_cleanup_all)


def remove_stale() -> list[str]:
    """Delete namespaces left by milktea runs whose process no longer exists (e.g. killed
    with SIGKILL before it could clean up). Returns the names removed."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    removed = []
    for line in r.stdout.splitlines():
        m = re.match(r"(mt(\d+)x(?:\d+[hr]\d*|probe))\b", line.strip())
        if m and not os.path.exists(f"/proc/{m.group(2)}"):
            _delete(m.group(1))
            removed.append(m.group(1))
    return removed


def enter_namespace(name: str) -> None:
    """Move the calling process into network namespace `name` (call before any socket)."""
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), f"setns into network namespace {name} failed")
    finally:
        os.close(fd)


class NetnsLink:
    """Shaped links between `workers` ranks, each in its own namespace.

    rate_bits: bits per second each rank can send (and receive). burst: token bucket size
    in bytes (default: 4 ms of traffic, at least 64 KiB, so large GSO packets pass).
    queue_ms: how long a packet may wait in the shaper before it is dropped.
    """

    def __init__(self, workers: int = 2, rate_bits: float = 1e9, burst: int | None = None,
                 queue_ms: float = 200.0):
        if not isinstance(workers, int) or workers < 2:
            raise ValueError(f"workers must be an int >= 2, got {workers!r}")
        if not rate_bits > 0:
            raise ValueError(f"rate_bits must be > 0 bits per second, got {rate_bits!r}")
        self.workers, self.rate_bits, self.queue_ms = workers, float(rate_bits), float(queue_ms)
        self.burst = int(burst or max(65536, rate_bits / 8 * 0.004))
        tag = f"mt{os.getpid()}x{next(_counter)}"
        self.hub = f"{tag}h"
        self.namespaces = [f"{tag}r{i}" for i in range(workers)]
        self.port = 29500
        self._up = False

    @property
    def bandwidth(self) -> float:
        """Bytes per second of each rank's link."""
        return self.rate_bits / 8

    def address(self, rank: int) -> str:
        return f"{SUBNET}.{rank + 1}"

    def worker_env(self) -> dict:
        """What each rank needs in its environment to talk over the shaped link."""
        return {"MASTER_ADDR": self.address(0), "MASTER_PORT": str(self.port),
                "GLOO_SOCKET_IFNAME": IFNAME, "NCCL_SOCKET_IFNAME": IFNAME,
                # reverse DNS of link-local peers fails; c10d would warn on every connect
                "TORCH_CPP_LOG_LEVEL": "ERROR"}

    def _shape(self, ns: str, dev: str) -> None:
        _in(ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{int(self.rate_bits)}bit",
            "burst", str(self.burst), "latency", f"{self.queue_ms:g}ms")

    def __enter__(self) -> "NetnsLink":
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(f"cannot build a shaped link here: {reason}")
        remove_stale()
        try:
            for ns in [self.hub, *self.namespaces]:
                _run("ip", "netns", "add", ns)
                _live.add(ns)
                _in(ns, "ip", "link", "set", "lo", "up")
            _in(self.hub, "ip", "link", "add", "br0", "type", "bridge")
            _in(self.hub, "ip", "link", "set", "br0", "up")
            for i, ns in enumerate(self.namespaces):
                port = f"p{i}"
                # created directly inside the namespaces: nothing appears in the host's own
                _run("ip", "link", "add", IFNAME, "netns", ns, "type", "veth",
                     "peer", "name", port, "netns", self.hub)
                _in(ns, "ip", "addr", "add", f"{self.address(i)}/24", "dev", IFNAME)
                _in(ns, "ip", "link", "set", IFNAME, "up")
                _in(self.hub, "ip", "link", "set", port, "master", "br0")
                _in(self.hub, "ip", "link", "set", port, "up")
                self._shape(ns, IFNAME)
                self._shape(self.hub, port)
        except BaseException:
            self.close()
            raise
        self._up = True
        return self

    def close(self) -> None:
        for ns in [self.hub, *self.namespaces]:
            if ns in _live:
                _delete(ns)
        self._up = False

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "up" if self._up else "down"
        return (f"NetnsLink(workers={self.workers}, rate={self.rate_bits / 1e9:g} Gbit/s, "
                f"burst={self.burst} B, {state})")


# --- several emulated hosts, one torchrun each ---------------------------------------------
def torchrun_host_args(node: int, nodes: int, addr: str, head: str, port: int, run_id: str) -> list[str]:
    """torchrun's options for node `node` of `nodes` that a multi-host run needs beyond one
    host's: the rendezvous on the head node (`is_host=1` there: the TCP store it serves;
    elsewhere torchrun guesses by hostname, and with several addresses can guess wrong and
    wait forever), the address this node is reached at (--local-addr), and no restarts
    (one failure ends the job instead of a silent re-rendezvous)."""
    return ["--nnodes", str(nodes), "--rdzv-backend", "c10d",   # c10d numbers the nodes itself
            "--rdzv-endpoint", f"{head}:{port}", "--rdzv-id", run_id,
            "--rdzv-conf", f"is_host={int(node == 0)},join_timeout=120",
            "--local-addr", addr, "--max-restarts", "0"]


def _pump(stream, prefix: str, sink) -> None:
    for line in iter(stream.readline, ""):
        sink.write(f"{prefix}{line}")
        sink.flush()


def multinode(torchrun_args: list[str], nodes: int = 2, gbit: float = 0.2, timeout: float = 600.0,
              grace: float = 20.0, out=None) -> int:
    """Run `torchrun <torchrun_args>` on `nodes` emulated hosts (one network namespace each,
    joined by tc-shaped links of `gbit` Gbit/s) as a real multi-node job: rendezvous on
    host 0, each host's own address, GLOO_SOCKET_IFNAME naming its interface. Lines are
    printed prefixed with [host i]. Always ends: a host that fails stops the others after
    `grace` seconds, and all are stopped after `timeout`. Returns 0 if every host did.

        multinode(["--nproc-per-node", "1", "-m", "milktea.train", "--scheme", "topk"], nodes=2)
    """
    import signal
    import threading
    import time
    out = out or sys.stdout
    port, run_id = 29400, f"milktea{os.getpid()}"
    with NetnsLink(nodes, rate_bits=gbit * 1e9) as net:
        env = dict(os.environ, **net.worker_env())
        for k in ("MASTER_ADDR", "MASTER_PORT"):   # torchrun sets them for its workers
            env.pop(k, None)
        procs, pumps = [], []
        for i, ns in enumerate(net.namespaces):
            cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "torch.distributed.run",
                   *torchrun_host_args(i, nodes, net.address(i), net.address(0), port, run_id),
                   *torchrun_args]
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True)   # its own group: stopped as a whole
            procs.append(p)
            pumps.append(threading.Thread(target=_pump, args=(p.stdout, f"[host {i}] ", out), daemon=True))
            pumps[-1].start()
        deadline, failed_at, why = time.monotonic() + timeout, None, ""
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            bad = [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]
            if bad and failed_at is None:
                failed_at, why = now, f"host {bad[0]} exited with code {procs[bad[0]].returncode}"
            if now > deadline or (failed_at is not None and now > failed_at + grace):
                left = [i for i, p in enumerate(procs) if p.poll() is None]
                why = why or f"still running after {timeout:g} s"
                out.write(f"multinode: {why}; stopping hosts {left}\n")
                for i in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(procs[i].pid, signal.SIGTERM)
                time.sleep(5)
                for i in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(procs[i].pid, signal.SIGKILL)
                break
            time.sleep(0.2)
        for p in procs:
            p.wait()
        for t in pumps:
            t.join(5)
    codes = [p.returncode for p in procs]
    out.write(f"multinode: exit codes per host {codes}\n")
    return 0 if all(c == 0 for c in codes) else 1


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(
        prog="python -m milktea.distributed.netns",
        description="Emulated hosts on one Linux machine (root): network namespaces joined by tc-shaped links.")
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("multinode", help="run torchrun on N emulated hosts as one multi-node job",
                       description=multinode.__doc__.split("\n\n")[0])
    m.add_argument("--nodes", type=int, default=2)
    m.add_argument("--link", type=float, default=0.2, metavar="GBIT", help="each host's link, Gbit/s")
    m.add_argument("--timeout", type=float, default=600, help="seconds before every host is stopped")
    m.add_argument("torchrun_args", nargs=argparse.REMAINDER, help="after --: torchrun's per-node arguments")
    a = ap.parse_args(argv)
    args = a.torchrun_args[1:] if a.torchrun_args[:1] == ["--"] else a.torchrun_args
    if not args:
        ap.error("give torchrun's arguments after --, e.g. -- --nproc-per-node 1 -m milktea.train")
    return multinode(args, nodes=a.nodes, gbit=a.link, timeout=a.timeout)


if __name__ == "__main__":
    sys.exit(main())
