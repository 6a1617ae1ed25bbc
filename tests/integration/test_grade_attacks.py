"""A hostile class graded end to end (sandbox and audit hook both on), plus honest students whose
folders are odd. Every attacker submits the 03_topk solution with one graded cell replaced: it
scores 0 on that task and full marks on the others, nothing secret reaches any output, no file
outside the children's /tmp changes, no process survives, and the class table is complete."""
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import zipfile

import pytest
from _grade_helpers import (
    ALIAS_C_MODULE,
    HIDDEN,
    ROOT,
    SOLUTIONS,
    code_cell,
    graded_cell,
    save,
    solution,
    with_cell,
)

from milktea.grade import Limits, assignment, grade_class, isolation
from milktea.grade.records import safe_name
from milktea.grade.report import task_scores
from milktea.grade.prepare import SetupError

BOX = isolation.probe()
# CI must not skip these: a sandbox that cannot start there is a failure, not a pass
pytestmark = pytest.mark.skipif(not BOX.isolated and os.environ.get("CI") != "true",
                                reason=f"no sandbox here: {BOX.why}")
LIMITS = Limits(task_seconds=4, submission_seconds=60, memory_mb=1024, wall_factor=2)   # waiters stop at 8 s
# the tasks and points of 03_topk as the assignment defines them (a new task changes every total)
_A = assignment.load(str(SOLUTIONS / "03_topk.ipynb"))
TOPK = {t.id: float(t.points) for t in _A.tasks}
TOTAL = float(sum(TOPK.values()))
LAST = list(TOPK)[-1]
SECRET = "milktea-grader-secret-9c1d"
SOLUTION_MARK = "SOLUTION-MARK-9c1d"
HIDDEN_MARK = "HIDDEN-MARK-9c1d"
HIDDEN_VALUE = "4242.4242"
FUNCS = {"03.1": "topk_threshold(x, k)", "03.2": "topk_sparsify(x, k)", "03.3": "topk_pack(x, k)",
         "03.4": "topk_unpack(indices, values, shape)"}


def cheat(task, body):
    """A graded cell for `task` whose function runs `body` and then answers wrongly."""
    lines = "\n".join("    " + line for line in body.strip("\n").splitlines())
    return f"import os, sys, json, socket, signal\n\ndef {FUNCS[task]}:\n{lines}\n    return 'wrong'\n"


def attackers(course, subs, out):
    sol = str(course / "solutions" / "03_topk.ipynb")
    hid = str(course / "hidden" / "03_topk.py")
    me = os.getpid()
    return {   # student -> (task, cell source, allowed kinds)
        "read_solution": ("03.1", cheat("03.1", f"""
for path in ({sol!r}, os.path.relpath({sol!r})):
    try:
        return float(open(path).read().count('x'))
    except Exception:
        pass
try:
    fd = os.open('/usr/lib', os.O_RDONLY)
    return float(len(os.read(os.open('../../..' + {sol!r}, os.O_RDONLY, dir_fd=fd), 100)))
except Exception:
    pass"""), {"wrong", "blocked"}),
        "leak_hidden": ("03.2", cheat("03.2", f"raise ValueError(open({hid!r}).read())"), {"blocked", "exception"}),
        "leak_env": ("03.3", cheat("03.3", "print(dict(os.environ))\nraise ValueError(json.dumps(dict(os.environ)))"),
                     {"exception"}),
        "leak_proc": ("03.4", cheat("03.4", f"""
for p in ('/proc/1/environ', '/proc/{me}/environ', '/proc/self/environ'):
    try:
        print(open(p, 'rb').read())
    except Exception as e:
        print(e)
raise ValueError(open('/proc/{me}/environ', 'rb').read())"""), {"blocked", "exception"}),
        "write_out": ("03.1", cheat("03.1", f"""
for p in ({str(out / 'grades.csv')!r}, {str(out / 'results' / 'alice.json')!r}, {hid!r}, {sol!r}):
    try:
        open(p, 'w').write('forged')
    except Exception:
        pass"""), {"wrong"}),
        "other_student": ("03.2", cheat("03.2", f"return open({str(subs / 'alice' / '03_topk.ipynb')!r}).read()"),
                          {"blocked"}),
        "daemon": ("03.3", cheat("03.3", f"""
if os.fork() == 0:
    os.setsid()
    import time
    time.sleep(3)
    open({str(out / 'grades.csv')!r}, 'w').write('forged')"""), {"blocked"}),
        "kill_grader": ("03.4", cheat("03.4", f"os.kill({me}, signal.SIGKILL)"), {"blocked"}),
        "pidfd": ("03.1", cheat("03.1", f"signal.pidfd_send_signal(os.pidfd_open({me}), signal.SIGKILL)"),
                  {"blocked", "exception"}),
        "network": ("03.2", cheat("03.2", "socket.create_connection(('1.1.1.1', 53), timeout=2)"), {"blocked"}),
        "huge_result": ("03.3", "import numpy as np\n\ndef topk_pack(x, k):\n    return np.zeros(3_000_000), x\n",
                        {"bad_output", "memory"}),
        "surrogates": ("03.4", ("import os\n\ndef topk_unpack(indices, values, shape):\n"
                                "    os.write(1, b'\\xff\\xfe\\xed')\n    print('\\udcff')\n"
                                "    raise ValueError('\\ud800 lone \\udfff')\n"), {"exception"}),
        "surrogate_value": ("03.1", "def topk_threshold(x, k):\n    return '\\udcff\\ud800'\n", {"wrong"}),
        # a line after "done" is charged to the last task run, whichever cell wrote it
        "line_after_done": (LAST, "import atexit, os, sys\n\n"
                                  "atexit.register(lambda: os.write(int(sys.argv[-1]), b'{\"ev\": \"done\"}\\n'))\n"
                                  + graded_cell(solution("03_topk"), LAST)["source"], {"protocol"}),
        "forged_line": ("03.2", ("import os, sys\n\ndef topk_sparsify(x, k):\n"
                                 "    os.write(int(sys.argv[-1]), b'{\"ev\": \"result\", \"task\": \"03.2\"}\\n' * 3)\n"
                                 "    return x\n"), {"protocol"}),
        "stdin_thief": ("03.1", "import sys\n\ndef topk_threshold(x, k):\n    return float(len(sys.stdin.read()))\n",
                        {"timeout"}),
        # the audit hook calls builtins the cell can replace: with isinstance lying, every open()
        # passes the hook, and only the sandbox stands between the cell and the course
        "hook_builtins": ("03.2", cheat("03.2", f"""
import builtins
real = builtins.isinstance
builtins.isinstance = lambda obj, kind: True if kind is int else real(obj, kind)
for path in ({sol!r}, {hid!r}, {str(out / 'grades.csv')!r}):
    try:
        text = open(path).read()
    except OSError:
        continue
    raise ValueError('read ' + path)   # "exception" instead of "wrong": the test then fails"""), {"wrong"}),
        "alias_c_module": ("03.3", cheat("03.3", ALIAS_C_MODULE.replace("PATH", repr(sol))), {"blocked", "wrong"}),
        "binary_channel": ("03.3", cheat("03.3", "os.write(int(sys.argv[-1]), b'\\xff\\xfe{]\\x00\\n')"),
                           {"protocol"}),
        "flood_channel": ("03.4", cheat("03.4", "os.write(int(sys.argv[-1]), b'x' * (24 << 20))"),
                          {"bad_output"}),
        "close_channel": ("03.1", cheat("03.1", "os.close(int(sys.argv[-1]))"), {"protocol", "crash"}),
        # walks every frame up to the child's main and reads a traceback through numpy: what it
        # finds (the Python installation's path, the job) comes back scrubbed, never the course's
        "frame_walker": ("03.2", cheat("03.2", """
import traceback
import numpy as np
seen, f = [], sys._getframe()
while f is not None:
    seen.append(repr(f.f_locals)[:3000])
    f = f.f_back
try:
    np.load('missing.npy')
except OSError:
    seen.append(traceback.format_exc())
print('\\n'.join(seen))
raise ValueError(repr([np.__file__, sys.prefix, sys.path] + seen)[:1900])"""), {"exception"}),
    }


HONEST = {   # honest submissions in odd folders: full marks
    "huge_print", "deep_tmp", os.fsdecode(b"jos\xe9"), "jos\\xe9 (2)", "plots", "renamed", "deep_folder",
    ".dot_student", "many_cells"}
REFUSED = {"link_solution", "link_zero", "fifo", "link_student", "device", "big"}   # nothing gradable: zero, a note


@pytest.fixture(scope="module")
def graded(tmp_path_factory, request):
    root = tmp_path_factory.mktemp("attacks")
    course, subs, out = root / "course", root / "submissions", root / "out"
    topk = solution("03_topk")
    marked = with_cell(topk, "03.1", graded_cell(topk, "03.1")["source"] + f"\n# {SOLUTION_MARK}\n")
    save(marked, course / "solutions" / "03_topk.ipynb")
    shutil.copy(SOLUTIONS / "03_topk.tests.py", course / "solutions")
    hidden = (HIDDEN / "03_topk.py").read_text().replace(
        'CASES = {', f'# {HIDDEN_MARK}\nCASES = {{\n    "03.4": [Case("marked", (np.array([1], np.int32), '
                     f'np.array([{HIDDEN_VALUE}], np.float32), (3,)))],', 1)
    (course / "hidden").mkdir()
    (course / "hidden" / "03_topk.py").write_text(hidden)
    for student, (task, source, _) in attackers(course, subs, out).items():
        nb = with_cell(topk, task, source)
        if student == "frame_walker":   # it prints its own cells: without the master's markers in them
            for c in nb["cells"]:
                c["source"] = "".join(line for line in c["source"].splitlines(True) if "### " not in line)
        save(nb, subs / student / "03_topk.ipynb")
    save(topk, subs / "alice" / "03_topk.ipynb")
    save(with_cell(topk, "03.1", graded_cell(topk, "03.1")["source"] + "\nprint('x' * 30_000_000)\n"),
         subs / "huge_print" / "03_topk.ipynb")
    deep = "import os\nfor _ in range(1200):\n    os.mkdir('d')\n    os.chdir('d')\nos.chdir('/tmp')\n"
    save(with_cell(topk, "03.2", deep + graded_cell(topk, "03.2")["source"]), subs / "deep_tmp" / "03_topk.ipynb")
    save(topk, subs / os.fsdecode(b"jos\xe9") / "03_topk.ipynb")
    plots = json.loads(json.dumps(topk))
    plots["cells"].append(dict(code_cell("plot()"), outputs=[{"output_type": "display_data", "metadata": {},
                                                             "data": {"image/png": "A" * (22 << 20)}}]))
    save(plots, subs / "plots" / "03_topk.ipynb")
    save(topk, subs / "renamed" / "download" / "03_topk (1).ipynb")
    save(topk, subs / "deep_folder" / "03_topk.ipynb")
    # too deep for shutil.rmtree (pytest's own clean-up of old runs would crash on it): removed
    # however the fixture ends
    request.addfinalizer(lambda: subprocess.run(["rm", "-rf", str(subs / "deep_folder" / "d")], check=True))
    fd = os.open(subs / "deep_folder", os.O_RDONLY)
    for _ in range(1200):
        os.mkdir("d", dir_fd=fd)
        fd2 = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = fd2
    os.close(fd)
    save(topk, subs / ".dot_student" / "03_topk.ipynb")
    save(topk, subs / "jos\\xe9" / "03_topk.ipynb")    # shows like the Latin-1 name above: still two students
    (subs / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")   # left by a tool: skipped, said so
    many = json.loads(json.dumps(topk))
    many["cells"] += [code_cell("x = 1\n", ["graded"]) for _ in range(10_000)]
    save(many, subs / "many_cells" / "03_topk.ipynb")
    (subs / "link_solution").mkdir()
    os.symlink(course / "solutions" / "03_topk.ipynb", subs / "link_solution" / "03_topk.ipynb")
    (subs / "link_zero").mkdir()
    os.symlink("/dev/zero", subs / "link_zero" / "03_topk.ipynb")
    (subs / "fifo").mkdir()
    os.mkfifo(subs / "fifo" / "03_topk.ipynb")
    (subs / "device").mkdir()
    os.mknod(subs / "device" / "03_topk.ipynb", 0o666 | stat.S_IFCHR, os.makedev(1, 5))   # like /dev/zero
    os.symlink(course / "solutions", subs / "link_student")
    (subs / "big").mkdir()
    with open(subs / "big" / "03_topk.ipynb", "wb") as f:   # 100 MB (sparse): refused, the class graded
        f.truncate(100 << 20)
    watched = snapshot(course, subs)
    mp = pytest.MonkeyPatch()
    mp.setenv("MILKTEA_SECRET", SECRET)
    # the uids this run hands its children: the no-survivor check looks for those alone (the
    # other xdist worker may be grading at the same moment, its children alive and well)
    uids, next_uid = set(), isolation.next_uid

    def recorded():
        uid = next_uid()
        uids.add(uid)
        return uid

    mp.setattr(isolation, "next_uid", recorded)
    try:
        start = time.monotonic()
        records = grade_class(str(subs), str(out), str(course / "solutions"), str(course / "hidden"), seed=3,
                              limits=LIMITS, jobs=2, progress=False)
    finally:
        mp.undo()
    yield {"root": root, "course": course, "subs": subs, "out": out, "records": records, "watched": watched,
           "seconds": time.monotonic() - start, "uids": uids}


def snapshot(*folders):
    state = {}
    for folder in folders:
        for dirpath, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if d != "d"]   # the 1200-deep tree
            for name in files:
                st = os.lstat(os.path.join(dirpath, name))
                state[os.path.join(dirpath, name)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return state


def table(out):
    import csv
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header = [h.split()[0] for h in rows[0]]
    return {r[0]: dict(zip(header[1:-1], map(float, r[1:-1]))) for r in rows[1:]}


def expected(graded):
    full = dict(TOPK, total=TOTAL)
    want = {s: {**full, task: 0.0, "total": TOTAL - TOPK[task]}
            for s, (task, _, _) in attackers(graded["course"], graded["subs"], graded["out"]).items()}
    want.update({s: full for s in HONEST | {"alice"}})
    want.update({s: {**{t: 0.0 for t in TOPK}, "total": 0.0} for s in REFUSED})
    return {s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"): v for s, v in want.items()}


def test_the_table_is_complete_and_exact(graded):
    assert table(graded["out"]) == expected(graded)


@pytest.mark.parametrize("student", sorted(attackers(ROOT, ROOT, ROOT)))
def test_each_attack_costs_only_its_task(graded, student):
    task, _, kinds = attackers(ROOT, ROOT, ROOT)[student]
    rec = graded["records"][student]
    assert rec["extra_data"]["kinds"][task] in kinds, rec["extra_data"]["kinds"]


def test_nothing_secret_reaches_any_output(graded):
    for dirpath, _, files in os.walk(graded["out"]):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                data = f.read()
            data.decode("utf-8")   # every output file is valid UTF-8
            for mark in (SECRET, SOLUTION_MARK, HIDDEN_MARK, HIDDEN_VALUE, "BEGIN SOLUTION", "PATH="):
                assert mark.encode() not in data, (name, mark)
    # what students read names none of the grader's own files: no checkout, course, venv or sandbox path
    # (attackers that typed a path into their own code see it quoted back: that is theirs)
    grader = [str(ROOT), str(graded["course"]), os.path.realpath(sys.prefix), "/grader/", "child.py", "zygote.py"]
    machine = grader[:3] + [str(graded["out"]), str(graded["subs"])]   # /grader/child.py: the sandbox's own layout
    for student in HONEST | REFUSED | {"alice", "frame_walker"}:
        student = student.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        for path in (graded["out"] / "results" / f"{safe_name(student)}.json",
                     graded["out"] / "feedback" / f"{safe_name(student)}.txt"):
            text = path.read_text(encoding="utf-8")
            for mark in (machine if student == "frame_walker" else grader):
                assert mark not in text, (path.name, mark)


def test_no_file_outside_the_sandbox_changed_and_no_process_survived(graded):
    time.sleep(4)   # longer than the daemon attack waits before it writes
    assert snapshot(graded["course"], graded["subs"]) == graded["watched"]
    assert table(graded["out"]) == expected(graded)
    assert not [f for f in os.listdir(graded["out"]) if f not in
                ("grades.csv", "results", "feedback", "summary.txt", "run.json", ".resume-key", ".state")]
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration):
            continue
        if uid in graded["uids"]:
            left.append(pid)
    if os.geteuid() == 0:   # children get fresh uids only from a root grader (else: 65534 in a user namespace)
        assert graded["uids"], "the run handed out no uid: the search for survivors would see nothing"
    assert left == []


def test_odd_folders_are_graded_or_refused_with_a_note(graded):
    out = graded["out"]
    summary = (out / "summary.txt").read_text()
    assert "skipped .DS_Store: left by a tool" in summary
    assert "Isolation: bubblewrap" in summary
    fb = lambda s: (out / "feedback" / f"{s}.txt").read_text()
    assert "the first 100 ran, the other 9900 did not" in fb("many_cells")
    assert "symbolic link" in fb("link_solution") and "symbolic link" in fb("link_zero")
    assert "a FIFO" in fb("fifo") and "symbolic link" in fb("link_student") and "a device" in fb("device")
    assert "deeper than 6 folders" in fb("deep_folder") and "100 MB, over the 64 MB limit" in fb("big")
    assert "not UTF-8 text" in fb(safe_name("jos\\xe9 (2)"))   # b"jos\\xe9" sorts after the text "jos\\xe9"
    assert "jos\\xe9" in (out / "grades.csv").read_text()
    run = json.loads((out / "run.json").read_text())
    assert run["isolated"] is True
    hidden = graded["course"] / "hidden" / "03_topk.py"
    assert run["inputs"][str(hidden)] == hashlib.sha256(hidden.read_bytes()).hexdigest()


def test_a_forged_resume_record_is_regraded(graded, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(graded["out"], out)
    rec = json.loads((out / ".state" / "read_solution.json").read_text())
    for res in rec["results"]:
        for t in res["tasks"]:
            t["score"], t["passed"], t["kind"] = t["points"], t["total"], ""
    (out / ".state" / "read_solution.json").write_text(json.dumps(rec))
    keep = {s: graded["subs"] / s for s in ("read_solution", "alice")}
    subs = tmp_path / "subs"
    for s, p in keep.items():
        shutil.copytree(p, subs / s)
    grade_class(str(subs), str(out), str(graded["course"] / "solutions"), str(graded["course"] / "hidden"),
                limits=LIMITS, progress=False)
    assert (out / "summary.txt").read_text().startswith("Graded 1 submission ")
    assert table(out) == {s: expected(graded)[s] for s in keep}


def test_without_a_sandbox_grading_refuses_unless_trusted(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    save(solution("03_topk"), subs / "alice" / "03_topk.ipynb")
    none = isolation.Sandbox("none", why="no namespaces in this test")
    with pytest.raises(SetupError, match="--trust-submissions"):
        grade_class(str(subs), str(out), str(SOLUTIONS), box=none, progress=False)
    grade_class(str(subs), str(out), str(SOLUTIONS), box=none, trust=True, limits=LIMITS, progress=False)
    run = json.loads((out / "run.json").read_text())
    assert run["isolated"] is False and "NOT ISOLATED" in run["isolation"]
    assert "NOT ISOLATED" in (out / "summary.txt").read_text() and table(out)["alice"]["total"] == TOTAL


def test_without_bubblewrap_the_refusal_names_what_to_install(tmp_path, monkeypatch):
    """util-linux unshare alone is not taken for a sandbox: it can't hide the disk."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("unshare", "setpriv"):
        (bin_ / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(bin_))
    box = isolation.probe.__wrapped__()
    assert not box.isolated and "bubblewrap (bwrap) is not installed" in box.why
    assert "unshare is here" in box.why and "apt-get install bubblewrap" in box.why
    subs = tmp_path / "subs"
    save(solution("03_topk"), subs / "alice" / "03_topk.ipynb")
    with pytest.raises(SetupError, match="apt-get install bubblewrap.*--trust-submissions"):
        grade_class(str(subs), str(tmp_path / "out"), str(SOLUTIONS), box=box, progress=False)
    assert not (tmp_path / "out" / "grades.csv").exists()
    lines = isolation.tools()
    assert "bubblewrap: not found" in lines[0] and lines[2].startswith(f"unshare: {bin_}")


def test_the_gradescope_bundle_grades_a_submission(tmp_path):
    bundle = tmp_path / "bundle"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "milktea.grade", "gradescope", "--out", str(bundle),
                           "--chapter", "03_topk", "--hidden", str(HIDDEN)], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    root = tmp_path / "autograder"
    with zipfile.ZipFile(str(bundle) + ".zip") as z:
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
        z.extractall(root / "source")
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111 and "solutions/03_topk.ipynb" in modes
    wrong = with_cell(solution("03_topk"), "03.2", "def topk_sparsify(x, k):\n    return 'wrong'\n")
    save(wrong, root / "submission" / "my notebook.ipynb")
    env = {"PATH": os.environ["PATH"], "MILKTEA_AUTOGRADER_ROOT": str(root),
           "MILKTEA_AUTOGRADER_PYTHON": sys.executable}
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    res = json.loads((root / "results" / "results.json").read_text())
    assert res["score"] == TOTAL - TOPK["03.2"] and res["stdout_visibility"] == "hidden"
    assert task_scores(res) == {**TOPK, "03.2": 0.0}
    assert all(set(t) >= {"name", "score", "max_score", "output", "visibility"} for t in res["tests"])
    hidden = next(t for t in res["tests"] if t["name"].startswith("03.2") and t["name"].endswith("(hidden tests)"))
    assert "hidden checks failed" in hidden["output"] and hidden["visibility"] == "after_due_date"
