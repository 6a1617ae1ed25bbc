"""What the class grader keeps between runs: one autograded record per student, signed.

`OUT/.state/<student>.json` holds what the grader found (every notebook's per-task results,
the notes, the learner's language, the seed) with the content hash of the inputs it came from
(`key`) and an HMAC of the whole (`mac`) under `OUT/.resume-key`. A rerun reuses a record
whose MAC holds and whose key matches; anything edited, or made from other inputs, is graded
again. Everything a person reads (grades.csv, results/, feedback/) is rendered from these
records on every run (report.py), with the instructor's overrides on top.

    >>> safe_name("Ana María"), safe_name("bob")
    ('Ana_Mar_a-1f114b', 'bob')
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import re
import secrets

from .evaluate import NotebookResult
from .notebook import atomic_write

VERSION = "4"
KEY_FILE = ".resume-key"
STATE = ".state"
MAX_RECORD = 8 << 20


@functools.lru_cache(maxsize=1)
def grader_version() -> str:
    """A digest of the grader's own code and catalog: a record made by other code is graded
    again (the feedback's words, a comparison, a limit may all have changed)."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    files = [os.path.join(here, n) for n in sorted(os.listdir(here)) if n.endswith(".py")]
    locale = os.path.join(os.path.dirname(here), "locale")
    for root, _dirs, names in sorted(os.walk(locale)):
        files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".mo")]
    for path in files + [os.path.join(os.path.dirname(here), "i18n.py")]:
        with open(path, "rb") as f:
            h.update(os.path.relpath(path, here).encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def safe_name(student: str) -> str:
    """A file name for a student's outputs: the name itself when it is plain, else a plain
    version with a short hash (two names never share a file)."""
    safe = re.sub(r"[^\w.@-]", "_", student, flags=re.ASCII).lstrip(".") or "_"
    return safe if safe == student else f"{safe}-{hashlib.sha1(student.encode('utf-8', 'backslashreplace')).hexdigest()[:6]}"


def resume_key(out: str) -> bytes:
    """The secret that signs the records: read once, kept in memory. Children never see it
    (the output folder is not in their world)."""
    path = os.path.join(out, KEY_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            key = bytes.fromhex(f.read(100).decode("ascii").strip())
        if len(key) == 32:
            return key
    except (OSError, ValueError):
        pass
    key = secrets.token_bytes(32)
    tmp = f"{path}.milktea-tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.hex().encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return key


def _mac(key: bytes, record: dict) -> str:
    body = {k: v for k, v in record.items() if k != "mac"}
    return hmac.new(key, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def make(student: str, results: list, key: str, seed: int, lang: str, secret: bytes) -> dict:
    """A signed record of one student's autograded results."""
    record = {"version": VERSION, "student": student, "key": key, "seed": seed, "lang": lang,
              "results": [r.to_dict() for r in results]}
    record["mac"] = _mac(secret, record)
    return record


def error(student: str, message: str) -> dict:
    """A fault of the grader itself (never of the student): no grade, retried on the next run.
    `message` is for the instructor's summary only."""
    return {"version": VERSION, "student": student, "key": None, "error": message, "results": []}


def results_of(record: dict) -> list:
    return [NotebookResult.from_dict(r) for r in record.get("results", [])]


def path(out: str, student: str) -> str:
    return os.path.join(out, STATE, safe_name(student) + ".json")


def load(out: str, student: str, secret: bytes, key: str) -> dict | None:
    """The stored record of `student` if its MAC holds and it was made from the same inputs."""
    try:
        with open(path(out, student), "rb") as f:
            record = json.loads(f.read(MAX_RECORD).decode("utf-8"))
        ok = (isinstance(record, dict) and record.get("key") == key and record.get("student") == student
              and isinstance(record.get("mac"), str) and hmac.compare_digest(record["mac"], _mac(secret, record)))
        return record if ok else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def save(out: str, record: dict) -> None:
    atomic_write(path(out, record["student"]), json.dumps(record, indent=0) + "\n")
