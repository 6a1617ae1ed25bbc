"""The sandbox alone (audit hook switched off): what student code can reach is what the
kernel put in its world. Each attack returns what it managed to get; the tests assert it got
nothing, that no file outside the child's /tmp changed and that no process outlived it."""
import dataclasses
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import numpy as np
import pytest
from _grade_helpers import HIDDEN, ROOT, SOLUTIONS

from milktea.grade import isolation
from milktea.grade.child import encode
from milktea.grade.sandbox import Cell, Limits, TaskJob, run

BOX = isolation.probe()
# CI must not skip these: a sandbox that cannot start there is a failure, not a pass
pytestmark = pytest.mark.skipif(not BOX.isolated and os.environ.get("CI") != "true",
                                reason=f"no sandbox here: {BOX.why}")
LIMITS = Limits(task_seconds=15, submission_seconds=60, memory_mb=1024)
# as root, children fork from a sandboxed zygote; bubblewrap per child is what a non-root
# grader uses: every test here runs against both worlds
KINDS = [BOX, dataclasses.replace(BOX, zygote=False)] if BOX.zygote else [BOX]


@pytest.fixture(autouse=True, params=KINDS, ids=lambda b: "zygote" if b.zygote else "bwrap")
def each_world(request, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "BOX", request.param)
    monkeypatch.setattr(sys.modules[__name__], "MARK", f"milktea-attack-{uuid.uuid4().hex}")
    return request.param
SECRET = "milktea-grader-secret-7f3a"
# in the command line of every process an attack starts; each test gets a mark of its own
# (survivors() looks at the whole machine, and another xdist worker may be running an attack)
MARK = "milktea-attack-7f3a"


def attack(body: str, audit=False, cases=1, hidden=0):
    """Run `def attack(x, k): <body>` in a sandboxed child; returns the Run."""
    source = "import os, sys, json, time, signal, socket, subprocess\n\ndef attack(x, k):\n" + \
        textwrap.indent(textwrap.dedent(body), "    ")
    case = {"args": encode([np.arange(5.0), 2]), "kwargs": None}
    return run([Cell("c0", "cell", source)], [TaskJob("1", "attack", [case] * cases, [case] * hidden)],
               LIMITS, sandbox=BOX, audit=audit)


def value(res):
    o = res.outcomes["1"][0]
    assert o.ok, (o.kind, o.message, res.output)
    return o.value


def survivors():
    """Processes started by an attack, anywhere on the machine."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if MARK.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def snapshot(*folders):
    state = {}
    for folder in folders:
        for dirpath, _, files in os.walk(folder):
            for name in files:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                state[path] = (st.st_size, st.st_mtime_ns)
    return state


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv("MILKTEA_SECRET", SECRET)


def test_the_world_holds_python_and_nothing_else(secret_env):
    got = value(attack("""
        top = sorted(os.listdir('/'))
        etc = sorted(os.listdir('/etc'))
        procs = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
        with open('/proc/self/status') as f:
            status = dict(line.split(None, 1) for line in f if line.startswith(("Cap", "NoNew")))
        return json.dumps([top, etc, procs, os.getuid(), dict(os.environ), socket.gethostname(), status])
    """))
    top, etc, procs, uid, env, host, status = json.loads(got)
    # no capability left, none to gain back through an exec, no set-uid program can help
    assert {status[k].strip() for k in ("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:")} == {"0" * 16}
    assert status["NoNewPrivs:"].strip() == "1"
    roots = isolation.python_roots()
    for name in top:
        if name not in ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "dev", "proc", "tmp", "etc", "grader"):
            assert any(r.startswith(f"/{name}/") or r == f"/{name}" for r in roots), name
    assert etc == ["ld.so.cache"] and len(procs) <= 3 and uid != 0 and host == "grader"
    assert SECRET not in got and "MILKTEA_SECRET" not in env


@pytest.mark.parametrize("path", [
    str(SOLUTIONS / "03_topk.ipynb"), str(HIDDEN / "03_topk.py"), str(ROOT / "pyproject.toml"),
    "/etc/passwd", "/etc/shadow", "/root/.bash_history", "/proc/1/environ", "/proc/self/environ",
    "/proc/GRADER/environ", "/sys/kernel/notes",
])
def test_files_outside_the_world_are_not_there(secret_env, path):
    path = path.replace("GRADER", str(os.getpid()))   # the grader's own process (an id stable across workers)
    got = value(attack(f"""
        try:
            with open({path!r}, 'rb') as f:
                return 'read: ' + f.read(4096).decode('latin-1')
        except OSError as e:
            return 'refused: ' + type(e).__name__
    """))
    if path.startswith("/proc/") and "environ" in path and got.startswith("read"):
        assert SECRET not in got   # the sandbox's own processes: the scrubbed environment only
    else:
        assert got.startswith("refused"), got


def test_dir_fd_and_relative_paths_reach_nothing():
    got = value(attack(f"""
        found = []
        for start in ('/usr', '/usr/lib', '/tmp', '/proc/self/cwd', '/proc/self/root'):
            try:
                fd = os.open(start, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue
            for rel in ('../../..' + {str(SOLUTIONS)!r}, '../../../../etc/shadow', '../../..' + {str(ROOT)!r}):
                try:
                    found.append(os.listdir(os.open(rel, os.O_RDONLY, dir_fd=fd)))
                except OSError:
                    pass
        return json.dumps(found)
    """))
    # the only folders a child can list on the way are those that lead to the mounted Python
    # (the repo root shows `.venv` when the venv lives in a checkout): never a file of ours
    python_path = {part for r in isolation.python_roots() for part in r.split("/") if part}
    assert all(set(listing) <= python_path for listing in json.loads(got)), got


def test_nothing_outside_tmp_can_be_written(tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("tea")
    before = snapshot(tmp_path, SOLUTIONS)
    got = value(attack(f"""
        wrote = []
        for p in ({str(canary)!r}, '/usr/evil', '/grader/child.py', '/etc/ld.so.cache', sys.prefix + '/evil',
                  '/proc/sys/kernel/hostname', '/dev/evil', '/evil'):
            try:
                with open(p, 'w') as f:
                    f.write('x')
                wrote.append(p)
            except OSError:
                pass
        with open('/tmp/mine.txt', 'w') as f:
            f.write('ok')
        return json.dumps(wrote)
    """))
    assert json.loads(got) == [] and snapshot(tmp_path, SOLUTIONS) == before and canary.read_text() == "tea"


def test_no_network_at_all():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    unix = socket.socket(socket.AF_UNIX)
    # a name of this run's own: the abstract namespace is the machine's, and this test's two
    # runs (zygote, bwrap) can overlap on two xdist workers
    name = f"\0milktea-grade-test-{os.getpid()}-{time.monotonic_ns()}".encode()
    unix.bind(name)
    unix.listen(1)
    try:
        got = value(attack(f"""
            reached = []
            for family, addr in ((socket.AF_INET, ('127.0.0.1', {server.getsockname()[1]})),
                                 (socket.AF_UNIX, {name!r}), (socket.AF_INET, ('1.1.1.1', 53))):
                s = socket.socket(family)
                s.settimeout(2)
                try:
                    s.connect(addr)
                    reached.append(str(addr))
                except OSError:
                    pass
            return json.dumps(reached)
        """))
    finally:
        server.close()
        unix.close()
    assert json.loads(got) == []


def test_signals_and_pidfds_cannot_reach_the_grader():
    me = os.getpid()
    got = value(attack(f"""
        done = []
        for pid in (1, {me}, os.getppid()):
            try:
                os.kill(pid, signal.SIGKILL)
                done.append(('kill', pid))
            except OSError:
                pass
        try:
            fd = os.pidfd_open({me})
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            done.append('pidfd')
        except OSError:
            pass
        return json.dumps(done)
    """))
    assert json.loads(got) == []


def test_a_fork_bomb_stops_at_the_process_limit_and_nothing_survives():
    res = attack(f"""
        n = 0
        while n < 1000:
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                os.execv('/bin/sh', ['/bin/sh', '-c', 'sleep 60', {MARK!r}])
            n += 1
        return n
    """)
    assert value(res) < LIMITS.processes
    assert survivors() == []


def test_a_daemon_that_waits_then_writes_dies_with_the_sandbox(tmp_path):
    target = tmp_path / "grades.csv"
    target.write_text("student,total\nalice,16\n")
    before = snapshot(tmp_path)
    res = attack(f"""
        script = "import os, time; time.sleep(3); open({str(target)!r}, 'w').write('forged'); open('/tmp/x', 'w')"
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, '-c', script, {MARK!r}])
            os._exit(0)
        os.wait()
        return 1.0
    """)
    assert value(res) == 1.0
    assert survivors() == []
    time.sleep(4)
    assert snapshot(tmp_path) == before and target.read_text().endswith("alice,16\n")


def test_subprocesses_see_the_same_empty_world():
    got = value(attack(f"""
        out = subprocess.run(['/bin/sh', '-c', 'ls /; cat {SOLUTIONS}/03_topk.ipynb; id -u'],
                             capture_output=True, text=True, timeout=10)
        return out.stdout + out.stderr
    """))
    assert "BEGIN SOLUTION" not in got and "No such file" in got


def test_the_private_tmp_is_bounded():
    got = value(attack("""
        written = 0
        try:
            for i in range(200):
                with open(f'/tmp/f{i}', 'wb') as f:
                    f.write(b'x' * (1 << 20))
                written += 1
        except OSError as e:
            return f'{written} {type(e).__name__}'
        return f'{written} none'
    """))
    n, err = got.split()
    assert int(n) <= LIMITS.tmp_mb and err == "OSError"


def test_hidden_inputs_never_come_back_in_the_output():
    marker = 4242.4242
    case = {"args": encode([np.array([1.0, 2.0]), 1]), "kwargs": None}
    secret = {"args": encode([np.array([marker, 2.0]), 1]), "kwargs": None}
    source = ("import os, sys\nseen = []\n"
              "def attack(x, k):\n    seen.append(repr(list(x)))\n    print('args', seen)\n"
              "    os.write(1, repr(seen).encode())\n    return 1.0\n"
              "def later(x, k):\n    print('later', seen)\n    return 1.0\n")
    res = run([Cell("c0", "cell", source)],
              [TaskJob("1", "attack", [case], [secret]), TaskJob("2", "later", [case], [secret])],
              LIMITS, sandbox=BOX)
    assert [o.ok for o in res.outcomes["1"] + res.outcomes["2"]] == [True] * 4
    assert "4242" not in res.output and "args" in res.output


def test_the_only_writable_folder_is_the_private_tmp():
    roots = tuple(isolation.python_roots())
    got = value(attack(f"""
        found = []
        for top, subs, files in os.walk('/'):
            if top.startswith(('/proc', '/sys', '/usr', '/tmp') + {roots!r}):
                subs[:] = []      # /proc and /sys: the kernel's; the rest: read-only mounts
                continue
            for name in [''] + files:
                path = os.path.join(top, name)
                if os.access(path, os.W_OK) and not path.startswith('/dev/'):
                    found.append(path)
        for path in ('/usr', '/usr/lib', sys.prefix, '/grader', '/dev/shm'):
            if os.access(path, os.W_OK):
                found.append(path)
        return json.dumps(found)
    """))
    assert json.loads(got) == []


def test_one_child_leaves_nothing_for_the_next():
    """Children of one zygote share its world: /tmp, SysV IPC, processes and sockets must not."""
    first = value(attack(f"""
        open('/tmp/left-behind', 'w').write('note')
        s = socket.socket(socket.AF_UNIX)
        s.bind(b'\\0milktea-left-behind')
        s.listen(1)
        if os.fork() == 0:
            os.setsid()
            os.execv('/bin/sh', ['/bin/sh', '-c', 'sleep 30', {MARK!r}])
        return json.dumps(sorted(os.listdir('/tmp')))
    """))
    second = value(attack("""
        seen = [n for n in os.listdir('/tmp') if n == 'left-behind']
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(b'\\0milktea-left-behind')
            seen.append('socket')
        except OSError:
            pass
        seen += [p for p in os.listdir('/proc') if p.isdigit() and int(p) > 2]
        return json.dumps(seen)
    """))
    assert "left-behind" in json.loads(first) and json.loads(second) == [] and survivors() == []


def test_a_child_holds_only_its_own_pipes():
    """A forked child must not inherit the zygote's socket (or any other descriptor)."""
    got = value(attack("""
        fds = []
        for fd in range(4096):
            try:
                os.fstat(fd)
                fds.append(fd)
            except OSError:
                pass
        return json.dumps([fds, int(sys.argv[-1])])
    """))
    fds, channel = json.loads(got)
    assert fds == [0, 1, 2, channel]


def test_a_child_cannot_kill_a_child_running_beside_it():
    """Two children at once (as with --jobs 2): one signals every pid it can name for 3 s,
    the other must finish its case untouched."""
    killer = attack_runner(f"""
        if os.fork() == 0:    # a daemon, so the killing goes on after the case returns
            os.setsid()
            os.execv(sys.executable, [sys.executable, '-c', KILL_ALL, {MARK!r}])
        exec(KILL_ALL)
        return 'done'
    """)
    victim = attack_runner("""
        time.sleep(2)
        return 'alive'
    """)
    out = {}
    threads = [threading.Thread(target=lambda n=n, f=f: out.__setitem__(n, f())) for n, f in
               (("killer", killer), ("victim", victim))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert value(out["victim"]) == "alive" and value(out["killer"]) == "done" and survivors() == []


KILL_ALL = """
import os, signal, time
end = time.time() + 3
while time.time() < end:
    for pid in range(2, 40000):
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
"""


def attack_runner(body):
    """attack(body) to call later, with the world chosen for this test."""
    box = BOX
    src = "KILL_ALL = " + repr(KILL_ALL) + "\n"
    return lambda: _attack_in(box, src, body)


def _attack_in(box, prelude, body):
    source = "import os, sys, json, time, signal, socket, subprocess\n" + prelude + "\ndef attack(x, k):\n" + \
        textwrap.indent(textwrap.dedent(body), "    ")
    case = {"args": encode([np.arange(5.0), 2]), "kwargs": None}
    return run([Cell("c0", "cell", source)], [TaskJob("1", "attack", [case])], LIMITS, sandbox=box, audit=False)


def test_a_zygote_that_cannot_start_leaves_each_child_its_own_sandbox(tmp_path, monkeypatch):
    if not BOX.zygote:
        pytest.skip("this world starts bubblewrap per child: there is no zygote to fail")
    broken = tmp_path / "zygote.py"
    broken.write_text("import sys\nprint('no zygote today', file=sys.stderr)\nsys.exit(3)\n")
    monkeypatch.setattr(isolation, "ZYGOTE", str(broken))
    monkeypatch.setattr(isolation, "_failed", {})
    monkeypatch.setattr(sys.modules[__name__], "BOX", dataclasses.replace(BOX, why="a key of its own"))
    for _ in range(2):   # the second child does not try the zygote again
        res = attack("return json.dumps([os.getuid(), sorted(os.listdir('/grader'))])")
        uid, grader = json.loads(value(res))
        assert uid != 0 and grader == ["child.py", "wire.py"]   # bubblewrap + setpriv, one world per child
        assert len(res.notes) == 1 and "no zygote today" in res.notes[0], res.notes


def test_when_the_grader_dies_everything_it_started_dies(tmp_path):
    """A grader killed with SIGKILL (no clean-up runs) leaves no child, zygote or daemon."""
    script = tmp_path / "grader.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(ROOT / 'tests')!r}, {str(ROOT / 'tests' / 'integration')!r}]
        import dataclasses, test_grade_isolation as t
        from milktea.grade import isolation
        t.BOX = dataclasses.replace(isolation.probe(), zygote={BOX.zygote})
        t.attack('''
            if os.fork() == 0:
                os.setsid()
                os.execv('/bin/sh', ['/bin/sh', '-c', 'sleep 60', {MARK!r}])
            time.sleep(60)
        ''')
    """))
    grader = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        end = time.monotonic() + 60
        while not survivors() and time.monotonic() < end and grader.poll() is None:
            time.sleep(0.2)
        assert survivors(), "the attack never started"
        sandboxes = _descendants(grader.pid)   # bubblewrap, the zygote, children, daemons
        assert sandboxes
    finally:
        grader.kill()
        grader.wait()
    end = time.monotonic() + 10
    while (survivors() or [p for p in sandboxes if _alive(p)]) and time.monotonic() < end:
        time.sleep(0.2)
    assert survivors() == [] and [p for p in sandboxes if _alive(p)] == []


def _descendants(root: int) -> list[int]:
    parent = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            pass
    found, todo = [], [root]
    while todo:
        me = todo.pop()
        kids = [p for p, pp in parent.items() if pp == me]
        found += kids
        todo += kids
    return found


def _alive(pid) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_each_child_draws_its_own_random_numbers():
    """Children forked from one zygote are reseeded, like fresh Pythons (the torch zygote has
    imported random and numpy.random, and torch has its own generator)."""
    draws = [value(attack("""
        import random
        import numpy as np
        import torch
        return json.dumps([random.random(), float(np.random.random()), float(torch.rand(1))])
    """)) for _ in range(2)]
    first, second = map(json.loads, draws)
    assert all(a != b for a, b in zip(first, second)), (first, second)
