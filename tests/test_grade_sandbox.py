"""The out-of-process protocol: plain data both ways, the audit hook, isolation between tasks,
time limits that cost one task only."""
import json

import numpy as np
import pytest

from _grade_helpers import ROOT
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


@pytest.mark.parametrize("source, refused", [
    (f"open({str(ROOT / 'pyproject.toml')!r}).read()", "may not read"),
    (f"__import__('os').listdir({str(ROOT)!r})", "may not list"),
    ("open('/tmp/escaped.txt', 'w')", "may not write"),
    (f"__import__('os').remove({str(ROOT / 'Makefile')!r})", "may not change files"),
    ("__import__('os').system('true')", "os.system"),
    ("__import__('socket').create_connection(('127.0.0.1', 9))", "socket"),
    ("__import__('ctypes').CDLL('libc.so.6')", "native library"),
    ("__import__('resource').setrlimit(__import__('resource').RLIMIT_AS, (-1, -1))", "resource.setrlimit"),
])
def test_the_audit_hook_refuses(source, refused):
    cells = [Cell("c0", "cell", f"def attempt(x, k):\n    {source}\n    return 1.0\n")]
    o = run(cells, jobs("attempt"), FAST).outcomes["0"][0]
    assert (o.ok, o.kind) == (False, "blocked") and refused in o.message, o.message


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
