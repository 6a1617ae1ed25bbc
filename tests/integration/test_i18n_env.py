"""MILKTEA_LANG picks the library's language in a fresh interpreter."""
from pathlib import Path



ROOT = Path(__file__).resolve().parents[2]
LOCALE = ROOT / "milktea" / "locale"
PO = LOCALE / "zh_CN" / "LC_MESSAGES" / "milktea.po"
MO = PO.with_suffix(".mo")
FIX = "run: make i18n (then translate the new entries in the .po and run it again)"


def test_environment_variable_picks_the_language(tmp_path):
    import os
    import subprocess
    import sys
    code = "from milktea import i18n; print(i18n.language(), i18n._('parameter server'))"
    env = {**os.environ, "MILKTEA_LANG": "zh", "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["zh", "参数服务器"]
