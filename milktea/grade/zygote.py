"""A sandboxed parent that imports numpy (and torch) once, then forks a fresh world per child.

Starting Python and `import torch` in every child costs seconds; forking a process that has
already done both costs milliseconds. The class grader (when it runs as root) starts this
script once, inside bubblewrap (isolation.py: read-only Python, no course files, no network),
keeping root and its capabilities there, as the init of bubblewrap's PID namespace: however
the zygote ends (the grader closed its socket, or died), the kernel then kills every child it
forked, daemons included. It never runs student code and never sees a case:
for each child the grader sends, on a Unix socket, the child's stdin, output and result pipes
plus a control socket, and a uid. The zygote forks, and the fork, before any student code:
  1. unshares new PID, mount, network, IPC and UTS namespaces, so children of the same zygote
     can't see, signal or talk to each other, and forks the namespace's init (which brings up
     the new namespace's own loopback, as bubblewrap does: it reaches nothing but the child);
  2. the init mounts a fresh size-limited tmpfs on /tmp (the Python installation, if it lies
     under /tmp, bound read-only on top) and a /proc of its own PID namespace (nothing else
     in the zygote's world is writable by a child), hands a pidfd of itself to the grader
     (killing it ends the namespace), then forks the worker and reports the worker's exit
     status on the control socket;
  3. the worker keeps only its three pipes, drops every capability and the bounding set,
     takes the fresh uid (so RLIMIT_NPROC counts this child alone), sets no_new_privs, and
     runs child.main(), which sets the rlimits and reads the job.
Like child.py, this file never imports milktea; both appear in the sandbox under /grader/.

    python -I -B zygote.py SOCKET_FD TMP_ROOTS_JSON [torch]
"""
import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
STAGE = "/grader/stage"      # an empty folder where the fresh /tmp is assembled before it moves

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    enc = lambda s: s.encode() if s is not None else None
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _fresh_tmp(tmp_mb, roots):
    """A new tmpfs as /tmp; Python folders that live under /tmp are bound on it read-only."""
    _mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_mb}m,mode=1777")
    for root in roots:
        dst = STAGE + root[len("/tmp"):]
        os.makedirs(dst, 0o755, exist_ok=True)
        _mount(root, dst, None, MS_BIND | MS_REC)
        _mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount(STAGE, "/tmp", None, MS_MOVE)


def _worker(pipes, uid):
    """Become the child: fds 0-2 and 3 only, no capabilities, a uid of its own."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in pipes]   # out of the way of 0..3
    for src, dst in zip(high, (0, 1, 3)):
        os.dup2(src, dst)
    os.dup2(1, 2)
    os.closerange(4, os.sysconf("SC_OPEN_MAX"))
    for cap in range(64):   # the bounding set: nothing an exec could gain back
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)   # from root to a plain uid: every capability is dropped
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    os.chdir("/tmp")
    _reseed()
    sys.path.insert(0, "/grader")
    import child
    sys.argv = ["/grader/child.py", "3"]
    code = 0
    try:
        child.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    try:   # what a normal interpreter exit does: wait for threads, run atexit handlers
        import atexit
        import threading
        threading._shutdown()
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


def _reseed():
    """Random generators seeded from the OS again, as in a fresh Python: a fork would
    otherwise start every child with the zygote's state."""
    import random
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()


def _loopback_up():
    """Bring up the loopback device of the child's new network namespace, as bubblewrap does
    for its own: it reaches nothing outside this namespace (no host, no other child), and lets
    a task's harness run real gloo ranks (threads of the child) on 127.0.0.1."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        name = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, siocgifflags, name))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


def _init(pipes, ctl, req, roots):
    """PID 1 of the child's namespace: mounts, then the worker; its exit status to the grader."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _loopback_up()
    _fresh_tmp(int(req["tmp_mb"]), roots)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    socket.send_fds(ctl, [b"P"], [os.pidfd_open(os.getpid())])
    worker = os.fork()
    if worker == 0:
        ctl.close()
        _worker(pipes, int(req["uid"]))
    for fd in pipes:
        os.close(fd)
    while True:   # reap whatever the worker left behind until the worker itself is gone
        pid, status = os.wait()
        if pid == worker:
            break
    ctl.send(str(os.waitstatus_to_exitcode(status)).encode())
    os._exit(0)   # the kernel now kills every process left in this namespace


def _spawn(sock, pipes, ctl, req, roots):
    """In the fork of the zygote: new namespaces, then their init."""
    try:
        sock.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _check(_libc.unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
        if os.fork() == 0:
            try:
                _init(pipes, ctl, req, roots)
            except BaseException as e:
                ctl.send(f"E could not build the child's world ({e})".encode())
                os._exit(1)
        os._exit(0)
    except BaseException as e:
        try:
            ctl.send(f"E could not build the child's world ({e})".encode())
        finally:
            os._exit(1)


def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    roots = json.loads(sys.argv[2])
    import numpy  # noqa: F401  (once, here: every fork shares it)
    if sys.argv[3:] == ["torch"]:
        import torch  # noqa: F401
    sys.path.insert(0, "/grader")
    import child  # noqa: F401
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # forks are reaped by the kernel
    sock.send(b"ready")
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 4096, 4)
        if not msg:
            return   # the grader is gone (or closed us): bubblewrap then ends every namespace
        try:
            req = json.loads(msg)
            ok = len(fds) == 4 and isinstance(req, dict)
        except ValueError:
            ok = False
        if ok:
            ctl = socket.socket(fileno=fds[3])
            if os.fork() == 0:
                _spawn(sock, fds[:3], ctl, req, roots)
            ctl.close()
            fds = fds[:3]
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    main()
