"""The exercise notebooks: generated from the solutions, full marks for the solutions, zero (and
no crash) for the untouched exercises, correct alternatives accepted, the student command."""
import os
import subprocess
import sys

import nbformat
import numpy as np
import pytest

from _grade_helpers import (CHAPTERS, EXERCISES, ROOT, SOLUTIONS, TORCH_TOPK, graded_cell, prepared as prepare,
                            reference, save, solution, tasks, with_cell)
from milktea.grade.evaluate import grade_notebook
from milktea.grade.make_exercises import BEGIN, END, exercise_from, strip_solution
from milktea.grade.public_checks import SUFFIX
from milktea.grade.notebook import cell_tasks, notebook_text, read_notebook


@pytest.fixture(scope="module")
def prepared():
    return {ch: prepare(ch, seed=11) for ch in CHAPTERS}


def test_every_chapter_has_a_pair_of_notebooks():
    assert sorted(p.stem for p in SOLUTIONS.glob("*.ipynb")) == CHAPTERS
    assert sorted(p.name for p in SOLUTIONS.glob("*.tests.py")) == [f"{ch}.tests.py" for ch in CHAPTERS]
    assert sorted(p.name for p in EXERCISES.glob("*" + SUFFIX)) == [ch + SUFFIX for ch in CHAPTERS]
    assert sorted(p.stem for p in EXERCISES.glob("*.ipynb")) == CHAPTERS


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_exercise_is_generated_from_its_solution(chapter):
    committed = (EXERCISES / f"{chapter}.ipynb").read_text(encoding="utf-8")
    assert committed == notebook_text(exercise_from(solution(chapter), name=chapter)), \
        "exercises/ is out of date: run python -m milktea.grade.make_exercises"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebooks_are_clean_and_tagged(chapter):
    for folder in (SOLUTIONS, EXERCISES):
        path = folder / f"{chapter}.ipynb"
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")
        ours = read_notebook(str(path))
        tagged = [t for c in ours["cells"] for t in cell_tasks(c)]
        assert tagged == [t.id for t in tasks(chapter)], "one graded cell per task, in order"
        text = "".join(c["source"] for c in ours["cells"])
        for t in tasks(chapter):
            assert f"Task {t.id}" in text and f"({t.points:g} point" in text and f"def {t.function}(" in text
    for t in tasks(chapter):
        stub = graded_cell(read_notebook(str(EXERCISES / f"{chapter}.ipynb")), t.id)["source"]
        assert "raise NotImplementedError" in stub and BEGIN not in stub and END not in stub


def test_strip_solution():
    src = "def f(x):\n    '''doc'''\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n"
    assert strip_solution(src) == ("def f(x):\n    '''doc'''\n    # YOUR CODE HERE\n"
                                   "    raise NotImplementedError(\"replace this line with your code\")\n")
    assert strip_solution("a = 1") == "a = 1"
    for bad in (f"{BEGIN}\n", f"{END}\n", f"{BEGIN}\n{BEGIN}\n{END}\n"):
        with pytest.raises(ValueError):
            strip_solution(bad)


def test_make_exercises_check_command(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "milktea.grade.make_exercises", *a], cwd=ROOT,
                                    capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run("--check").returncode == 0
    stale = tmp_path / "ex"
    stale.mkdir()
    (stale / "03_topk.ipynb").write_text("{}")
    done = run("--check", "--exercises", str(stale))
    assert done.returncode == 1 and "out of date" in done.stderr


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solution_scores_full_marks(prepared, chapter):
    res = grade_notebook(str(SOLUTIONS / f"{chapter}.ipynb"), prepared[chapter])
    assert [(t.id, t.score, t.kind) for t in res.tasks] == [(t.id, t.points, "") for t in tasks(chapter)], \
        [t.lines for t in res.tasks]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_untouched_exercise_scores_zero_without_crashing(prepared, chapter):
    res = grade_notebook(str(EXERCISES / f"{chapter}.ipynb"), prepared[chapter])
    for t in res.tasks:
        assert (t.score, t.kind) == (0, "not_implemented")
        assert "raise NotImplementedError" in t.lines[0] and len(t.lines) == 1


def test_cases_are_fresh_per_seed_and_fixed_within_one():
    a, b, c = (prepare("03_topk", s, hidden=False) for s in (1, 1, 2))
    enc = lambda ch: [p.encoded for p in ch.tasks]
    assert enc(a) == enc(b) and enc(a) != enc(c)


ALTERNATIVES = {
    # float64 arithmetic, reusing an earlier task's function, another rounding path
    "05_quantization": {
        "05.1": "import numpy as np\n\ndef absmax_quantize(x, bits, chunk=None):\n    L = 2 ** (bits - 1) - 1\n"
                "    x64 = np.asarray(x, np.float64).ravel()\n    size = x64.size if chunk is None else chunk\n"
                "    codes, scales = np.zeros(x64.size, np.int8), []\n"
                "    for s in range(0, x64.size, size):\n        part = x64[s:s + size]\n"
                "        m = np.max(np.abs(part))\n        scales.append(m / L)\n"
                "        if m > 0:\n            codes[s:s + size] = np.clip(np.rint(part * (L / m)), -L, L)\n"
                "    return codes.reshape(np.shape(x)), np.array(scales, np.float32)\n",
        "05.3": "import math\n\ndef small_push(delta, scale, nights):\n    y = delta / scale\n"
                "    f = y - math.floor(y)\n    near = math.floor(y + 0.5)\n"
                "    return nights * near * scale, delta * nights, math.sqrt(nights * f * (1 - f)) * scale\n",
    },
    "04_error_feedback": {
        "04.2": "import numpy as np\n\ndef ef_run(grads, k):\n    residual = np.zeros_like(grads[0])\n"
                "    sent_all = []\n    for g in grads:\n        sent, residual = ef_step(g, residual, k)\n"
                "        sent_all.append(sent)\n    return np.sum(sent_all, axis=0), residual\n",
    },
    "03_topk": TORCH_TOPK,
}


@pytest.mark.parametrize("chapter", sorted(ALTERNATIVES))
def test_other_correct_solutions_get_full_marks(prepared, chapter, tmp_path):
    nb = solution(chapter)
    for task, source in ALTERNATIVES[chapter].items():
        nb = with_cell(nb, task, source)
    res = grade_notebook(str(save(nb, tmp_path / f"{chapter}.ipynb")), prepared[chapter])
    assert all(t.score == t.points for t in res.tasks), [(t.id, t.lines) for t in res.tasks]


def test_a_wrong_answer_is_explained(prepared, tmp_path):
    nb = with_cell(solution("03_topk"), "03.1", "import numpy as np\n\ndef topk_threshold(x, k):\n"
                                               "    a = np.sort(np.abs(x).ravel())\n    return float(a[-k - 1])\n")
    res = grade_notebook(str(save(nb, tmp_path / "03_topk.ipynb")), prepared["03_topk"])
    t = res.tasks[0]
    assert t.kind in ("wrong", "exception") and 0 <= t.score < t.points
    text = "\n".join(t.lines)
    assert "case 'k = 1: only the biggest change': topk_threshold(x=float32 array of shape (4,) [3, -5, 1, 4], k=1)" in text
    assert "expected 5, got 4" in text
    assert [x.score for x in res.tasks[1:]] == [t.points for t in tasks("03_topk")[1:]]


def test_check_command_speaks_of_public_tests_only():
    run = lambda nb: subprocess.run([sys.executable, "-m", "milktea.grade.check", nb], cwd=EXERCISES,
                                    capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    todo = run("03_topk.ipynb")
    assert todo.returncode == 1
    assert "not implemented yet" in todo.stdout and "Public tests passed for 0 of 6 tasks" in todo.stdout
    done = run(str(SOLUTIONS / "03_topk.ipynb"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Public tests passed: 13/13" in done.stdout and "hidden tests" in done.stdout
    assert "all tests passed" not in done.stdout.lower()
    missing = run("nope.ipynb")
    assert missing.returncode == 2 and "there is no notebook nope.ipynb" in missing.stderr


def test_reference_agrees_with_the_library():
    cost = pytest.importorskip("milktea.cost")
    ref = reference("01_bottleneck")
    link = cost.Link.gbit(25, 5e-5)
    for n, w in [(1e9, 64), (4e6, 8), (1e3, 2)]:
        assert ref["ring_allreduce_time"](n, w, 25, 5e-5) == pytest.approx(cost.ring_allreduce_time(n, w, link))
        assert ref["ring_allreduce_bytes"](n, 1, w) == pytest.approx(cost.ring_allreduce_bytes(n, w))
    assert ref["iteration_time"](0.2, 10**9, 4, 8, 25, 0)[1] == pytest.approx(
        cost.waiting_fraction(0.2, cost.ring_allreduce_time(4e9, 8, cost.Link.gbit(25, 0))))
    eng = reference("06_engineering")
    back, comm = [0.05, 0.2, 0.01, 0.1], [0.15, 0.02, 0.3, 0.0]
    timeline = cost.overlapped_timeline(back, comm, forward=0.04)
    np.testing.assert_allclose(eng["overlap_timeline"](np.array(back), np.array(comm)),
                               np.array(timeline.comm) - 0.04, atol=1e-12)
    assert eng["step_time"](0.04, back, comm, True) == pytest.approx(timeline.total)
    assert eng["step_time"](0.04, back, comm, False) == pytest.approx(timeline.serial)


def test_exercise_encodings_match_the_library():
    torch = pytest.importorskip("torch")
    index = pytest.importorskip("milktea.index")
    milktea = pytest.importorskip("milktea")
    eng = reference("06_engineering")
    rng = np.random.default_rng(3)
    for idx in (np.array([0, 3, 300]), np.array([5, 516]), np.sort(rng.choice(10**6, 3000, replace=False))):
        _, lib = index.encode(torch.as_tensor(idx), 10**6, "delta8")
        np.testing.assert_array_equal(eng["delta_encode"](idx), lib.numpy())
        np.testing.assert_array_equal(eng["delta_decode"](lib.numpy()), idx)
    q = reference("05_quantization")
    x = rng.standard_normal(5000).astype(np.float32)
    x[1000:2024] = 0.0                                   # a chunk of zeros, as blank pixels give
    x[3000] = -40.0                                      # a chunk whose largest magnitude is negative
    for bits, chunk in ((8, None), (8, 1024), (4, 256), (2, 1000)):
        codes, scales = q["absmax_quantize"](x, bits, chunk)
        mine = codes.astype(np.float32) * np.repeat(scales, x.size if chunk is None else chunk)[:x.size]
        quant = milktea.Quantize(bits=bits, chunk=chunk)
        np.testing.assert_allclose(mine, quant.decompress(quant.compress(torch.as_tensor(x))).numpy(),
                                   rtol=1e-5, atol=1e-7)
    topk = reference("03_topk")
    sparse = milktea.TopK(k=50).decompress(milktea.TopK(k=50).compress(torch.as_tensor(x))).numpy()
    np.testing.assert_array_equal(topk["topk_sparsify"](x, 50), sparse)


def test_sharding_answers_agree_with_the_fsdp_cost_model_and_the_quantizer():
    """Exercise 09's masters against milktea.fsdp.cost (ZeRO memory and bytes, the ledger's
    place, HSDP's hop) and against milktea's blockwise quantizer on every chunk."""
    torch = pytest.importorskip("torch")
    milktea = pytest.importorskip("milktea")
    from milktea.fsdp import cost
    ref = reference("09_sharding")
    rng = np.random.default_rng(9)
    for _ in range(200):
        P, N = float(10 ** rng.uniform(3, 11)), int(rng.integers(1, 300))
        pb, gb, ob = (int(rng.choice(c)) for c in ([2, 4], [2, 4], [0, 4, 8, 12]))
        M = P * (pb + gb + ob) * 10 ** rng.uniform(-3, 0.2)
        held = [cost.memory_per_rank(P, N, stage=s, param_bytes=pb, grad_bytes=gb, optimizer_bytes=ob)["total"]
                for s in range(4)]
        assert ref["smallest_stage"](P, N, M, pb, gb, ob) == next((s for s in range(4) if held[s] <= M), None)
        stage, again, g, w = int(rng.integers(0, 4)), P * rng.uniform(0, 1), *rng.choice([1.016, 2.0, 4.0], 2)
        assert ref["sharded_step_bytes"](P, N, stage, g, w, again) == pytest.approx(
            cost.step_bytes(P, N, stage=stage, grad_bytes=g, weight_bytes=w, regathered=again)["total"], rel=1e-12)
        ledger = [None, "worker", "shard"][int(rng.integers(0, 3))]
        fits = ref["largest_model"](M, N, pb, gb, ob, ledger)
        total = [cost.memory_per_rank(p, N, param_bytes=pb, grad_bytes=gb, optimizer_bytes=ob, ledger=ledger)["total"]
                 for p in (fits, fits + 1)]
        assert total[0] <= M * (1 + 1e-12) and total[1] > M * (1 - 1e-12)
        R, packet = int(rng.integers(1, 40)), [None, 1.016, 0.53][int(rng.integers(0, 3))]
        assert ref["slow_link_bytes"](P, N, R, g, packet) == pytest.approx(
            cost.step_bytes(P, N, replicas=R, grad_bytes=g, replica_bytes=packet).get("all_reduce", 0.0), rel=1e-12)
    for ranks, size, bits, block in ((2, 9, 8, 4), (4, 16, 4, 3), (3, 5, 8, 64), (1, 7, 2, 2)):
        grads = rng.standard_normal((ranks, ranks * size))
        grads[0, :2] = 0.0                               # a block of zeros
        quant = milktea.Quantize(bits=bits, chunk=block)
        lib = np.zeros((ranks, size))
        for src in range(ranks):
            for dst in range(ranks):
                chunk = torch.as_tensor(grads[src, dst * size:(dst + 1) * size], dtype=torch.float32)
                lib[dst] += quant.decompress(quant.compress(chunk)).double().numpy()
        np.testing.assert_allclose(ref["qgz_reduce_scatter"](grads, bits, block), lib / ranks, rtol=1e-5, atol=1e-6)


def test_error_feedback_keeps_the_ledger():
    ef = reference("04_error_feedback")
    rng = np.random.default_rng(0)
    grads = rng.standard_normal((6, 50))
    total, residual = ef["ef_run"](grads, 5)
    np.testing.assert_allclose(total + residual, grads.sum(0), atol=1e-12)


@pytest.mark.notebooks
@pytest.mark.timeout(600)
def test_solution_notebooks_run_top_to_bottom():
    """The instructor copy runs as a whole in a fresh kernel, the check cell included."""
    from nbclient import NotebookClient
    env_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env_path   # the kernel and the checker it starts find milktea
    try:
        for chapter in CHAPTERS:
            nb = nbformat.read(str(SOLUTIONS / f"{chapter}.ipynb"), as_version=4)
            NotebookClient(nb, timeout=120, kernel_name="python3",
                           resources={"metadata": {"path": str(SOLUTIONS)}}).execute()
            printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
            assert "Public tests passed" in printed, (chapter, printed[-500:])
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_run_all_goes_on_past_an_unfinished_task(chapter):
    """From the first stub on, every code cell of the release carries `raises-exception`, so
    Run All (JupyterLab, nbclient) goes on to the check cell; the master carries no such tag."""
    from milktea.grade.release import GOES_ON
    for folder in (EXERCISES, EXERCISES / "zh"):
        cells = [c for c in read_notebook(str(folder / f"{chapter}.ipynb"))["cells"] if c["cell_type"] == "code"]
        first = next(i for i, c in enumerate(cells) if "raise NotImplementedError" in c["source"])
        tagged = [i for i, c in enumerate(cells) if GOES_ON in c.get("metadata", {}).get("tags", [])]
        assert tagged == list(range(first, len(cells))), (folder, chapter, first, tagged)
    assert not any(GOES_ON in c.get("metadata", {}).get("tags", []) for c in solution(chapter)["cells"])


@pytest.mark.notebooks
@pytest.mark.timeout(300)
def test_untouched_exercise_runs_all_down_to_its_check():
    """An untouched exercise, run top to bottom as Run All does: the cells that try the
    unfinished tasks fail, and the last cell still runs the public checks (0 points)."""
    import sys as _sys
    _sys.path.insert(0, str(ROOT / "tests"))
    from executed import run_notebook
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), old]))   # the checker finds milktea
    try:
        nb, _times = run_notebook(EXERCISES / "04_error_feedback.ipynb")
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
    code = [c for c in nb.cells if c.cell_type == "code"]
    failed = [o.get("ename") for c in code for o in c.outputs if o.get("output_type") == "error"]
    assert failed and set(failed) == {"NotImplementedError"}, failed
    last = "".join(o.get("text", "") for o in code[-1].outputs)
    assert "Score on the public tests: 0/" in last, last[-800:]
