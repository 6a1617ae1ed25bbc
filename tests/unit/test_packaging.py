"""The ways in stay in step: pyproject.toml, environment.yml, the README's commands, CI."""
import contextlib
import os
import re
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")
yaml = pytest.importorskip("yaml")

CONDA_TO_PYPI = {"pytorch": "torch"}  # conda-forge names that differ from PyPI's
# pinned on purpose: milktea.local.ft builds on torchft's Manager, lighthouse and status page,
# which change between its releases
PINNED = {"torchft"}
NOT_PACKAGES = {"python", "pip"}


def _specs(lines, where):
    out = {}
    for line in lines:
        req = Requirement(line)
        name = canonicalize_name(CONDA_TO_PYPI.get(req.name, req.name))
        spec = str(req.specifier)
        if name in out and out[name] != spec:
            pytest.fail(f"{where}: {name} is listed twice with different bounds "
                        f"({out[name]!r} and {spec!r})")
        out[name] = spec
    return out


def pyproject_deps(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in ("course", "test"):
        lines += project["optional-dependencies"][extra]
    return _specs(lines, "pyproject.toml")


def environment_deps(root):
    env = yaml.safe_load((root / "environment.yml").read_text())
    conda, pip = [], []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip += dep.get("pip", [])
        elif re.split(r"[=<>!\s]", dep, maxsplit=1)[0] not in NOT_PACKAGES:
            conda.append(dep)
    assert "conda-forge" in env.get("channels", []), "environment.yml: use the conda-forge channel"
    assert any(p.startswith("-e .") for p in pip), "environment.yml must pip-install this package (-e .)"
    return _specs(conda + [p for p in pip if not p.startswith("-e")], "environment.yml")


def test_environment_yml_matches_pyproject(repo_root):
    want, have = pyproject_deps(repo_root), environment_deps(repo_root)
    problems = [f"{n}: missing from environment.yml (pyproject says {want[n] or 'any'})"
                for n in sorted(set(want) - set(have))]
    problems += [f"{n}: in environment.yml but not in pyproject.toml"
                 for n in sorted(set(have) - set(want))]
    problems += [f"{n}: pyproject says {want[n]!r}, environment.yml says {have[n]!r}"
                 for n in sorted(set(want) & set(have)) if want[n] != have[n]]
    assert not problems, "dependency lists differ:\n  " + "\n  ".join(problems)


def test_dependencies_are_lower_bounded(repo_root):
    for name, spec in pyproject_deps(repo_root).items():
        if name in PINNED:
            assert spec.startswith("=="), f"{name}: milktea builds on one release of it; pin it (==)"
            continue
        assert spec.startswith(">="), \
            f"{name}: give a lower bound only (>=), got {spec or 'none'}; users keep newer releases"


def readme_commands(root):
    text = (root / "README.md").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# "), "README.md starts with its title line"
    # blank lines and HTML comments (a "not run" note for the docs-commands test) may stand between
    rest = [line for line in lines[1:] if line.strip() and not line.strip().startswith("<!--")]
    assert rest and rest[0].startswith("```"), \
        "README.md: the two commands come right after the title, in a code block"
    block = text.split("```", 2)[1].split("\n", 1)[1]
    cmds = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [c for c in cmds if c]


def test_ci_runs_the_readme_test_command(repo_root):
    test_cmd = next(c for c in readme_commands(repo_root) if "test" in c)
    ci = (repo_root / ".ci" / "run").read_text().splitlines()
    code = [line.strip() for line in ci if line.strip() and not line.strip().startswith("#")]
    assert code[-1] == test_cmd, \
        f".ci/run must end by running the README's test command {test_cmd!r}, not {code[-1]!r}"


def test_python_version_floor_is_what_the_readme_promises(repo_root):
    project = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    floor = Requirement(f"python{project['requires-python']}").specifier
    assert floor.contains("3.11"), "the README promises Python 3.11"


def test_readme_python_examples_run(repo_root, monkeypatch):
    """Every ```python block in the README runs as written."""
    blocks = re.findall(r"^```python\n(.*?)^```", (repo_root / "README.md").read_text(), re.M | re.S)
    assert blocks, "README.md has no python example"
    exits = []

    def _exit(code):                     # the example's last line leaves the process
        exits.append(code)
        raise SystemExit(code)
    monkeypatch.setattr(os, "_exit", _exit)
    for code in blocks:
        with contextlib.suppress(SystemExit):
            exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert exits == [0], "the example should end with milktea.ddp.end_script() and leave with 0"


def test_end_script_leaves_a_script_that_imported_ipykernel(monkeypatch):
    """Importing ipykernel (another test, a tool) does not make a script a Jupyter kernel:
    end_script still leaves; only a running IPython shell keeps the session going."""
    import types

    import milktea.ddp
    exits = []
    monkeypatch.setattr(os, "_exit", lambda code: exits.append(code))
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    milktea.ddp.end_script(3)
    assert exits == [3]
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: object()))
    milktea.ddp.end_script(4)
    assert exits == [3], "in a running kernel end_script must return, not leave"


def test_license_is_the_one_pyproject_names(repo_root):
    text = (repo_root / "LICENSE").read_text()
    project = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    assert text.startswith("MIT License") and "the milktea authors" in text
    assert project["license"] == {"text": "MIT"}, "pyproject.toml and LICENSE name different licenses"
