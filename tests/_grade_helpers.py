"""Shared helpers of the grader tests: build submissions from the solution notebooks."""
import copy
import json
from pathlib import Path

from milktea.grade import assignment
from milktea.grade.notebook import atomic_write, cell_tasks, notebook_text, read_notebook
from milktea.grade.prepare import prepare

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
HIDDEN = ROOT / "tests" / "hidden_example"
CHAPTERS = ["01_bottleneck", "02_compression", "03_topk", "04_error_feedback", "05_quantization", "06_engineering",
            "08_local_steps", "09_sharding"]


def load(chapter: str) -> assignment.Assignment:
    """The course's assignment `chapter`: solutions/<chapter>.ipynb and its tests file."""
    return assignment.load(str(SOLUTIONS / f"{chapter}.ipynb"))


def tasks(chapter: str) -> list:
    return load(chapter).tasks


def reference(chapter: str) -> dict:
    return assignment.reference(load(chapter))


def prepared(chapter: str, seed: int = 0, hidden: bool = True):
    """Cases and expected outputs, with tests/hidden_example's extra hidden cases if `hidden`."""
    extra = HIDDEN / f"{chapter}.py"
    return prepare(load(chapter), seed, str(extra) if hidden and extra.exists() else None)


def solution(chapter: str) -> dict:
    return read_notebook(str(SOLUTIONS / f"{chapter}.ipynb"))


def graded_cell(nb: dict, task_id: str) -> dict:
    (cell,) = [c for c in nb["cells"] if task_id in cell_tasks(c)]
    return cell


def with_cell(nb: dict, task_id: str, source: str) -> dict:
    """A copy of `nb` where the graded cell of `task_id` holds `source` instead."""
    nb = copy.deepcopy(nb)
    graded_cell(nb, task_id)["source"] = source
    return nb


def save(nb, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb, (bytes, str)):
        path.write_bytes(nb if isinstance(nb, bytes) else nb.encode())
    else:
        atomic_write(str(path), notebook_text(nb))
    return path


def code_cell(source: str, tags=None) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {"tags": tags} if tags else {},
            "outputs": [], "source": source}


TORCH_TOPK = {
    "03.1": '''import torch

def topk_threshold(x, k):
    t = torch.as_tensor(x).float().abs().flatten()
    return float(torch.kthvalue(t, t.numel() - k + 1).values)
''',
    "03.2": '''import torch

def topk_sparsify(x, k):
    t = torch.as_tensor(x)
    thr = torch.kthvalue(t.abs().flatten(), t.numel() - k + 1).values
    return torch.where(t.abs() >= thr, t, torch.zeros_like(t))
''',
    "03.3": '''import torch

def topk_pack(x, k):
    t = torch.as_tensor(x).flatten()
    thr = torch.kthvalue(t.abs(), t.numel() - k + 1).values
    idx = torch.nonzero(t.abs() >= thr).flatten()
    return idx.to(torch.int32), t[idx]
''',
    "03.4": '''import torch

def topk_unpack(indices, values, shape):
    values = torch.as_tensor(values)
    out = torch.zeros(int(torch.tensor(list(shape)).prod()), dtype=values.dtype)
    out[torch.as_tensor(indices).long()] = values
    return out.reshape(tuple(shape))
''',
}


def dumps(obj) -> str:
    return json.dumps(obj, indent=1)


# the C module behind subprocess, loaded as "tea._posixsubprocess" so that a hook checking the
# name "_posixsubprocess" misses it, then `cat` of a file: in a sandbox, there is no file
ALIAS_C_MODULE = """
import importlib.util
lib = os.path.join(os.path.dirname(os.__file__), 'lib-dynload')
found = [n for n in os.listdir(lib) if n.startswith('_posixsubprocess.')] if os.path.isdir(lib) else []
if found:
    spec = importlib.util.spec_from_file_location('tea._posixsubprocess', os.path.join(lib, found[0]))
    mod = importlib.util.module_from_spec(spec)
    r, w = os.pipe()
    er, ew = os.pipe()
    pid = mod.fork_exec([b'/bin/cat', PATH.encode()], [b'/bin/cat'], True, (w,), None, None,
                        -1, -1, -1, w, -1, -1, er, ew, True, False, -1, None, None, None, -1, None, False)
    os.close(w)
    os.close(ew)
    data = os.read(r, 1 << 20)
    os.waitpid(pid, 0)
    if data:
        raise ValueError('read ' + PATH)"""
