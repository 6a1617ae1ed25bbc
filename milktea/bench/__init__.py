"""Benchmarks: each prints ratios measured side by side in one run (never timed tests)."""


def finish(res: dict, path: str | None, targets=None) -> int:
    """A bench's last lines: each target as [ok] or [MISSED], then `res` written to `path`
    as JSON when one was given (its folder made). Returns the exit status, 0."""
    import json
    import os
    for t in targets or ():
        print(("[ok] " if t["ok"] else "[MISSED] ") + t["text"])
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            json.dump(res, f, indent=2, default=str)
        print(f"\nwrote {path}")
    return 0
