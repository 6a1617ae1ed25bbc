"""`make lab` and `make lab-zh` serve the course folder and open the first chapter: a new learner's
file browser reaches notebooks/ and exercises/ alike (an exercise's check cell runs in its folder).

Each command is started as a learner types it (with LAB_ARGS for a port, a token and a stand-in
browser that records what it was asked to open), in throw-away Jupyter folders; the server's
contents API must list exercises/ and the chapter it opened must be the edition's 00_welcome.
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST = {"lab": "notebooks/00_welcome.ipynb", "lab-zh": "notebooks/zh/00_welcome.ipynb"}


def _get(url: str, token: str):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # loopback, no proxy
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with opener.open(req, timeout=5) as r:
        return json.loads(r.read())


@pytest.mark.timeout(240)
@pytest.mark.parametrize("target", sorted(FIRST))
def test_make_lab_serves_chapters_and_exercises(target, tmp_path):
    from milktea.distributed.ports import free_port
    venv = Path(sys.prefix)
    if not (venv / "bin" / "python").exists():
        pytest.skip("the tests do not run from a virtual environment that `make` could use")
    port, token = free_port(), "t" + os.urandom(8).hex()
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"        # JupyterLab "opens" a local HTML page that redirects
    browser.write_text(f'#!/bin/sh\ncat "${{1#file://}}" > {opened}\n')
    browser.chmod(0o755)
    env = dict(os.environ, **{k: str(tmp_path / k.lower()) for k in (
        "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "JUPYTERLAB_SETTINGS_DIR",
        "JUPYTERLAB_WORKSPACES_DIR", "IPYTHONDIR")})
    if target == "lab-zh":       # lab-zh keeps its own config folder under the venv: the learner's stays
        env.pop("JUPYTER_CONFIG_DIR")
    args = (f"--ServerApp.ip=127.0.0.1 --ServerApp.port={port} --ServerApp.port_retries=0 "
            f"--IdentityProvider.token={token} --ServerApp.browser='{browser} %s'")
    log = open(tmp_path / "lab.log", "wb")
    # -o: the venv counts as installed (the tests run from it); nothing is reinstalled
    proc = subprocess.Popen(["make", "-s", "-o", f"{venv}/.installed", target, f"VENV={venv}", f"LAB_ARGS={args}"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline, listing = time.monotonic() + 150, None
        while listing is None:
            assert proc.poll() is None, f"make {target} exited:\n" + (tmp_path / "lab.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"make {target}: no server after 150 s"
            try:
                listing = _get(f"{url}/api/contents/exercises?content=1", token)
            except urllib.error.HTTPError as e:     # the server answers: exercises/ is not in its root
                pytest.fail(f"make {target}: /api/contents/exercises answers {e.code}: the server's root "
                            f"is not the course folder")
            except OSError:                         # not listening yet
                time.sleep(0.5)
        names = {item["name"] for item in listing["content"]}
        assert "04_error_feedback.ipynb" in names and "04_error_feedback.checks.json" in names, names
        assert _get(f"{url}/api/contents/{FIRST[target]}?content=0", token)["type"] == "notebook"
        while not opened.exists() or not opened.read_text():
            assert time.monotonic() < deadline, f"make {target} opened nothing"
            time.sleep(0.5)
        assert f"/lab/tree/{FIRST[target]}" in opened.read_text(), opened.read_text()[:2000]
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)     # make and the server it started, no one else
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
