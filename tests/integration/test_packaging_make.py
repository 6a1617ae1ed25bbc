"""The ways in stay in step: pyproject.toml, environment.yml, the README's commands, CI."""
import re
import shlex
import subprocess

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")
yaml = pytest.importorskip("yaml")

CONDA_TO_PYPI = {"pytorch": "torch"}  # conda-forge names that differ from PyPI's
NOT_PACKAGES = {"python", "pip"}


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


def test_readme_opens_with_the_two_commands(repo_root):
    cmds = readme_commands(repo_root)
    assert len(cmds) == 2, f"README.md: expected two commands (lab, test), found {cmds}"
    makefile = (repo_root / "Makefile").read_text()
    for cmd in cmds:
        argv = shlex.split(cmd)
        assert argv[0] == "make", f"README command {cmd!r}: expected a make target"
        target = argv[1]
        assert re.search(rf"^{re.escape(target)}\s*:", makefile, re.M), \
            f"README command {cmd!r}: the Makefile has no target {target!r}"
        dry = subprocess.run(["make", "-n", *argv[1:]], cwd=repo_root, capture_output=True,
                             text=True, timeout=60)
        assert dry.returncode == 0, f"make -n {target} fails:\n{dry.stderr}"


def test_one_way_to_strip_and_lint(repo_root):
    """`make strip`, the pre-commit hook and tests/course/test_notebooks.py run nbstripout alike
    (cell ids kept); `make lint`, the hook and tests/integration/test_lint.py run ruff on the same config."""
    hooks = {h["id"]: h for repo in yaml.safe_load((repo_root / ".pre-commit-config.yaml").read_text())["repos"]
             for h in repo["hooks"]}
    assert hooks.get("nbstripout", {}).get("args") == ["--keep-id"], ".pre-commit-config.yaml: nbstripout --keep-id"
    assert "ruff-check" in hooks, ".pre-commit-config.yaml: add the ruff-check hook"
    makefile = (repo_root / "Makefile").read_text()
    assert re.search(r"^strip\s*:.*\n(\t.*\n)*\t.*-m nbstripout --keep-id ", makefile, re.M), \
        "Makefile: `make strip` runs nbstripout --keep-id"
    assert re.search(r"^lint\s*:.*\n\t.*-m ruff check \.$", makefile, re.M), "Makefile: `make lint` runs ruff check ."
    assert "--keep-id" in (repo_root / "tests" / "course" / "test_notebooks.py").read_text()
    dry = subprocess.run(["make", "-n", "strip"], cwd=repo_root, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and "notebooks/" in dry.stdout, f"make -n strip:\n{dry.stdout}{dry.stderr}"
