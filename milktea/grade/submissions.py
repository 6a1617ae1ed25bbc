"""Reading a folder of submissions defensively: it is written by the students.

Only regular files are read, each opened once, without following links (O_NOFOLLOW at every
step below the submissions folder, then fstat), so a link to the solutions or to /dev/zero, a
FIFO or a device is refused with a note in that student's feedback. Any byte string is a valid
name (shown with escapes); depth and counts are bounded; a notebook is parsed, its stored
outputs dropped, and only then is its code measured against the limits (notebook.py).

    >>> shown(b"caf\\xe9")
    'caf\\\\xe9'
"""
from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field

from .notebook import MAX_FILE_BYTES, NotebookError, assignment_of, parse_notebook

MAX_DEPTH = 6          # folder levels searched below a student's folder
MAX_ENTRIES = 2000     # names looked at inside one student's folder, all levels together
MAX_TOP = 10_000       # names looked at in the submissions folder itself
MAX_NOTES = 20         # notes kept per student


class Refused(OSError):
    """Not a regular file (a link, a FIFO, a device, a folder), or too large."""


def shown(name) -> str:
    """A file name as text that can always be printed and stored: bytes that are not UTF-8
    are shown as \\xNN escapes."""
    raw = os.fsencode(name)
    return raw.decode("utf-8", "backslashreplace")


def _what(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def read_regular(dir_fd: int, name: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file `name` in `dir_fd`, never following a link.
    Raises Refused for anything else or a file over `limit` bytes."""
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (40, 20):   # ELOOP: a link (O_NOFOLLOW); ENOTDIR
            raise Refused(f"{shown(name)} is a symbolic link: only regular files are graded") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{shown(name)} is {_what(st.st_mode)}: only regular files are graded")
        if st.st_size > limit:
            raise Refused(f"{shown(name)} is {st.st_size >> 20} MB, over the {limit >> 20} MB limit for a file")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise Refused(f"{shown(name)} grew past the {limit >> 20} MB limit while it was read")
        return data
    finally:
        os.close(fd)


@dataclass
class Submission:
    """One notebook, read once: what is graded is exactly what was hashed."""
    shown: str                  # student-relative path, printable
    digest: str                 # sha256 of the bytes read
    nb: dict | None = None      # parsed, outputs dropped; None when unreadable
    error: str = ""             # why it could not be read


@dataclass
class Student:
    name: str                                     # printable
    files: dict = field(default_factory=dict)     # chapter (or None: unknown) -> Submission
    notes: list = field(default_factory=list)     # what was refused or ignored, for the feedback

    def note(self, text: str):
        if len(self.notes) < MAX_NOTES:
            self.notes.append(text)
        elif len(self.notes) == MAX_NOTES:
            self.notes.append("(more problems with files not listed)")


def _load(dir_fd: int, name: str, rel: str) -> Submission:
    try:
        raw = read_regular(dir_fd, name)
    except Refused as e:
        return Submission(rel, "refused:" + str(e), error=str(e))
    except OSError as e:
        return Submission(rel, "unreadable", error=f"{rel} could not be read: {e.strerror or e}")
    digest = hashlib.sha256(raw).hexdigest()
    try:
        return Submission(rel, digest, nb=parse_notebook(raw, rel))
    except NotebookError as e:
        return Submission(rel, digest, error=str(e))


def _walk(top: int, parts) -> int:
    """Open top/parts[0]/parts[1]/... one folder at a time, refusing links at every step."""
    fd = top
    for name in parts:
        nxt = os.open(name, _DIR, dir_fd=fd)
        if fd != top:
            os.close(fd)
        fd = nxt
    return fd


def _scan_student(root_fd: int, entry: str, student: Student, known, forced):
    """Every .ipynb below the student's folder, canonical names first."""
    try:
        top = os.open(entry, _DIR, dir_fd=root_fd)
    except OSError as e:
        student.note(f"{shown(entry)} could not be opened ({e.strerror}): nothing graded")
        return
    found, stack, seen = [], [((), "", 0)], 0
    try:
        while stack:
            parts, rel, depth = stack.pop()
            try:
                fd = _walk(top, parts)
            except OSError as err:
                student.note(f"{rel}/: refused ({err.strerror})")
                continue
            try:
                names = []
                with os.scandir(fd) as it:
                    for e in it:
                        seen += 1
                        if seen > MAX_ENTRIES:
                            student.note(f"more than {MAX_ENTRIES} files and folders: the rest was not searched")
                            stack.clear()
                            break
                        names.append((os.fsencode(e.name), e.name, e.stat(follow_symlinks=False).st_mode))
                for _, name, mode in sorted(names, reverse=True):
                    path = f"{rel}/{shown(name)}" if rel else shown(name)
                    if name.startswith("."):
                        continue
                    if stat.S_ISDIR(mode):
                        if depth + 1 > MAX_DEPTH:
                            student.note(f"{path}/: deeper than {MAX_DEPTH} folders, not searched")
                        else:
                            stack.append((parts + (name,), path, depth + 1))
                    elif name.endswith(".ipynb"):
                        if not stat.S_ISREG(mode):
                            student.note(f"{path}: refused, it is {_what(mode)}; only regular files are graded")
                        else:
                            found.append((path, _load(fd, name, path)))
                    elif stat.S_ISLNK(mode):
                        student.note(f"{path}: a symbolic link, not followed")
            except OSError as err:
                student.note(f"{rel or '.'}: could not be read ({err.strerror})")
            finally:
                if fd != top:
                    os.close(fd)
    finally:
        os.close(top)
    def base(path):
        return path.rsplit("/", 1)[-1]
    found.sort(key=lambda f: (base(f[0])[:-6] not in known, f[0].count("/"), f[0]))
    for path, sub in found:
        ch = forced or assignment_of(base(path), sub.nb, known)
        if ch is None:
            student.note(f"{path}: not one of the exercises, ignored" + (f" ({sub.error})" if sub.error else ""))
        elif ch in student.files:
            student.note(f"{path}: a second notebook for {ch}, ignored")
        else:
            student.files[ch] = sub


def find_submissions(root: str, known, chapter: str | None = None) -> tuple[dict, list]:
    """{student name: Student} and notes for the summary (skipped dot-entries, odd files).

    Layout: root/<student>/**/<exercise>.ipynb, or root/<student>.ipynb (one exercise)."""
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise NotADirectoryError(f"{root} is not a folder of submissions ({e.strerror})") from None
    students, notes = {}, []
    try:
        with os.scandir(root_fd) as it:
            entries = []
            for e in it:
                if len(entries) >= MAX_TOP:
                    notes.append(f"more than {MAX_TOP} entries in the submissions folder: the rest was skipped")
                    break
                entries.append(e)
        for e in sorted(entries, key=lambda e: os.fsencode(e.name)):
            name = shown(e.name)
            if e.name.startswith("."):
                notes.append(f"skipped {name}: its name starts with a dot")
                continue
            mode = e.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                st = students.setdefault(name, Student(name))
                _scan_student(root_fd, e.name, st, known, chapter)
            elif e.name.endswith(".ipynb"):
                st = students.setdefault(name[:-6], Student(name[:-6]))
                if not stat.S_ISREG(mode):
                    st.note(f"{name}: refused, it is {_what(mode)}; only regular files are graded")
                    continue
                sub = _load(root_fd, e.name, name)
                ch = chapter or assignment_of("", sub.nb, known)
                if ch in st.files:
                    st.note(f"{name}: a second notebook for {ch}, ignored")
                else:
                    st.files[ch] = sub
            elif stat.S_ISLNK(mode):
                st = students.setdefault(name, Student(name))
                st.note(f"{name}: a symbolic link, not followed: submit a folder or a notebook")
            else:
                notes.append(f"skipped {name}: {_what(mode)}, not a folder or a notebook")
    finally:
        os.close(root_fd)
    return students, notes


def scan_folder(path: str, known, chapter: str | None = None, name: str = "submission") -> Student:
    """One student's folder (Gradescope's /autograder/submission), read like one in a class."""
    student = Student(name)
    parent, entry = os.path.split(os.path.abspath(path))
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _scan_student(fd, entry, student, known, chapter)
    finally:
        os.close(fd)
    return student
