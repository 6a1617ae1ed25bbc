"""Each course notebook is executed once per test run; every test that reads its outputs shares it.

    nb = executed(path).nb          # runs the notebook the first time it is asked for, in a
                                    # fresh kernel, top to bottom; later calls read the copy

The English chapters run at full size, the Chinese edition with ``MILKTEA_SIZE=small`` (the
same code on less work: `milktea.experiments.sized`); set ``MILKTEA_TEST_SIZE=full`` to run
both at full size. Copies live in ``results/executed/<run>/`` (one folder per test run, shared
by pytest-xdist's workers through the run id; a lock file makes the first asker execute and
the others wait), with the widget state saved so that JupyterLab can draw them. A notebook
that fails is executed once too: every test that asks for it fails with the same message.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "results" / "executed"
RUN_VAR = "MILKTEA_TEST_RUN"
CELL_TIMEOUT = 180  # seconds per cell; a chapter's whole run is bounded by its test's timeout


class NotebookFailed(Exception):
    """The notebook stopped at a cell; the message names it, with its first lines and error."""


@dataclass
class Executed:
    path: Path            # the notebook in the checkout
    copy: Path            # its executed copy (outputs and widget state stored)
    nb: object            # the executed notebook (nbformat.NotebookNode)
    times: dict           # {cell index: seconds}
    seconds: float        # the whole run, kernel start included
    size: str             # "full" or "small"


def run_id() -> str:
    """This test run's id, shared by the controller and its xdist workers (set once, inherited)."""
    if not os.environ.get(RUN_VAR):
        os.environ[RUN_VAR] = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    return os.environ[RUN_VAR]


def forget_old_runs(keep_hours: float = 6.0) -> None:
    """Remove executed copies of runs older than `keep_hours` (not this run's, nor a parallel one's)."""
    if not RUNS.is_dir():
        return
    cutoff = time.time() - keep_hours * 3600
    for d in RUNS.iterdir():
        if d.is_dir() and d.name != os.environ.get(RUN_VAR) and d.stat().st_mtime < cutoff:
            shutil.rmtree(d, ignore_errors=True)


def size_for(path: Path) -> str:
    """'full' for the English edition, 'small' for the Chinese one (MILKTEA_TEST_SIZE=full: both full)."""
    if os.environ.get("MILKTEA_TEST_SIZE", "").strip().lower() == "full":
        return "full"
    return "small" if "zh" in path.parts else "full"


def _rel(path: Path) -> Path:
    path = Path(path).resolve()
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path("outside") / path.name


def _kernel_manager(size: str, figure_texts: Path | None = None):
    """A kernel from the interpreter running the tests, whatever kernelspecs are installed;
    with `figure_texts`, every figure it draws appends its text there (tests/figure_texts.py)."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = str(max(1, cores // workers))  # the kernels of parallel workers share the cores
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    # the inline backend, as in JupyterLab: figures are really drawn, and one that fails to draw
    # fails its cell
    env.update(MPLBACKEND="module://matplotlib_inline.backend_inline", MILKTEA_SIZE=size,
               OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads,
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    startup = []
    if figure_texts is not None:
        env["MILKTEA_FIGURE_TEXTS"] = str(figure_texts)
        startup = [f"--IPKernelApp.exec_files={ROOT / 'tests' / 'figure_texts.py'}"]

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}", *startup],
                              display_name="milktea tests", language="python", env=env)

    return KernelManager(kernel_spec_manager=ThisPython(), kernel_name="python3")


def run_notebook(path: Path, size: str = "full"):
    """Execute every code cell of `path` in order in a fresh kernel; return the executed notebook
    and {cell index: seconds}. Raises NotebookFailed naming the cell, its first lines and the error.
    The text of every figure a cell draws is kept in its metadata, under "figure_texts" (one list
    of strings per figure: titles, labels, ticks, legends, annotations), for tests to read."""
    import tempfile

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "figure_texts.jsonl"
        record.touch()
        return _run(nb, path, size, record, NotebookClient, (CellExecutionError, CellTimeoutError, DeadKernelError))


def _run(nb, path, size, record: Path, NotebookClient, failures):
    client = NotebookClient(nb, km=_kernel_manager(size, record), timeout=CELL_TIMEOUT, allow_errors=False,
                            record_timing=False, store_widget_state=True,
                            resources={"metadata": {"path": str(Path(path).parent)}})
    times, seen = {}, 0
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            t0 = time.perf_counter()
            try:
                client.execute_cell(cell, index, execution_count=len(times) + 1)
            except failures as e:
                head = "\n".join("    " + line for line in cell.source.splitlines()[:8])
                raise NotebookFailed(f"{_rel(path)}: cell {index} failed ({type(e).__name__}) after "
                                     f"{time.perf_counter() - t0:.1f} s\n{head}\n\n{e}") from None
            times[index] = time.perf_counter() - t0
            lines = record.read_text(encoding="utf-8").splitlines()
            if len(lines) > seen:  # the figures this cell drew (the kernel wrote them before its reply)
                nb.cells[index].metadata["figure_texts"] = [json.loads(line) for line in lines[seen:]]
                seen = len(lines)
        client.set_widgets_metadata()  # the saved widget state, as JupyterLab's "save widget state"
    return nb, times


@contextlib.contextmanager
def _locked(lock: Path):
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)   # the first asker executes; the others wait here
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def executed(path: Path) -> Executed:
    """`path` executed once in this test run (see the module's docstring)."""
    import nbformat

    path = Path(path).resolve()
    size = size_for(path)
    base = RUNS / run_id() / size / _rel(path)
    copy, meta, failed = base, base.with_suffix(".json"), base.with_suffix(".failed")
    with _locked(base.with_suffix(".lock")):
        if failed.exists():
            raise NotebookFailed(failed.read_text(encoding="utf-8"))
        if not meta.exists():
            t0 = time.perf_counter()
            try:
                nb, times = run_notebook(path, size)
            except NotebookFailed as e:
                failed.write_text(str(e), encoding="utf-8")
                raise
            seconds = time.perf_counter() - t0
            nbformat.write(nb, str(copy))
            meta.write_text(json.dumps({"times": times, "seconds": seconds, "size": size}), encoding="utf-8")
    data = json.loads(meta.read_text(encoding="utf-8"))
    return Executed(path, copy, nbformat.read(str(copy), as_version=4),
                    {int(k): v for k, v in data["times"].items()}, data["seconds"], data["size"])
