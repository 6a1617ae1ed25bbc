"""The out-of-process protocol: plain data both ways, the audit hook, isolation between tasks,
time limits that cost one task only."""
import json

import numpy as np
import pytest

from _grade_helpers import ALIAS_C_MODULE, ROOT
from milktea.grade.child import decode, encode
from milktea.grade.sandbox import Cell, Limits, TaskJob, run

FAST = Limits(task_seconds=2, submission_seconds=30, memory_mb=1024)


def jobs(*names, cases=1):
    case = {"args": encode([np.arange(5.0), 2]), "kwargs": None}
    return [TaskJob(str(i), name, [case] * cases) for i, name in enumerate(names)]


@pytest.mark.parametrize("value", [
    1, -2**63, 2.5, float("inf"), float("nan"), None, True, "text", b"\x00\xff",
    np.arange(6, dtype=np.int32).reshape(2, 3), np.float32(1.5), np.zeros(0, np.uint8),
    np.array([1.0, np.nan], np.float16), [1, (2.0, np.ones(2))], {"a": [1, 2]}, np.array(True),
])
def test_plain_data_round_trip(value):
    back = decode(json.loads(json.dumps(encode(value))))
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and back.shape == value.shape
        np.testing.assert_array_equal(back, value)
    elif isinstance(value, float) and value != value:
        assert back != back
    elif isinstance(value, (list, tuple)):
        assert back[0] == 1 and back[1][0] == 2.0 and list(back[1][1]) == [1.0, 1.0]
    else:
        assert back == (value.item() if isinstance(value, np.generic) else value)


@pytest.mark.parametrize("bad", [
    {"__nd__": ["<f4", [3], "AAAA"]},               # 3 bytes for 3 floats
    {"__nd__": ["|O", [1], "AAAAAAAAAAA="]},        # object dtype: never
    {"__nd__": ["<f8", [-1], ""]},
    {"__pickle__": "gASVAAAA"},
    {"a": 1, "b": 2},
    {"__float__": "1e400"},
    2**70,
    [[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]],
])
def test_decode_rejects_what_encode_never_writes(bad):
    with pytest.raises(ValueError):
        decode(bad)


def test_encode_refuses_objects():
    for value in (object(), np.array(["a"]), np.array([1 + 2j]), {1: 2}, lambda: 0):
        with pytest.raises(TypeError):
            encode(value)


def test_a_monkeypatch_does_not_reach_the_next_task():
    cells = [Cell("c0", "patcher", "import numpy as np, builtins, json\n"
                                   "np.sort = np.sum = None\nbuiltins.sum = builtins.abs = None\njson.dumps = None\n"
                                   "def patch(x, k):\n    np.max = None\n    builtins.len = None\n    return 1.0\n"),
             Cell("c1", "user", "import numpy as np\ndef use(x, k):\n"
                                "    return float(np.sort(x)[-k] + np.sum(x) + np.max(x) + sum([1]) + len(x) + abs(-1))\n")]
    res = run(cells, jobs("patch", "use"), FAST)
    assert res.outcomes["0"][0].value == 1.0
    assert res.outcomes["1"][0].ok and res.outcomes["1"][0].value == 3.0 + 10.0 + 4.0 + 1 + 5 + 1


def test_a_hang_costs_only_its_task_and_the_child_is_restarted():
    cells = [Cell("c0", "cell", "def ok(x, k):\n    return float(k)\n"
                                "def hang(x, k):\n    while True:\n        pass\n")]
    res = run(cells, jobs("ok", "hang", "ok", cases=2), FAST)
    assert [o.ok for o in res.outcomes["0"]] == [True, True] == [o.ok for o in res.outcomes["2"]]
    assert [o.kind for o in res.outcomes["1"]] == ["timeout", "skipped"]
    assert res.children == 2


def test_the_submission_budget_stops_what_is_left():
    cells = [Cell("c0", "cell", "def hang(x, k):\n    while True:\n        pass\n")]
    res = run(cells, jobs("hang", "hang", "hang"), Limits(task_seconds=2, submission_seconds=3, memory_mb=1024))
    kinds = [res.outcomes[str(i)][0].kind for i in range(3)]
    assert kinds[0] == "timeout" and kinds[2] == "budget"


NATIVE = "__import__('numpy')._core._multiarray_umath.__file__"   # a library in the Python installation


@pytest.mark.parametrize("source, refused", [
    (f"open({str(ROOT / 'pyproject.toml')!r}).read()", "may not read"),
    (f"__import__('os').listdir({str(ROOT)!r})", "may not list"),
    ("open('/tmp/escaped.txt', 'w')", "may not write"),
    (f"__import__('os').remove({str(ROOT / 'Makefile')!r})", "may not change files"),
    ("__import__('os').system('true')", "os.system"),
    ("__import__('socket').create_connection(('127.0.0.1', 9))", "socket"),
    ("__import__('ctypes').CDLL('libc.so.6')", "native library"),
    ("__import__('resource').setrlimit(__import__('resource').RLIMIT_AS, (-1, -1))", "resource.setrlimit"),
    # subprocess is imported (libraries import it), its one unaudited way to start a process is not
    ("__import__('sys').modules['_posixsubprocess'].fork_exec(*[None] * 23)", "start other processes"),
    ("__import__('subprocess')._fork_exec(*[None] * 23)", "start other processes"),
    ("__import__('subprocess').run(['true'])", "subprocess.Popen"),
    # ctypes is numba's and llvmlite's: a cell's own lookup is refused, and no one looks up fork,
    # not even code run in numba's globals
    (f"__import__('ctypes').CDLL({NATIVE}).getpid", "ctypes.dlsym"),
    ("import numba; exec(" + repr("__import__('ctypes').CDLL(" + NATIVE + ").fork") + ", vars(numba))",
     "start other processes"),
])
def test_the_audit_hook_refuses(source, refused):
    """Each refusal of the audit hook, in a plain child (no sandbox): what it says."""
    cells = [Cell("c0", "cell", f"def attempt(x, k):\n    {source}\n    return 1.0\n")]
    o = run(cells, jobs("attempt"), FAST).outcomes["0"][0]
    assert (o.ok, o.kind) == (False, "blocked") and refused in o.message, o.message


def test_replacing_builtins_does_not_blind_the_audit_hook():
    """The hook's own isinstance/any are bound when it is installed: a cell that makes
    isinstance(path, int) lie (an int path is an fd, which the hook lets through) or any()
    answer True is still refused."""
    body = ("    import builtins\n    real = builtins.isinstance\n"
            "    builtins.isinstance = lambda obj, kind: True if kind is int else real(obj, kind)\n"
            "    builtins.any = lambda it: True\n"
            f"    return open({str(ROOT / 'pyproject.toml')!r}).read()\n")
    o = run([Cell("c0", "cell", "def attempt(x, k):\n" + body)], jobs("attempt"), FAST).outcomes["0"][0]
    assert (o.ok, o.kind) == (False, "blocked") and "may not read" in o.message, o.message


def test_the_subprocess_c_module_under_another_name_is_refused():
    body = "import os\ndef attempt(x, k):\n" + "\n".join(
        "    " + line for line in ALIAS_C_MODULE.replace("PATH", repr(str(ROOT / "pyproject.toml"))).splitlines())
    o = run([Cell("c0", "cell", body + "\n    return 1.0\n")], jobs("attempt"), FAST).outcomes["0"][0]
    assert (o.ok, o.kind) == (False, "blocked") and "start other processes" in o.message, o.message


def test_own_temp_dir_is_usable_and_limits_hold():
    cells = [Cell("c0", "cell", "import resource\n"
                                "def files(x, k):\n    open('note.txt', 'w').write('tea')\n    return open('note.txt').read()\n"
                                "def limits(x, k):\n    return resource.getrlimit(resource.RLIMIT_AS)[1]\n")]
    res = run(cells, jobs("files", "limits"), FAST)
    assert res.outcomes["0"][0].value == "tea"
    assert 1024 << 20 < res.outcomes["1"][0].value < (1024 << 20) + (2 << 30)


def test_a_cell_that_kills_its_process_costs_only_that_cell():
    cells = [Cell("c0", "first", "def a(x, k):\n    return 1.0\n"),
             Cell("c1", "killer", "import os\nos._exit(3)\ndef b(x, k):\n    return 2.0\n"),
             Cell("c2", "third", "def c(x, k):\n    return 3.0\n")]
    res = run(cells, jobs("a", "b", "c"), FAST)
    assert res.outcomes["0"][0].value == 1.0 and res.outcomes["2"][0].value == 3.0
    assert "1" in res.missing and res.cell_errors["c1"]["kind"] == "crash"


def test_spec_docstring_examples():
    import doctest

    import milktea.grade.spec as spec
    assert doctest.testmod(spec).failed == 0


@pytest.mark.parametrize("name", ["isolation", "submissions", "sandbox"])
def test_grade_docstring_examples(name):
    import doctest
    import importlib
    assert doctest.testmod(importlib.import_module(f"milktea.grade.{name}")).failed == 0


@pytest.mark.parametrize("text, clean", [
    ("ok\n\tfine", "ok\n\tfine"), ("\ud800 lone", "\\ud800 lone"), ("\x1b[31mred", "?[31mred"), ("x" * 50, "x" * 10),
])
def test_child_text_is_made_safe(text, clean):
    from milktea.grade.sandbox import clean_text
    assert clean_text(text, 10 if len(text) == 50 else 100) == clean


def test_extra_lines_and_bad_bytes_on_the_channel_cost_one_task():
    cells = [Cell("c0", "cell", "import atexit, os, sys\n"
                                "def ok(x, k):\n    return 1.0\n"
                                "def bad(x, k):\n    os.write(int(sys.argv[-1]), b'\\xff\\xfe\\n')\n    return 1.0\n"
                                "def last(x, k):\n"
                                "    atexit.register(lambda: os.write(int(sys.argv[-1]), b'{\"ev\": \"done\"}\\n'))\n"
                                "    return 1.0\n")]
    res = run(cells, jobs("ok", "bad", "ok", "last"), FAST)
    assert [o.ok for o in res.outcomes["0"] + res.outcomes["2"]] == [True, True]
    assert res.outcomes["1"][0].kind == "protocol" and res.outcomes["3"][0].kind == "protocol"


def test_the_submissions_folder_is_read_without_following_anything(tmp_path):
    import os
    import stat

    from _grade_helpers import CHAPTERS, SOLUTIONS, save, solution
    from milktea.grade.submissions import find_submissions
    topk = solution("03_topk")
    save(topk, tmp_path / os.fsdecode(b"caf\xe9.ipynb"))                  # a lone notebook, non-UTF-8 name
    save(topk, tmp_path / "a" / "b" / "c" / "d" / "e" / "f" / "h" / "03_topk.ipynb")   # 6 levels: found
    save(topk, tmp_path / "g" / "1" / "2" / "3" / "4" / "5" / "6" / "7" / "03_topk.ipynb")   # 7: not
    (tmp_path / "dev").mkdir()
    try:
        os.mknod(tmp_path / "dev" / "03_topk.ipynb", stat.S_IFCHR | 0o600, os.makedev(1, 5))   # /dev/zero
    except PermissionError:
        os.symlink("/dev/zero", tmp_path / "dev" / "03_topk.ipynb")
    (tmp_path / "link").mkdir()
    os.symlink(SOLUTIONS, tmp_path / "link" / "sub")                       # a folder link inside a student's
    (tmp_path / "link" / "03_topk.ipynb").write_bytes(b"\x00" * 10)
    students, _ = find_submissions(str(tmp_path), CHAPTERS)
    assert set(students) == {"caf\\xe9", "a", "g", "dev", "link"}
    assert students["caf\\xe9"].files["03_topk"].nb is not None
    assert students["a"].files["03_topk"].shown == "b/c/d/e/f/h/03_topk.ipynb"
    assert students["g"].files == {} and "deeper than 6" in " ".join(map(str, students["g"].notes))
    assert students["dev"].files == {} and "only regular files" in " ".join(map(str, students["dev"].notes))
    assert "not followed" in " ".join(map(str, students["link"].notes))
    assert "not valid JSON" in str(students["link"].files["03_topk"].error)
