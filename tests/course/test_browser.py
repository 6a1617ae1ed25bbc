"""The course in a real browser: every chapter renders in JupyterLab, and every view responds.

Starts JupyterLab from this environment (as `make lab` does) on 127.0.0.1 with a fresh token
and throw-away config, and drives Debian's headless Chromium with Playwright:

- each chapter, in both editions, is opened as executed by tests/course/test_notebooks.py (the
  shared copy, tests/executed.py: this test does not run the chapters again): no cell shows an
  error, every widget output draws its controls from the saved widget state, and on a Chinese
  page no character lacks a glyph (in the page, and no missing-glyph warning from matplotlib);
- the widget tour (tests/fixtures/widget_tour.ipynb and zh/, every view the chapters use, on
  small inputs) runs live: Run All, then one slider of each view is moved and what it drives
  must change.

The browser sees no system CJK font (its fontconfig lists only matplotlib's DejaVu): the page's
Chinese comes from the font milktea ships, served by custom.css as `make lab-zh` does. One
screenshot per notebook goes to results/screenshots/ (zh/ for the Chinese edition). Nothing is
written to the notebooks (autosave is off; the files are compared before and after) and no
process is left behind.
"""
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from executed import ROOT, NotebookFailed, executed

CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "notebooks" / "zh").glob("*.ipynb"))
FIXTURE = ROOT / "tests" / "fixtures" / "widgets_demo.ipynb"
TOURS = [ROOT / "tests" / "fixtures" / "widget_tour.ipynb", ROOT / "tests" / "fixtures" / "zh" / "widget_tour.ipynb"]
SHOTS = ROOT / "results" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
# Generous but bounded: a chapter may take ~2 minutes of compute on 2 busy cores.
RUN_TIMEOUT = float(os.environ.get("MILKTEA_BROWSER_RUN_TIMEOUT", 600))
SLIDER_TIMEOUT = 90.0
MARKER = "MILKTEA_BROWSER_TEST"  # env var that tags every process this test starts

# one JupyterLab and one browser for the whole file: its tests share an xdist worker
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]


def _id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _cannot_run(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser test cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


# ---------------------------------------------------------------- JupyterLab

def _free_port() -> int:
    from milktea.distributed.ports import free_port   # below the ephemeral range: see there
    return free_port()


def _http(url: str, token: str, method: str = "GET", timeout: float = 5.0):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, no proxy
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"token {token}"},
                                 data=b"" if method == "POST" else None)
    with opener.open(req, timeout=timeout) as r:
        body = r.read()
    return json.loads(body) if body.strip() else None


def _write_json(path: Path, data: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def _lab_dirs(tmp: Path) -> dict:
    """Throw-away Jupyter dirs: our kernel, no network plugins, no autosave, all cells in DOM."""
    env = {"JUPYTER_CONFIG_DIR": tmp / "config", "JUPYTER_RUNTIME_DIR": tmp / "runtime",
           "JUPYTER_DATA_DIR": tmp / "data", "IPYTHONDIR": tmp / "ipython",
           "JUPYTERLAB_SETTINGS_DIR": tmp / "settings",
           "JUPYTERLAB_WORKSPACES_DIR": tmp / "workspaces"}
    for d in env.values():
        d.mkdir(parents=True, exist_ok=True)
    # "python3" is this interpreter, whatever kernels the machine has installed elsewhere.
    _write_json(env["JUPYTER_DATA_DIR"] / "kernels" / "python3" / "kernel.json",
                {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                 "display_name": "Python 3 (ipykernel)", "language": "python"})
    # what `make lab-zh` serves: custom.css with the Chinese font milktea ships (no system font needed)
    from milktea.fonts import write_lab_custom
    write_lab_custom(env["JUPYTER_CONFIG_DIR"] / "custom")
    _write_json(env["JUPYTER_CONFIG_DIR"] / "labconfig" / "page_config.json",
                {"disabledExtensions": {"@jupyterlab/extensionmanager-extension": True,
                                        "@jupyterlab/apputils-extension:announcements": True}})
    settings = env["JUPYTERLAB_SETTINGS_DIR"] / "@jupyterlab"
    _write_json(settings / "docmanager-extension" / "plugin.jupyterlab-settings",
                {"autosave": False})
    _write_json(settings / "notebook-extension" / "tracker.jupyterlab-settings",
                {"windowingMode": "none"})
    _write_json(settings / "apputils-extension" / "notification.jupyterlab-settings",
                {"fetchNews": "false", "checkForUpdates": False})
    return {k: str(v) for k, v in env.items()}


def _marked_processes(tag: str) -> list[str]:
    """Live processes whose environment carries MARKER=tag, as 'pid cmdline'."""
    found, needle = [], f"{MARKER}={tag}".encode()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if needle not in (p / "environ").read_bytes().split(b"\0"):
                continue
            if (p / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # a zombie holds no resources; its parent reaps it
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{p.name} {cmd[:120]}")
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


class Lab:
    def __init__(self, tmp: Path):
        self.tag, self.token, self.port = uuid.uuid4().hex, uuid.uuid4().hex, _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "jupyterlab.log"
        env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # inline figures
        env.update(_lab_dirs(tmp))
        env[MARKER] = self.tag
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        self.env = env
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={ROOT}", "--LabApp.news_url=None",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.extension_manager=readonly", "--LabApp.custom_css=True"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    def log_tail(self, n: int = 40) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def wait_ready(self, timeout: float = 180.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}:\n"
                                   + self.log_tail())
            try:
                _http(f"{self.url}/api/status", self.token)
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"JupyterLab not answering after {timeout:.0f} s:\n" + self.log_tail())

    def trust(self, path: Path) -> None:
        """Sign `path` with this server's key, as JupyterLab signs a notebook its user ran and
        saved: a trusted notebook shows its widget views and HTML outputs."""
        import nbformat
        from nbformat.sign import NotebookNotary
        nb = nbformat.read(str(path), as_version=4)
        NotebookNotary(data_dir=self.env["JUPYTER_DATA_DIR"]).sign(nb)

    def shutdown_kernels(self):
        for k in _http(f"{self.url}/api/kernels", self.token) or []:
            try:
                _http(f"{self.url}/api/kernels/{k['id']}", self.token, method="DELETE", timeout=30)
            except urllib.error.HTTPError as e:
                if e.code != 404:     # 404: it ended between the listing and the request
                    raise

    def stop(self) -> list[str]:
        """Shut down politely, then by signal; return what outlived the polite way, besides
        the server process itself.

        The server's own exit is JupyterLab's business, and it can stall in its extensions'
        shutdown (once, after a test removed a notebook that the page still had open: 80 s
        at "Shutting down 4 extensions", until SIGTERM). What this checks is ours: no kernel,
        and nothing a kernel started, outlives the kernels' shutdown."""
        with contextlib.suppress(OSError):
            self.shutdown_kernels()
        try:
            _http(f"{self.url}/api/shutdown", self.token, method="POST", timeout=10)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=60)   # a loaded machine can take a while to stop its kernels
        except subprocess.TimeoutExpired:
            pass
        server = str(self.proc.pid)

        def others():
            return [line for line in _marked_processes(self.tag) if line.split()[0] != server]

        deadline = time.monotonic() + 20
        while others() and time.monotonic() < deadline:
            time.sleep(0.5)
        leftover = others()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            for line in _marked_processes(self.tag):
                try:
                    os.kill(int(line.split()[0]), sig)
                except ProcessLookupError:
                    pass
            time.sleep(1)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.log.close()
        return leftover


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        _cannot_run(f"{CHROMIUM} is missing (Debian: apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _cannot_run("Playwright for Python is not installed (pip install playwright)")
    before = {p: p.read_bytes() for p in CHAPTERS + [FIXTURE] + TOURS}
    server = Lab(tmp_path_factory.mktemp("jupyter"))
    try:
        server.wait_ready()
        yield server
    finally:
        leftover = server.stop()
        remaining = _marked_processes(server.tag)
    assert not remaining, f"processes still alive after kill: {remaining}"
    assert not leftover, f"processes outlived JupyterLab's shutdown: {leftover}"
    changed = [_id(p) for p, data in before.items() if p.read_bytes() != data]
    assert not changed, f"the browser session wrote to notebooks: {changed}"


def _bare_fontconfig(tmp: Path) -> Path:
    """A fontconfig file that shows the browser only the fonts matplotlib ships (DejaVu): a
    machine with no CJK font, whatever this one has installed. Chinese glyphs on the page
    then come from the font milktea serves (custom.css), or not at all."""
    import matplotlib
    conf = tmp / "fonts.conf"
    conf.write_text('<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>'
                    f'<dir>{Path(matplotlib.get_data_path()) / "fonts" / "ttf"}</dir>'
                    f'<cachedir>{tmp / "fontconfig-cache"}</cachedir></fontconfig>\n')
    return conf


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
                               env={**lab.env, "FONTCONFIG_FILE": str(_bare_fontconfig(lab.log_path.parent))})
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser, lab):
    context = browser.new_context(viewport={"width": 1280, "height": 960})
    pg = context.new_page()
    try:
        yield pg
    finally:
        context.close()
        lab.shutdown_kernels()  # each chapter starts from a fresh kernel


# ---------------------------------------------------------------- the page

# State of the open notebook, read from the DOM as a user would see it.
STATE_JS = r"""() => {
  const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
      .find(p => !p.classList.contains('lm-mod-hidden'));
  if (!panel) return null;
  const text = el => (el ? el.textContent : '');
  const prompts = [...panel.querySelectorAll('.jp-CodeCell')]
      .map(c => text(c.querySelector('.jp-InputArea-prompt')).trim());
  const errors = [...panel.querySelectorAll(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
      .map(o => o.textContent)
      .filter(t => /Traceback|^\s*\w*(Error|Exception)\b|Cell In\[\d+\]/m.test(t));
  // ipywidgets' renderer is a Lumino Panel; on failure it shows text in place of controls.
  const views = [...panel.querySelectorAll('.jp-OutputArea-output.lm-Panel')];
  const body = text(panel.querySelector('.jp-Notebook'));
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const kernelName = text(panel.querySelector('.jp-Toolbar-kernelName')).trim();
  // The indicator reads "idle" before any kernel is attached; require a kernel's name too.
  const hasKernel = kernelName !== '' && kernelName !== 'No Kernel';
  return {
    prompts, errors, kernelName,
    kernel: hasKernel && indicator ? indicator.getAttribute('data-status') : 'no kernel',
    widgetViews: views.length,
    emptyWidgetViews: views.filter(v => !v.querySelector('.jupyter-widgets')).length,
    controls: panel.querySelectorAll('.jp-OutputArea-output .jupyter-widgets').length,
    sliders: panel.querySelectorAll('.jp-OutputArea-output .widget-slider').length,
    widgetErrors: [...panel.querySelectorAll('.jp-OutputArea-output')]
        .map(o => o.textContent).filter(t => t.includes('Error displaying widget'))
        .map(t => t.slice(0, 200)),
    loading: body.includes('Loading widget...'),
    dialog: text(document.querySelector('.jp-Dialog')).trim().slice(0, 300),
  };
}"""

# What the i-th slider drives: its own cell's output, and the whole notebook's, both
# without the sliders themselves (their readouts change whatever they drive).
DRIVEN_JS = r"""(i) => {
  const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
      .find(p => !p.classList.contains('lm-mod-hidden'));
  const slider = panel.querySelectorAll('.jp-OutputArea-output .widget-slider')[i];
  const shown = el => {
    const copy = el.cloneNode(true);
    copy.querySelectorAll('.widget-slider').forEach(s => s.remove());
    return copy.innerHTML;
  };
  return [shown(slider.closest('.jp-Cell').querySelector('.jp-Cell-outputArea')),
          [...panel.querySelectorAll('.jp-Cell-outputArea')].map(shown).join('')];
}"""

# For each slider, the index of the cell that holds it (a view is one cell's output).
SLIDER_CELLS_JS = r"""() => {
  const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
      .find(p => !p.classList.contains('lm-mod-hidden'));
  const cells = [...panel.querySelectorAll('.jp-Cell')];
  return [...panel.querySelectorAll('.jp-OutputArea-output .widget-slider')]
      .map(s => cells.indexOf(s.closest('.jp-Cell')));
}"""

# Bring the i-th slider's view to the top of the notebook for the screenshot.
SCROLL_JS = r"""(i) => {
  const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
      .find(p => !p.classList.contains('lm-mod-hidden'));
  const slider = panel.querySelectorAll('.jp-OutputArea-output .widget-slider')[i];
  slider.closest('.jp-Cell').querySelector('.jp-Cell-outputArea').scrollIntoView({block: 'start'});
}"""

# The i-th slider's value as the page holds it (noUiSlider's handle, or a range input).
VALUE_JS = r"""(i) => {
  const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
      .find(p => !p.classList.contains('lm-mod-hidden'));
  const s = panel.querySelectorAll('.jp-OutputArea-output .widget-slider')[i];
  const h = s.querySelector('.noUi-handle');
  const r = s.querySelector('input[type=range]');
  return h ? h.getAttribute('aria-valuenow') : (r ? r.value : null);
}"""


# Characters of the open notebook that the page cannot draw. Each distinct CJK character
# (and the probe, a private-use character no font has) is drawn on a canvas in the font the
# markdown uses; one whose pixels equal the probe's is drawn as the same "missing" box.
# Returns [the probe's own verdict, the missing characters].
GLYPHS_JS = r"""([probe, family]) => {
  const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
      .find(p => !p.classList.contains('lm-mod-hidden'));
  const md = panel.querySelector('.jp-RenderedMarkdown') || panel;
  const font = '20px ' + getComputedStyle(md).fontFamily;
  const chars = [...new Set(panel.textContent.match(/[\u3400-\u9fff\uff01-\uff5e\u3000-\u303f]/g) || [])];
  const canvas = document.createElement('canvas');
  canvas.width = 28; canvas.height = 28;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const draw = ch => {
    ctx.clearRect(0, 0, 28, 28); ctx.font = font; ctx.fillStyle = '#000'; ctx.textBaseline = 'top';
    ctx.fillText(ch, 2, 2);
    return ctx.getImageData(0, 0, 28, 28).data.join(',');
  };
  const box = draw(probe), blank = draw(' ');
  const missing = chars.filter(ch => draw(ch) === box || draw(ch) === blank);
  const shipped = [...document.fonts].some(f => f.family.replace(/"/g, '') === family && f.status === 'loaded');
  return [box !== blank, missing, chars.length, shipped];
}"""

# matplotlib's complaint when a figure's text has no glyph (printed to the cell's stderr)
GLYPH_WARNINGS_JS = r"""() => {
  const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
      .find(p => !p.classList.contains('lm-mod-hidden'));
  return [...panel.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
      .map(o => o.textContent).filter(t => /missing from font|does not have a glyph/i.test(t))
      .map(t => t.slice(0, 300));
}"""


def _state(page):
    return page.evaluate(STATE_JS)


def check_glyphs(page, name: str) -> int:
    """Fail if the open notebook shows a character without a glyph; return how many distinct
    Chinese characters were checked."""
    warned = page.evaluate(GLYPH_WARNINGS_JS)
    assert not warned, f"{name}: matplotlib drew text without glyphs:\n" + "\n".join(warned)
    from milktea.fonts import FAMILY
    page.evaluate("document.fonts.ready.then(() => true)")
    probe_works, missing, checked, shipped = page.evaluate(GLYPHS_JS, ["\ue000", FAMILY])
    assert probe_works, "the glyph check cannot tell a missing glyph from a drawn one"
    assert not missing, (f"{name}: {len(missing)} of {checked} Chinese characters have no glyph in the browser "
                         f"(e.g. {''.join(missing[:20])}); is custom.css with milktea's font served "
                         "(--LabApp.custom_css=True, milktea.fonts.write_lab_custom)?")
    assert not checked or shipped, f"{name}: the page shows Chinese but never loaded {FAMILY} (custom.css)"
    return checked


def _wait(page, what: str, done, timeout: float, interval: float = 1.0):
    """Poll the page state until done(state) is true; fail on a cell error meanwhile."""
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = _state(page)
        if state and state["errors"]:
            return state
        if state and state["dialog"]:  # e.g. "Kernel Restarting": the kernel died
            pytest.fail(f"while waiting for {what}, JupyterLab shows a dialog: "
                        f"{state['dialog']!r}", pytrace=False)
        if state and done(state):
            return state
        page.wait_for_timeout(interval * 1000)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; last state: "
                f"{json.dumps(state)[:1500]}", pytrace=False)


def _code_cells(path: Path) -> list[bool]:
    """For each code cell in file order: does it have code to run?"""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]).strip() != "" for c in nb["cells"] if c["cell_type"] == "code"]


def _all_ran(expected: list[bool]):
    def done(s):
        if len(s["prompts"]) != len(expected) or s["kernel"] != "idle":
            return False
        return all(re.fullmatch(r"\[\d+\]:?", p) for p, has in zip(s["prompts"], expected) if has)
    return done


def _open(page, lab: Lab, path: Path, expected: list[bool]):
    page.goto(f"{lab.url}/lab/tree/{_id(path)}?reset&token={lab.token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook", timeout=120_000)
    deadline, dialogs = time.monotonic() + 120, []
    while time.monotonic() < deadline:
        dialog = page.locator(".jp-Dialog")
        if dialog.count():  # "Select Kernel" when the notebook names none: take the default
            dialogs.append(dialog.first.inner_text()[:200])
            dialog.locator(".jp-mod-accept").first.click()
        s = _state(page)
        if s and len(s["prompts"]) == len(expected) and s["kernel"] == "idle":
            return
        page.wait_for_timeout(500)
    pytest.fail(f"{_id(path)}: notebook or kernel not ready after 120 s; dialogs seen: "
                f"{dialogs}; last state: {json.dumps(_state(page))[:1000]}", pytrace=False)


def _run_all(page):
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").first.click()
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()


def _move_slider(page, i: int) -> bool:
    """Move slider i by keyboard, as a user would; True if its value changed."""
    slider = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) "
                          ".jp-OutputArea-output .widget-slider").nth(i)
    slider.scroll_into_view_if_needed()
    target = slider.locator(".noUi-handle, input[type=range]")
    if not target.count():
        return False
    before = page.evaluate(VALUE_JS, i)
    # A step or two first; PageUp/Down (several steps) for fine sliders; back if at the end.
    for key, times in (("ArrowRight", 2), ("PageUp", 1), ("ArrowLeft", 2), ("PageDown", 1)):
        target.first.focus()
        for _ in range(times):
            page.keyboard.press(key)
        page.wait_for_timeout(300)
        if page.evaluate(VALUE_JS, i) != before:
            return True
    return False


# ---------------------------------------------------------------- the checks

def _widget_outputs(nb) -> int:
    """How many widget views the executed notebook's outputs show."""
    return sum("application/vnd.jupyter.widget-view+json" in o.get("data", {})
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def check_rendered(page, lab: Lab, run, shot: Path | None = None):
    """Open an executed notebook as its reader would find it after Run All: no error shown,
    every widget view drawn from the saved state, every Chinese character with a glyph."""
    import nbformat
    name = _id(run.path)
    # Opened with its Python kernel, as a reader who reopens a saved notebook finds it (a notebook
    # naming an installed kernel starts it without asking), and run no further: the widget
    # manager draws every view from the state saved in the notebook. (With "No Kernel" chosen,
    # jupyterlab_widgets 3.0.17 loads no saved state at all: its restore starts from the kernel.)
    shown = Path(run.copy).with_name(Path(run.copy).stem + ".shown.ipynb")
    nb = nbformat.read(str(run.copy), as_version=4)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, str(shown))
    lab.trust(shown)
    page.goto(f"{lab.url}/lab/tree/{_id(shown)}?reset&token={lab.token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook", timeout=120_000)
    views = _widget_outputs(run.nb)
    s = _wait(page, "the saved outputs and widget views to render",
              lambda s: len(s["prompts"]) > 0 and not s["loading"] and s["widgetViews"] >= views, 120)
    assert not s["errors"], f"{name}: a cell shows an error:\n" + "\n\n".join(s["errors"])[:4000]
    assert not s["widgetErrors"], f"{name}: {s['widgetErrors']}"
    assert s["emptyWidgetViews"] == 0, f"{name}: {s['emptyWidgetViews']} widget output(s) drew no control"
    assert views >= 1 and s["widgetViews"] == views, \
        f"{name}: {s['widgetViews']} widget views drawn of the {views} its outputs hold (every chapter has one)"
    if "zh" in run.path.parts:
        assert check_glyphs(page, name) > 0, f"{name}: a Chinese notebook with no Chinese on the page"
    if shot:
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot))


def check_views_respond(page, lab: Lab, path: Path, shot: Path | None = None):
    """Open, Run All, then move one slider of every view: each view's own output must change."""
    name = _id(path)
    expected = _code_cells(path)
    _open(page, lab, path, expected)
    _run_all(page)
    s = _wait(page, "Run All to finish", _all_ran(expected), RUN_TIMEOUT)
    assert not s["errors"], f"{name}: a cell shows an error:\n" + "\n\n".join(s["errors"])[:4000]
    s = _wait(page, "widgets to render", lambda s: not s["loading"], 60)
    assert not s["widgetErrors"], f"{name}: {s['widgetErrors']}"
    assert s["emptyWidgetViews"] == 0, f"{name}: {s['emptyWidgetViews']} widget output(s) rendered no control"
    cells = page.evaluate(SLIDER_CELLS_JS)
    first = {}
    for i, cell in enumerate(cells):
        first.setdefault(cell, []).append(i)
    assert first, f"{name}: no slider to move"
    dead = []
    for cell, sliders in first.items():
        for i in sliders:   # the first slider of the view that moves and redraws
            before = page.evaluate(DRIVEN_JS, i)[0]
            if not _move_slider(page, i):
                continue
            deadline = time.monotonic() + SLIDER_TIMEOUT
            while time.monotonic() < deadline:
                page.wait_for_timeout(300)
                if page.evaluate(DRIVEN_JS, i)[0] != before and _state(page)["kernel"] == "idle":
                    break
            else:
                continue
            break
        else:
            dead.append(cell)
    assert not dead, f"{name}: moving a slider changed nothing in the view of cell(s) {dead}"
    s = _state(page)
    assert not s["errors"], f"{name}: error after moving the sliders:\n" + "\n\n".join(s["errors"])[:4000]
    assert not s["widgetErrors"], f"{name}: {s['widgetErrors']}"
    if "zh" in path.parts:
        assert check_glyphs(page, name) > 0, f"{name}: a Chinese notebook with no Chinese on the page"
    if shot:
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot))


# ---------------------------------------------------------------- the tests

@pytest.mark.timeout(2400)   # it may wait for the chapter's run (tests/course/test_notebooks.py)
@pytest.mark.parametrize("path", CHAPTERS, ids=_id)
def test_chapter_renders_in_jupyterlab(path, lab, page, wall_times):
    try:
        run = executed(path)
    except NotebookFailed as e:
        pytest.skip(f"the chapter did not run (its failure is test_notebook_runs_top_to_bottom's): {str(e)[:200]}")
    t0 = time.monotonic()
    check_rendered(page, lab, run, shot=SHOTS / path.relative_to(ROOT / "notebooks").with_suffix(".png"))
    wall_times.setdefault("browser (JupyterLab, executed chapter opened)", {})[_id(path)] = time.monotonic() - t0


@pytest.mark.timeout(int(RUN_TIMEOUT) + 600)
@pytest.mark.parametrize("path", TOURS + [FIXTURE], ids=_id)
def test_views_respond_in_jupyterlab(path, lab, page, wall_times):
    t0 = time.monotonic()
    shot = SHOTS / ("zh" if "zh" in path.parts else "") / f"{path.stem}.png"
    check_views_respond(page, lab, path, shot=shot)
    if "zh" in path.parts:   # the library speaks Chinese in the page
        text = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").first.inner_text()
        assert "分店数" in text, text[:500]
    wall_times.setdefault("browser (JupyterLab, Run All + sliders)", {})[_id(path)] = time.monotonic() - t0


EXERCISE = ROOT / "exercises" / "04_error_feedback.ipynb"


@pytest.mark.timeout(900)
def test_exercise_opens_from_the_file_browser_and_checks_itself(lab, page, wall_times):
    """A new learner's path, on the server `make lab` starts (its root is the course folder): the
    file browser shows exercises/, the exercise opens from there, and Run All on the untouched
    notebook goes past the tasks not done yet (their errors shown) down to the check cell, which
    prints the public tests' report."""
    t0 = time.monotonic()
    before = EXERCISE.read_bytes()
    checkpoints = EXERCISE.parent / ".ipynb_checkpoints"     # JupyterLab keeps one for an opened notebook
    had_checkpoints = checkpoints.exists()
    request_cleanup = lambda: had_checkpoints or shutil.rmtree(checkpoints, ignore_errors=True)  # noqa: E731
    page.goto(f"{lab.url}/lab?reset&token={lab.token}")
    item = lambda name: page.locator(".jp-DirListing-item").filter(
        has=page.locator(".jp-DirListing-itemText", has_text=re.compile(rf"^{re.escape(name)}$")))
    item("exercises").first.wait_for(timeout=120_000)
    item("exercises").first.dblclick()
    item(EXERCISE.name).first.wait_for(timeout=60_000)
    item(EXERCISE.name).first.dblclick()
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook", timeout=120_000)
    expected = _code_cells(EXERCISE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if page.locator(".jp-Dialog").count():     # "Select Kernel": take the default
            page.locator(".jp-Dialog .jp-mod-accept").first.click()
        s = _state(page)
        if s and len(s["prompts"]) == len(expected) and s["kernel"] == "idle":
            break
        page.wait_for_timeout(500)
    else:
        pytest.fail(f"{_id(EXERCISE)}: not ready after 120 s: {json.dumps(_state(page))[:1000]}", pytrace=False)
    _run_all(page)
    deadline, s, idle = time.monotonic() + RUN_TIMEOUT, None, 0
    while time.monotonic() < deadline:       # errors are expected here: every task is still a stub
        s = _state(page)
        if s and _all_ran(expected)(s):
            break
        idle = idle + 1 if s and s["kernel"] == "idle" and s["errors"] else 0
        if idle >= 15:                       # the kernel rests after an error: Run All gave up there
            break
        page.wait_for_timeout(1000)
    if not (s and _all_ran(expected)(s)):
        pytest.fail(f"Run All stopped before the check cell: {json.dumps(s)[:1500]}", pytrace=False)
    assert s["errors"] and all("NotImplementedError" in e for e in s["errors"]), s["errors"][:3]
    report = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell").last.inner_text()
    assert "Score on the public tests: 0/" in report, report[-1500:]
    assert EXERCISE.read_bytes() == before, "the browser session wrote to the exercise"
    lab.shutdown_kernels()
    request_cleanup()
    shot = SHOTS / "exercise_checked.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot))
    wall_times.setdefault("browser (JupyterLab, Run All + sliders)", {})[_id(EXERCISE)] = time.monotonic() - t0


# The checks must be able to fail: notebooks that break them in three ways.
BAD = {
    "cell_error": ["x = 1", "y = x / 0", "z = 2"],
    "dead_slider": ["import ipywidgets as widgets\nwidgets.IntSlider(value=3, max=10)"],
    "missing_model": ["from IPython.display import display\n"
                      "display({'application/vnd.jupyter.widget-view+json': "
                      "{'model_id': 'no-such-model', 'version_major': 2, 'version_minor': 0}},"
                      " raw=True)"],
}
BAD_MESSAGE = {"cell_error": "ZeroDivisionError", "dead_slider": "changed nothing",
               "missing_model": "Error displaying widget"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", sorted(BAD))
def test_checks_catch_a_broken_notebook(kind, lab, page, monkeypatch):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    # under the server root, git-ignored; one folder per test, since two xdist workers run
    # these side by side and each removes its own folder at the end
    folder = ROOT / "results" / f"browser-selfcheck-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(src) for src in BAD[kind]]), path)
    monkeypatch.setattr(sys.modules[__name__], "SLIDER_TIMEOUT", 10.0)
    try:
        with pytest.raises((AssertionError, pytest.fail.Exception)) as e:
            check_views_respond(page, lab, path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert BAD_MESSAGE[kind] in str(e.value), str(e.value)


# ... and an executed notebook that shows an error, or a view whose saved state is missing.
BAD_RUN = {
    "error_shown": {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero",
                    "traceback": ["Traceback (most recent call last)", "ZeroDivisionError: division by zero"]},
    "view_without_state": {"output_type": "display_data", "metadata": {},
                           "data": {"text/plain": "IntSlider(value=3)",
                                    "application/vnd.jupyter.widget-view+json": {
                                        "model_id": "no-such-model", "version_major": 2, "version_minor": 0}}},
}
BAD_RUN_MESSAGE = {"error_shown": "ZeroDivisionError", "view_without_state": "Error displaying widget"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", sorted(BAD_RUN))
def test_render_check_catches_a_broken_run(kind, lab, page):
    import types

    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    # under the server root, git-ignored; one folder per test, since two xdist workers run
    # these side by side and each removes its own folder at the end
    folder = ROOT / "results" / f"browser-selfcheck-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    cell = new_code_cell("x = 1")
    cell.outputs = [new_output(**BAD_RUN[kind])]
    cell.execution_count = 1
    nb = new_notebook(cells=[cell, new_code_cell("import ipywidgets as w\nw.IntSlider()")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                               "language": "python"}})
    slider = {"model_id": "m1", "version_major": 2, "version_minor": 0}
    nb.cells[1].outputs = [new_output("display_data", data={"text/plain": "IntSlider()",
                                      "application/vnd.jupyter.widget-view+json": slider})]
    path = folder / f"run_{kind}.ipynb"
    nbformat.write(nb, path)
    run = types.SimpleNamespace(path=path, copy=path, nb=nb)
    try:
        with pytest.raises((AssertionError, pytest.fail.Exception)) as e:
            check_rendered(page, lab, run)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert BAD_RUN_MESSAGE[kind] in str(e.value), str(e.value)


def test_leftover_processes_are_found(tmp_path):
    """The no-process-left check sees a tagged process, even one in its own session."""
    tag = uuid.uuid4().hex
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=dict(os.environ, **{MARKER: tag}), start_new_session=True)
    try:
        # Popen returns once the child has exec'd, but the kernel lays out the new program's
        # environment a moment later (/proc/PID/environ is empty until then): wait for it
        deadline, found = time.monotonic() + 10, []
        while not found and time.monotonic() < deadline:
            found = _marked_processes(tag)
            time.sleep(0.02)
        assert [line.split()[0] for line in found] == [str(child.pid)]
    finally:
        child.kill()
        child.wait()
    assert _marked_processes(tag) == []
