"""Exercise 06.7 is passed only by a real fp16 hook: the grader runs the learner's fp16_hook on its
own fake bucket and all-reduce (a harness from the tests file) and in one real DDP step on two gloo
ranks, so a run_hook rewritten to return the mean, a hook that sends float32, one that divides after
the sum, one that never calls the all-reduce, one that hands back float16, and one that works on the
fake bucket but not on DDP's real ones all lose the task."""

import pytest

from _grade_helpers import prepared, save, solution, with_cell
from milktea.grade import isolation
from milktea.grade.evaluate import grade_notebook

HOOK = "import numpy as np\nimport torch\n\ndef fp16_hook(state, bucket):\n{body}\n"
WRONG = {
    # the old bypass: no hook at all, run_hook (graded before) returns the mean and the right byte count
    "no hook, a plain mean": ("import numpy as np\n\ndef fp16_hook(state, bucket):\n    raise NotImplementedError\n\n"
                              "def run_hook(grads):\n    g = np.asarray(grads, np.float32)\n"
                              "    return g.mean(axis=0), 2 * g.shape[1]\n", "not_implemented"),
    "sends float32": (HOOK.format(body="    fut = state.allreduce(bucket.buffer() / state.world_size)\n"
                                       "    return fut.then(lambda f: f.value()[0])"), "wrong"),
    "divides after the sum": (HOOK.format(body="    fut = state.allreduce(bucket.buffer().to(torch.float16))\n"
                                               "    return fut.then(lambda f: f.value()[0].float() / state.world_size)"),
                              "wrong"),
    "never calls the all-reduce": (HOOK.format(body="    fut = torch.futures.Future()\n"
                                                    "    fut.set_result(bucket.buffer().half().float())\n    return fut"),
                                   "wrong"),
    "hands back float16": (HOOK.format(body="    half = bucket.buffer().to(torch.float16) / state.world_size\n"
                                            "    return state.allreduce(half).then(lambda f: f.value()[0])"), "wrong"),
    # the fake bucket is always the last one; DDP's real buckets are not: only the last gets averaged
    "sends the last bucket only": (HOOK.format(body="    if not bucket.is_last():\n        fut = torch.futures.Future()\n"
                                                    "        fut.set_result(bucket.buffer())\n        return fut\n"
                                                    "    half = bucket.buffer().to(torch.float16) / state.world_size\n"
                                                    "    return state.allreduce(half).then(lambda f: f.value()[0].float())"),
                                   "wrong"),
}


@pytest.fixture(scope="module")
def chapter():
    return prepared("06_engineering", seed=3)


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_hook_loses_the_task(chapter, tmp_path, name):
    source, kind = WRONG[name]
    nb = with_cell(solution("06_engineering"), "06.7", source)
    box = isolation.probe()
    res = grade_notebook(str(save(nb, tmp_path / "06_engineering.ipynb")), chapter, box=box if box.isolated else None)
    hook = next(t for t in res.tasks if t.id == "06.7")
    assert hook.kind == kind and hook.score < hook.points * 0.5, (name, hook.score, hook.lines)
    assert all(t.score == t.points for t in res.tasks if t.id != "06.7"), [(t.id, t.lines) for t in res.tasks]


def test_the_reference_hook_passes_and_says_why_others_fail(chapter, tmp_path):
    box = isolation.probe()
    res = grade_notebook(str(save(solution("06_engineering"), tmp_path / "06_engineering.ipynb")), chapter,
                         box=box if box.isolated else None)
    assert all(t.score == t.points for t in res.tasks), [(t.id, t.lines) for t in res.tasks]
    nb = with_cell(solution("06_engineering"), "06.7", WRONG["sends float32"][0])
    res = grade_notebook(str(save(nb, tmp_path / "06_engineering.ipynb")), chapter, box=box if box.isolated else None)
    hook = next(t for t in res.tasks if t.id == "06.7")
    assert "sent float32 through state.allreduce: send float16" in "\n".join(hook.lines)
    nb = with_cell(solution("06_engineering"), "06.7", WRONG["sends the last bucket only"][0])
    res = grade_notebook(str(save(nb, tmp_path / "06_engineering.ipynb")), chapter, box=box if box.isolated else None)
    hook = next(t for t in res.tasks if t.id == "06.7")
    assert hook.score == 0 and "in a real DDP step on two gloo ranks the hook failed" in "\n".join(hook.lines)
