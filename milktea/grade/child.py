"""The child side of the grader: run one submission's graded cells, nothing else.

The parent starts  python -I -B child.py FD  in an empty temporary directory with a scrubbed
environment, inside a sandbox (isolation.py) when grading a class; the job comes as one JSON
line on stdin. This file never imports milktea (the child has no path to it). It
  1. imports numpy (and torch when the cells use it), then sets its own resource limits
     (address space on top of what those imports mapped, CPU seconds, file size) before any
     student code exists in the process: hard limits equal soft ones, so they stay;
  2. installs an audit hook (PEP 578) that refuses reads outside Python's own install and
     the temporary directory, any write outside it, new processes, signals to others,
     sockets, ctypes (but from numba's own code), and `import milktea`;
  3. runs each graded cell, then calls each graded function on the cases the parent sent,
     writing one JSON line per event to FD (never stdout, which the student's prints use);
     after the public cases it says "hidden" and only then reads the hidden cases (a second
     line on stdin), so nothing printed while they run can reach the feedback.
Outputs travel as plain data (wire.py: `encode`/`decode`); the parent compares them.
The audit hook is a second layer only: what the child can reach is decided by the sandbox.
"""
import builtins
import hashlib
import json
import linecache
import os
import resource
import sys
import time
import traceback

try:   # imported by the grader, as milktea.grade.child
    from . import wire
except ImportError:   # run as a script (in the sandbox, /grader/child.py beside /grader/wire.py)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import wire
decode, encode = wire.decode, wire.encode

BLOCK = "[refused] "   # prefix of every refusal, so the parent can name it (never shown)
# What the child says, as templates: English here, the learner's language from the job's "words"
# (the parent fills them from its catalog: this file never imports milktea).
WORDS = {
    "where": "line {line} of {cell}, in {function}: {code}",
    "where_cell": "line {line} of {cell}: {code}",
    "read": "graded code may not read {path}: only its own temporary directory is open to it",
    "write": "graded code may not write {path}: only its own temporary directory is open to it",
    "list": "graded code may not list the directory {path}",
    "change": "graded code may not change files outside its temporary directory ({event} {path})",
    "import": "graded code may not import {name}: write the idea with numpy or torch yourself",
    "process": "graded code may not start other processes (subprocess)",
    "signal": "graded code may not send signals to other processes",
    "native": "graded code may not load the native library {path}",
    "event": "graded code may not do this: {event}",
    "size": "the result is {size} bytes of data; at most {limit} are accepted",
}


# --- limits and the audit hook --------------------------------------------------------

def address_space() -> int:
    """Bytes of address space this process maps now (0 where /proc is missing)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def set_limits(memory_bytes, cpu_seconds, file_bytes, processes=None):
    """memory_bytes is on top of what is mapped already (Python, numpy, torch: a CUDA build of
    torch alone maps gigabytes of libraries it never touches). `processes` (RLIMIT_NPROC) is
    set only in a sandbox, where the uid is the child's alone."""
    memory_bytes += address_space()
    limits = [(resource.RLIMIT_AS, memory_bytes, memory_bytes),
              (resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1),
              (resource.RLIMIT_FSIZE, file_bytes, file_bytes),
              (resource.RLIMIT_CORE, 0, 0)]
    if processes:
        limits.append((resource.RLIMIT_NPROC, processes, processes))
    for res, soft, hard in limits:
        try:
            resource.setrlimit(res, (int(soft), int(hard)))
        except (ValueError, OSError):   # macOS refuses some of them; the parent's clock still holds
            pass


PROCESS_SYMBOLS = frozenset("fork vfork _Fork __fork __vfork clone clone3 __clone __clone2 execve execv execvp execvpe "
                            "execl execlp execle fexecve execveat posix_spawn posix_spawnp system popen syscall daemon "
                            "forkpty dlopen dlsym dlvsym dlmopen __libc_dlopen_mode __libc_dlsym _dl_sym".split())


def no_fork_exec():
    """Import subprocess before the hook (scipy, sklearn, matplotlib, numba import it and start
    nothing), its one unaudited way to start a process (`_posixsubprocess.fork_exec`) replaced by a
    refusal; Popen, os.fork, ... meet the hook, a fresh copy of the C module is an import it refuses."""
    import subprocess
    import _posixsubprocess

    def fork_exec(*args, **kwargs):
        raise PermissionError(BLOCK + WORDS["process"])
    _posixsubprocess.fork_exec = fork_exec
    if hasattr(subprocess, "_fork_exec"):   # bound at import (3.11+)
        subprocess._fork_exec = fork_exec


def install_hook(tmp, deny, allow=(), salt=None):
    """Refuse what graded code has no business doing (see the module docstring). `allow`: top-level
    modules whose own code may use native libraries through ctypes (numba's llvmlite, or what the
    instructor lists): their calls are recognised by the module of the frame that made them; a
    function that starts a process or loads a library is never looked up, whoever asks. `deny`:
    sha256 hashes of `salt` + the real paths of folders refused even where reads are open (the
    child never holds the instructor's paths)."""
    real, fspath, getpid = os.path.realpath, os.fspath, os.getpid
    # builtins the hook calls, bound now: a cell that replaces builtins.isinstance or any must
    # not change the hook's answers (os.path.realpath's helpers in posixpath can still be
    # patched: this hook is a second layer, the sandbox is what holds)
    isinstance_, any_, str_, bytes_, int_, pathlike, refusal = isinstance, any, str, bytes, int, os.PathLike, PermissionError
    getframe, modules, getattr_ = sys._getframe, sys.modules, getattr
    allowed, process_symbols = frozenset(allow) | {"numba", "llvmlite"}, PROCESS_SYMBOLS
    pid = getpid()
    tmp = real(tmp)
    import sysconfig
    reads = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
             *sysconfig.get_paths().values(), *(p for p in sys.path if p.endswith("-packages")),
             "/usr", "/lib", "/lib32", "/lib64", "/etc", "/sys/devices/system/cpu", "/sys/fs/cgroup",
             f"/proc/{pid}", "/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat",
             "/dev/null", "/dev/urandom", "/dev/random", "/dev/zero", tmp}
    reads = tuple(sorted({real(p) for p in reads if p and p != "/"}))
    sha256, deny, salt = hashlib.sha256, frozenset(deny), salt or ""

    def denied(p):   # is the real path p, or a folder above it, denied?
        while True:
            if sha256((salt + p).encode("utf-8", "surrogateescape")).hexdigest() in deny:
                return True
            if p in ("/", ""):
                return False
            p = p.rpartition("/")[0] or "/"
    writes = (tmp, "/dev/null")
    wflags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    proc_events = {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                   "subprocess.Popen", "pty.spawn", "os.killpg", "os.startfile", "urllib.Request",
                   "gc.get_objects", "gc.get_referrers", "gc.get_referents", "resource.setrlimit",
                   "resource.prlimit", "sys._current_frames"}
    native_events = {"ctypes.cdata", "ctypes.cdata/buffer", "ctypes.call_function", "ctypes.string_at",
                     "ctypes.wstring_at", "ctypes.dlsym", "ctypes.dlsym/handle"}

    def by_allowed_module():   # the first frame above, not ctypes' or importlib's: its module decides
        f = getframe(2)
        while f is not None:
            g = f.f_globals
            name = g.get("__name__") if isinstance_(g.get("__name__"), str_) else ""
            if name == "ctypes" or name.startswith(("ctypes.", "importlib", "_frozen_importlib")):
                f = f.f_back
                continue
            mod = modules.get(name)
            return name.partition(".")[0] in allowed and mod is not None and getattr_(mod, "__dict__", None) is g
        return False
    path_events = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
                   "os.symlink", "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.setxattr",
                   "os.removexattr", "os.mknod", "os.mkfifo", "shutil.rmtree", "shutil.move",
                   "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.chown"}

    def inside(path, roots):
        try:
            p = real(fspath(path) if not isinstance_(path, bytes_) else path.decode("utf-8", "replace"))
        except (TypeError, ValueError):
            return False
        if deny and denied(p):
            return False
        return any_(p == r or p.startswith(r + "/") for r in roots)

    words = dict(WORDS)   # bound now: a cell that edits WORDS changes nothing here

    def refuse(what, **values):
        raise refusal(BLOCK + words[what].format(**values))

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if isinstance_(path, int_):
                return
            writing = (isinstance_(mode, str_) and any_(c in mode for c in "wax+")) or (
                isinstance_(flags, int_) and flags & wflags)
            if not inside(path, writes if writing else reads):
                refuse("write" if writing else "read", path=repr(fspath(path)))
        elif event in ("os.listdir", "os.scandir"):
            if args and args[0] is not None and not isinstance_(args[0], int_) and not inside(args[0], reads):
                refuse("list", path=repr(args[0]))
        elif event in path_events:
            for a in args:
                if isinstance_(a, (str_, bytes_, pathlike)) and not inside(a, writes):
                    refuse("change", event=event, path=repr(a))
        elif event == "import":
            name = args[0]
            if name == "milktea" or name.startswith("milktea."):
                refuse("import", name=name)
            if name.rpartition(".")[2] == "_posixsubprocess":   # "x._posixsubprocess" loads the same C module
                refuse("process")
        elif event == "os.kill":
            if args[0] != getpid():
                refuse("signal")
        elif event == "ctypes.dlopen":
            if not (isinstance_(args[0], str_) and args[0].startswith("/") and inside(args[0], reads)):
                refuse("native", path=repr(args[0]))
        elif event in native_events:
            symbol = args[-1] if event.startswith("ctypes.dlsym") and args else None
            symbol = symbol.decode("ascii", "replace") if isinstance_(symbol, bytes_) else symbol
            if isinstance_(symbol, str_) and symbol in process_symbols:
                refuse("process")
            if not by_allowed_module():
                refuse("event", event=event)
        elif event in proc_events or event.startswith("socket."):
            refuse("event", event=event)

    sys.addaudithook(hook)


# --- module snapshots: a monkeypatch can't reach the next task -------------------------

SYS_KEYS = ("stdout", "stderr", "stdin", "path", "meta_path", "path_hooks", "displayhook", "excepthook")


def snapshot():
    names = ["builtins", "math", "json", "json.encoder", "json.decoder", "os", "base64", "time",
             "numpy", "numpy.linalg", "numpy.random", "numpy.fft", "torch", "torch.nn.functional"]
    mods = {n: sys.modules[n] for n in names if n in sys.modules}
    return ({n: (m, dict(m.__dict__)) for n, m in mods.items()},
            {k: getattr(sys, k) for k in SYS_KEYS}, dict(sys.modules), sys.getrecursionlimit())


def restore(snap):
    mods, sys_attrs, modules, limit = snap
    for name, (mod, saved) in mods.items():
        d = mod.__dict__
        for k, v in saved.items():
            if d.get(k, d) is not v:
                d[k] = v
        sys.modules[name] = mod
    for k, v in sys_attrs.items():
        setattr(sys, k, v)
    for k, v in modules.items():
        if sys.modules.get(k) is not v:
            sys.modules[k] = v
    sys.setrecursionlimit(limit)


# --- running ---------------------------------------------------------------------------

def describe_error(exc, cell_names, cells=None):
    """(kind, message, where) for an exception raised by student code; with `cells` (a dict),
    cells["key"] is set to the key of the graded cell whose line raised (the innermost one)."""
    if isinstance(exc, NotImplementedError):
        kind = "not_implemented"
    elif isinstance(exc, SystemExit):
        kind = "exit"
    elif isinstance(exc, MemoryError):
        kind = "memory"
    elif isinstance(exc, PermissionError) and str(exc).startswith(BLOCK):
        kind = "blocked"
    elif isinstance(exc, SyntaxError):
        kind = "syntax"
    else:
        kind = "exception"
    where, at = "", ""
    try:
        if isinstance(exc, SyntaxError) and exc.filename in cell_names:
            at = exc.filename
            where = WORDS["where_cell"].format(line=exc.lineno, cell=cell_names[exc.filename],
                                               code=(exc.text or "").strip())
        else:
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in cell_names]
            if frames:
                f = frames[-1]
                at = f.filename
                where = WORDS["where"].format(line=f.lineno, cell=cell_names[f.filename], function=f.name,
                                              code=(f.line or "").strip())
        msg = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if cells is not None and at:
            cells["key"] = at[len("<cell "):-1]
    except BaseException:   # a hostile __str__ must not take the runner down
        msg = f"{type(exc).__name__}"
    return kind, msg[:2000], where[:500]


def harnessed(source, fn):
    """`fn` called through a task's harness: source defining run(fn, *args, **kwargs), sent by
    the grader (never from the notebook), run in a namespace of its own."""
    names = {"__name__": "__harness__", "__builtins__": builtins}
    try:
        exec(compile(source, "<the grader's harness>", "exec"), names)
        run = names["run"]
    except BaseException as exc:   # the grader's own fault: every case says so
        message = f"the grader's harness could not start: {type(exc).__name__}: {exc}"

        def broken(*args, **kwargs):
            raise RuntimeError(message)
        return broken
    return lambda *args, **kwargs: run(fn, *args, **kwargs)


def run_tasks(tasks, ns, snap, send, cell_names, max_output):
    """Call each task's function on its cases, one "result" event per case."""
    dumps, clock = json.dumps, time.perf_counter
    for task in tasks:
        restore(snap)
        send(ev="task", task=task["id"])
        fn = ns.get(task["function"])
        if not callable(fn):
            if task["cases"]:
                send(ev="missing", task=task["id"])
            send(ev="task_done", task=task["id"])
            continue
        if task.get("harness"):   # the grader's own code calls the learner's function (a hook, say)
            fn = harnessed(task["harness"], fn)
        for i, case in enumerate(task["cases"]):
            send(ev="case", task=task["id"], i=i)
            t0 = clock()
            try:
                args = decode(case["args"])
                kwargs = decode(case["kwargs"]) if case.get("kwargs") else {}
                value = fn(*args, **kwargs)
            except BaseException as exc:   # SystemExit and KeyboardInterrupt included
                restore(snap)
                kind, msg, where = describe_error(exc, cell_names, raised := {})
                send(ev="result", task=task["id"], i=i, ok=False, kind=kind, message=msg, where=where,
                     seconds=clock() - t0, cell=raised.get("key", ""))
                continue
            restore(snap)   # before encoding: a patch made during the call can't touch the reply
            seconds = clock() - t0
            try:
                out = encode(value)
                size = len(dumps(out, allow_nan=False))
                if size > max_output:
                    raise TypeError(WORDS["size"].format(size=size, limit=max_output))
                send(ev="result", task=task["id"], i=i, ok=True, value=out, seconds=seconds)
            except BaseException as exc:
                send(ev="result", task=task["id"], i=i, ok=False, kind="bad_output",
                     message=describe_error(exc, {})[1], where="", seconds=seconds)
            restore(snap)
        send(ev="task_done", task=task["id"])


def main():
    fd = int(sys.argv[1])
    write, dumps = os.write, json.dumps
    stdin, out, err = sys.stdin.buffer, sys.stdout, sys.stderr

    def send(**event):
        data = (dumps(event, allow_nan=False) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[write(fd, view):]

    job = json.loads(stdin.readline())
    lim = job["limits"]
    words = job.get("words")
    if isinstance(words, dict):   # the learner's language, from the parent's catalog
        for table in (WORDS, wire.WORDS):
            table.update({k: v for k, v in words.items() if k in table and isinstance(v, str)})
    import numpy  # noqa: F401  (every exercise uses it; imported before the limits, hook and snapshot)
    if job.get("torch"):
        import torch  # noqa: F401
    set_limits(lim["memory_bytes"], lim["cpu_seconds"], lim["file_bytes"], lim.get("processes"))
    if job.get("audit", True):   # a second layer; tests switch it off to check the sandbox alone
        no_fork_exec()
        install_hook(os.getcwd(), job.get("deny", ()), job.get("allow", ()), job.get("salt"))
    snap = snapshot()
    send(ev="ready")

    ns = {"__name__": "__graded__", "__builtins__": builtins}
    cell_names = {}
    for cell in job["cells"]:
        name = f"<cell {cell['key']}>"
        cell_names[name] = cell["label"]
        lines = cell["source"].splitlines(True)
        linecache.cache[name] = (len(cell["source"]), None, lines, name)
        send(ev="cell", key=cell["key"])
        error = None
        try:
            exec(compile(cell["source"], name, "exec"), ns)
        except BaseException as exc:   # SystemExit and KeyboardInterrupt included
            kind, msg, where = describe_error(exc, cell_names, raised := {})
            error = {"kind": kind, "message": msg, "where": where, "cell": raised.get("key", "")}
        restore(snap)
        send(ev="cell_done", key=cell["key"], error=error)
    run_tasks(job["tasks"], ns, snap, send, cell_names, lim["max_output"])
    del job
    for stream in (out, err):   # what the public cases printed goes out before the parent stops listening
        try:
            stream.flush()
        except BaseException:
            pass
    send(ev="hidden")
    later = json.loads(stdin.readline())
    run_tasks(later["tasks"], ns, snap, send, cell_names, lim["max_output"])
    send(ev="done")


if __name__ == "__main__":
    main()
