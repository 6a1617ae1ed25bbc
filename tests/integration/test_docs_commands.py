"""Every shell command in README.md and docs/*.md runs as written, so a broken example fails
here. A ```bash block preceded by `<!-- not run: why -->` is illustrative and skipped; a
```python block whose first line is `# NAME.py, run with: COMMAND` is saved as NAME.py
and COMMAND is run. `sudo` commands and emulated hosts run only as root, CUDA ones only
with a GPU. Each runs in a fresh folder (what it writes stays there)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
pytestmark = [pytest.mark.distributed, pytest.mark.timeout(900)]


def _blocks(path: Path):
    """(language, first line number, text, marker or None) of each fenced block."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"```(\w+)\s*$", lines[i])
        if m:
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            marker = re.match(r"<!-- not run: (.+) -->", before.strip())
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            yield m.group(1), i + 2, "\n".join(lines[i + 1:j]), marker and marker.group(1)
            i = j
        i += 1


def _commands(text: str):
    """Shell lines: comments dropped, backslash continuations joined."""
    out, cur = [], ""
    for line in text.splitlines():
        line = line.rstrip()
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        cmd = re.sub(r"\s+#\s.*$", "", cur).strip()
        cur = ""
        if cmd and not cmd.startswith("#"):
            out.append(cmd)
    return out


def cases():
    found = []
    for path in DOCS:
        for lang, line, text, marker in _blocks(path):
            where = f"{path.name}:{line}"
            if marker:
                continue
            if lang in ("bash", "sh", "shell"):
                found += [(where, cmd, None) for cmd in _commands(text)]
            elif lang == "python":
                m = re.match(r"# (\w+\.py), run with: (.+)$", text.splitlines()[0])
                if m:
                    found.append((where, m.group(2), (m.group(1), text)))
    return found


CASES = list({cmd: (where, cmd, script) for where, cmd, script in reversed(cases())}.values())[::-1]


def test_the_docs_have_commands_and_illustrative_blocks_say_why():
    assert len(CASES) >= 8
    for path in DOCS:
        for _lang, line, _, marker in _blocks(path):
            if marker is not None:
                assert len(marker) > 8, f"{path.name}:{line}: say why the block is not run"


def _skip_reason(cmd: str):
    root = os.geteuid() == 0
    if (cmd.startswith("sudo ") or "milktea.distributed.netns" in cmd) and not root:
        return "needs root"
    if ("--netns" in cmd or "netns multinode" in cmd):
        from milktea.distributed.netns import unavailable_reason
        reason = unavailable_reason()
        if reason:
            return reason
    if re.search(r"\b(cuda|nccl)\b", cmd):
        import torch
        if not torch.cuda.is_available():
            return "needs CUDA"
    return None


@pytest.mark.parametrize("where,cmd,script", CASES, ids=[f"{w} {c[:60]}" for w, c, _ in CASES])
def test_command_runs_as_written(where, cmd, script, tmp_path):
    reason = _skip_reason(cmd)
    if reason:
        pytest.skip(f"{where}: {reason}")
    if script is not None:
        (tmp_path / script[0]).write_text(script[1] + "\n")
    bindir = os.path.dirname(sys.executable)
    words = cmd.split()
    if words[0] == "sudo":
        words = words[1:]
    if words[0] in ("python", "python3"):
        words[0] = sys.executable
    elif words[0] == "torchrun":
        words[0] = os.path.join(bindir, "torchrun")
        if not os.path.exists(words[0]):
            pytest.skip("torchrun is not installed beside this Python")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    shell = " ".join(words)
    r = subprocess.run(shell, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=840)
    assert r.returncode == 0, f"{where}: `{cmd}` failed ({r.returncode}):\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"
