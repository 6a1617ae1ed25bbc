"""A sandbox that fails names its real cause, from what bubblewrap and Python said."""
from milktea.grade.isolation import diagnose

PY = "/home/u/venv/bin/python"


def test_each_failure_names_its_cause():
    missing = diagnose(1, "", f"setpriv: failed to execute {PY}: No such file or directory", PY)
    assert missing.startswith(f"Python ({PY}) could not be started inside the sandbox") and "namespaces" not in missing
    for err in ("bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
                "non-privileged user namespaces", "bwrap: setting up uid map: Permission denied",
                "bwrap: Creating new namespace failed: Operation not permitted"):
        said = diagnose(1, "", err, PY)
        assert said.startswith("bubblewrap cannot build namespaces here") and err[-30:] in said
    assert "showed 40 processes" in diagnose(0, "40\n", "", PY)
    assert "printed 'False'" in diagnose(0, "False\n", "", PY)
    assert diagnose(3, "", "Traceback ...\nImportError: libfoo.so", PY) == \
        "the sandbox's test run failed (exit status 3: ImportError: libfoo.so)"
