"""The world a child runs in: built by the kernel (namespaces and mounts), not by Python.

On Linux the class grader starts every child through bubblewrap (`bwrap`):
  - new PID, mount, network, IPC and UTS namespaces: the child sees only its own processes,
    has no network at all, and killing its PID-namespace init ends everything it started;
  - an unprivileged user id: a fresh one per child when the grader runs as root (dropped with
    `setpriv`, so RLIMIT_NPROC counts that child alone), else uid 65534 in a user namespace;
  - a file system of read-only mounts holding only the Python installation (the venv, the
    base interpreter, /usr and the libraries), the child script itself, a fresh /proc of the
    new PID namespace, a minimal /dev, and a size-limited private tmpfs as /tmp (also $HOME).
The course, the solutions, the hidden tests, the submissions and the outputs are not mounted.

    >>> "--unshare-net" in command(["python", "-c", "0"], Sandbox("bwrap", "/usr/bin/bwrap"))
    True
"""
from __future__ import annotations

import atexit
import functools
import itertools
import json
import os
import secrets
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

CHILD_PATH = "/grader/child.py"       # where child.py appears inside the sandbox
WIRE_PATH = "/grader/wire.py"         # and wire.py, the plain data it sends and reads
ZYGOTE_PATH = "/grader/zygote.py"     # and zygote.py (root only: see zygote.py)
ZYGOTE_STAGE = "/grader/stage"        # empty: where the zygote assembles each child's /tmp
FIRST_UID = 150_000                   # unprivileged ids handed to children when the grader is root
_uids = itertools.count(secrets.randbelow(40_000))


@dataclass(frozen=True)
class Sandbox:
    """How children are isolated: `kind` is "bwrap", or "none" with `why` saying what is missing.
    `zygote`: fork children from a sandboxed zygote (zygote.py; needs root) instead of
    starting bubblewrap and Python for each."""
    kind: str
    tool: str = ""
    why: str = ""
    zygote: bool = False

    @property
    def isolated(self) -> bool:
        return self.kind != "none"

    def describe(self) -> str:
        if not self.isolated:
            return f"not isolated: {self.why}"
        if self.zygote:
            return (f"bubblewrap ({self.tool}) around a zygote that imported numpy/torch once; each child forked "
                    "from it gets new PID, mount, network, IPC and UTS namespaces, a fresh unprivileged uid, "
                    "read-only Python installation, private /tmp")
        who = "a fresh unprivileged uid per child (setpriv)" if os.geteuid() == 0 else "uid 65534 in a user namespace"
        return (f"bubblewrap ({self.tool}): new PID, mount, network, IPC and UTS namespaces, {who}, "
                "read-only Python installation, private /tmp")


def next_uid() -> int:
    """An unprivileged uid for the next child (the grader runs as root)."""
    return FIRST_UID + next(_uids) % 40_000


def python_executable() -> str:
    """The interpreter to start in a sandbox: this one, reached through the real path of its
    folder. A venv or home reached through a symlink is mounted at its real path only, and a
    venv's python must be started from inside the venv (that is how it finds pyvenv.cfg)."""
    return os.path.join(os.path.realpath(os.path.dirname(sys.executable)), os.path.basename(sys.executable))


def python_roots() -> list[str]:
    """Folders the child's Python needs: the prefixes (venv and base) and the interpreter's own."""
    roots = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    for var in ("LD_LIBRARY_PATH",):   # some clusters need it to load torch at all
        roots.update(p for p in os.environ.get(var, "").split(":") if p)
    real = sorted({os.path.realpath(r) for r in roots if r and os.path.isdir(r)})
    # keep the outermost folders only; "/" or /usr itself are covered by the system mounts
    out = []
    for r in real:
        if r in ("/", "/usr") or r.startswith("/usr/") or any(r.startswith(o + "/") for o in out):
            continue
        out.append(r)
    return out


def check_hidden_from(paths, sandbox: Sandbox) -> None:
    """ValueError if a folder the child must not see would be visible inside its mounts."""
    if not sandbox.isolated:
        return
    roots = python_roots() + ["/usr"]
    for p in paths:
        if not p:
            continue
        real = os.path.realpath(p)
        for r in roots:
            if real == r or real.startswith(r + "/"):
                raise ValueError(f"{p} lies inside {r}, which children see (it holds Python): "
                                 "keep solutions, hidden tests, submissions and outputs outside it")


def command(argv: list[str], sandbox: Sandbox, tmp_mb: int = 64, child_script: str = "",
            info_fd: int | None = None, zygote_script: str = "") -> list[str]:
    """The command line that runs `argv` (the child's Python) inside a fresh sandbox.
    `info_fd` (passed to the child) receives the PID of the PID-namespace init, which the
    parent kills to end everything the child started. With `zygote_script` (root only) the
    command keeps root and its capabilities inside the sandbox: it starts zygote.py, which
    builds each child's own namespaces and drops to the child's uid itself."""
    b = [sandbox.tool, "--new-session", "--unshare-pid", "--unshare-net",
         "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "grader",
         "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            b += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            b += ["--ro-bind", top, top]
    if os.path.exists("/etc/ld.so.cache"):
        b += ["--perms", "0755", "--dir", "/etc", "--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    # the private /tmp first: a Python installed under /tmp (a CI checkout, say) is then bound
    # on top of it, instead of being hidden by it
    b += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(tmp_mb << 20), "--tmpfs", "/tmp"]
    made = {"/tmp", "/proc", "/dev"}   # mounted above: keep their own permissions
    for root in python_roots():
        parts = root.split("/")
        for n in range(2, len(parts)):   # parents made by bwrap would be 0700: unreadable for the child
            parent = "/".join(parts[:n])
            if parent not in made:
                made.add(parent)
                b += ["--perms", "0755", "--dir", parent]
        b += ["--ro-bind", root, root]
    if child_script:
        b += ["--perms", "0755", "--dir", os.path.dirname(CHILD_PATH), "--ro-bind", child_script, CHILD_PATH,
              "--ro-bind", os.path.join(os.path.dirname(child_script), "wire.py"), WIRE_PATH]
    b += ["--chdir", "/tmp"]
    if info_fd is not None:
        b += ["--info-fd", str(info_fd)]
    if zygote_script:
        # the zygote is the PID-namespace init (--as-pid-1): however it ends, the kernel kills
        # every child it forked. It ends when the grader's end of its socket closes, the grader's
        # death included (no --die-with-parent: that fires when the grader's *thread* ends)
        return b + ["--as-pid-1", "--perms", "0755", "--dir", ZYGOTE_STAGE, "--ro-bind", zygote_script,
                    ZYGOTE_PATH, "--"] + list(argv)
    b.insert(1, "--die-with-parent")
    if os.geteuid() == 0:
        # no user namespace: a real, unused uid, so RLIMIT_NPROC binds (root is exempt from it)
        uid = str(next_uid())
        b += ["--", shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}",
              "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    else:
        b += ["--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL", "--"]
    return b + list(argv)


INSTALL = ("apt-get install bubblewrap (Debian/Ubuntu), dnf install bubblewrap (Fedora/RHEL), "
           "pacman -S bubblewrap (Arch), apk add bubblewrap (Alpine)")


def tools() -> list[str]:
    """What `python -m milktea doctor` says about the tools isolation uses, one line each.

    >>> any(line.startswith("bubblewrap") for line in tools())
    True
    """
    lines = []
    for name, tool, use in (("bubblewrap", "bwrap", "builds each child's world (required)"),
                            ("setpriv", "setpriv", "drops root to a fresh uid when bubblewrap starts per child (required as root)"),
                            ("unshare", "unshare", "not used: it makes namespaces but cannot hide the disk")):
        path = shutil.which(tool)
        lines.append(f"{name}: {path or 'not found'} - {use}")
    who = "root: children fork from a sandboxed zygote, a fresh uid each" if os.geteuid() == 0 else \
        "not root: bubblewrap and Python start per child, uid 65534 in a user namespace"
    return lines + [f"running as {who}"]


@functools.lru_cache(maxsize=1)
def probe() -> Sandbox:
    """Can this machine build a child's world? Tries one real sandbox (about 0.2 s, cached)."""
    if not sys.platform.startswith("linux"):
        return Sandbox("none", why=f"{sys.platform} has no Linux namespaces (grade on Linux, or in a Linux VM)")
    tool = shutil.which("bwrap")
    if not tool:
        # util-linux `unshare` makes namespaces, but a child's world also needs a root of
        # read-only binds with the disk left out, which is what bubblewrap builds and checks
        also = ("util-linux unshare is here, but it only makes namespaces and cannot hide the disk from "
                "student code" if shutil.which("unshare") else "nor is util-linux unshare")
        return Sandbox("none", why=f"bubblewrap (bwrap) is not installed ({also}); install it: {INSTALL}")
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        return Sandbox("none", why="setpriv (util-linux) is missing, needed to drop root in the sandbox")
    box = Sandbox("bwrap", tool)
    python = python_executable()
    argv = command([python, "-I", "-S", "-c", "import os; print(os.getuid() != 0 and sum(p.isdigit() for p in os.listdir('/proc')))"],
                   box, tmp_mb=1)
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return Sandbox("none", why=f"bubblewrap could not start ({e})")
    out = done.stdout.strip()
    if done.returncode != 0 or not out.isdigit() or int(out) > 5:
        return Sandbox("none", why=diagnose(done.returncode, done.stdout, done.stderr, python))
    return Sandbox("bwrap", tool, zygote=os.geteuid() == 0)


def diagnose(code: int, stdout: str, stderr: str, python: str) -> str:
    """Why a sandboxed test run failed, from what bubblewrap and Python said: the real cause.

    >>> diagnose(1, "", "bwrap: execvp /v/bin/python: No such file or directory", "/v/bin/python")[:40]
    'Python (/v/bin/python) could not be star'
    """
    err = (stderr.strip().splitlines() or ["no message"])[-1][:300]
    if "execvp" in stderr or "No such file or directory" in stderr:
        return (f"Python ({python}) could not be started inside the sandbox ({err}): its installation must be "
                "readable there; a venv whose interpreter lies outside its folder, or a path bubblewrap cannot "
                "mount, would do this")
    if any(w in stderr for w in ("namespace", "uid map", "Operation not permitted", "Permission denied",
                                 "setting up uid", "unshare", "clone")):
        return (f"bubblewrap cannot build namespaces here ({err}); in a container, allow user namespaces "
                "(or --cap-add SYS_ADMIN, --security-opt seccomp=unconfined), or run it with --privileged")
    if code == 0 and stdout.strip() and not stdout.strip().isdigit():
        return f"the sandbox's test run printed {stdout.strip()[:80]!r} instead of a process count"
    if code == 0:
        return f"the sandbox showed {stdout.strip()} processes where at most 5 belong: it does not isolate them"
    return f"the sandbox's test run failed (exit status {code}: {err})"


ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")


class Zygote:
    """The grader's end of a running zygote.py (see there): `spawn` asks it for one child.
    Started by `zygote()` below, once per kind of child, and stopped when the grader exits."""

    def __init__(self, sandbox: Sandbox, torch: bool, env: dict, startup_seconds: float):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        under_tmp = [r for r in python_roots() if r == "/tmp" or r.startswith("/tmp/")]
        argv = [python_executable(), "-I", "-B", ZYGOTE_PATH, str(theirs.fileno()), json.dumps(under_tmp)]
        self.torch, self.errors = torch, tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                command(argv + (["torch"] if torch else []), sandbox, tmp_mb=1, child_script=CHILD, zygote_script=ZYGOTE),
                cwd="/", env=env, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=self.errors, stderr=self.errors, start_new_session=True)
        finally:
            theirs.close()
        self.sock = ours
        ready = select.select([ours], [], [], startup_seconds)[0] and ours.recv(16)
        if ready != b"ready":
            why = self._errors()
            self.close()
            raise OSError(f"the sandboxed zygote did not start: {why}")

    def _errors(self) -> str:
        self.errors.seek(0)
        lines = self.errors.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else "no message"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, pipes, uid: int, tmp_mb: int, timeout: float):
        """A new child in its own world, its fds 0, 1 (and 2), 3 = `pipes` (stdin, output,
        results). Returns (control socket, pidfd of its namespace's init); the socket later
        carries the child's exit code."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            socket.send_fds(self.sock, [json.dumps({"uid": uid, "tmp_mb": tmp_mb}).encode()],
                            list(pipes) + [theirs.fileno()])
        except OSError:
            mine.close()
            raise
        finally:
            theirs.close()
        if not select.select([mine], [], [], timeout)[0]:
            mine.close()
            raise OSError("the sandboxed zygote did not answer")
        msg, fds, _, _ = socket.recv_fds(mine, 4096, 1)
        if not fds:
            mine.close()
            raise OSError(msg[2:].decode("utf-8", "replace") if msg else "the sandboxed zygote stopped")
        return mine, fds[0]

    def close(self):
        self.sock.close()   # the zygote exits, and bubblewrap ends every namespace under it
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.errors.close()


_zygotes: dict = {}
_failed: dict = {}    # why a zygote could not start, per kind
_zygote_lock = threading.Lock()


def zygote(sandbox: Sandbox, torch: bool, env: dict, startup_seconds: float) -> Zygote:
    """The running zygote for this kind of child (with or without torch), started if needed."""
    with _zygote_lock:
        key = (sandbox, torch)
        if key in _failed:   # one failed start per grader is enough: don't pay it per child
            raise OSError(_failed[key])
        z = _zygotes.get(key)
        if z is None or not z.alive():
            if z is not None:
                z.close()
            try:
                z = _zygotes[key] = Zygote(sandbox, torch, env, startup_seconds)
            except OSError as e:
                _failed[key] = str(e)
                raise
        return z


@atexit.register
def stop_zygotes():
    with _zygote_lock:
        for z in _zygotes.values():
            z.close()
        _zygotes.clear()

