"""Reading a folder of submissions defensively: it is written by the students.

Only regular files are read, each opened once, without following links (O_NOFOLLOW at every
step below the submissions folder, then fstat), so a link to the solutions or to /dev/zero, a
FIFO or a device is refused with a note in that student's feedback. Any byte string is a valid
name (shown with escapes; two names that show alike stay two students); depth and counts are
bounded. Notebooks (.ipynb), Python files (.py) and zips of them are graded (formats.py);
anything else a student left is listed in a note, never dropped silently. A name that starts
with a dot is a student like any other, except the litter of tools (.DS_Store, __MACOSX, ...).
Learning-management-system download names (lms.py) give the student and the file's own name.

    >>> shown(b"caf\\xe9")
    'caf\\\\xe9'
"""
from __future__ import annotations

import os
import stat
import traceback
from dataclasses import dataclass, field

from . import formats, lms
from .formats import Submission
from .notebook import MAX_FILE_BYTES, assignment_of
from .text import key as text_key, lazy

__all__ = ["Submission", "Student", "Refused", "find_submissions", "scan_folder", "read_regular", "shown"]
MAX_DEPTH = 6          # folder levels searched below a student's folder
MAX_ENTRIES = 2000     # names looked at inside one student's folder, all levels together
MAX_TOP = 10_000       # names looked at in the submissions folder itself
MAX_NOTES = 20         # notes kept per student
JUNK = {".DS_Store", "__MACOSX", ".ipynb_checkpoints", ".git", ".Trash", "Thumbs.db", "desktop.ini",
        "submission_metadata.yml"}   # left by tools (the last one: Gradescope's, read on its own)


class Refused(OSError):
    """Not a regular file (a link, a FIFO, a device, a folder), or too large."""


def shown(name) -> str:
    """A file name as text that can always be printed and stored: bytes that are not UTF-8
    are shown as \\xNN escapes."""
    raw = os.fsencode(name)
    return raw.decode("utf-8", "backslashreplace")


def _what(mode: int):
    if stat.S_ISLNK(mode):
        return lazy("a symbolic link")
    if stat.S_ISFIFO(mode):
        return lazy("a FIFO")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return lazy("a device")
    if stat.S_ISSOCK(mode):
        return lazy("a socket")
    if stat.S_ISDIR(mode):
        return lazy("a folder")
    return lazy("not a regular file")


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def read_regular(dir_fd: int, name: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file `name` in `dir_fd`, never following a link.
    Raises Refused for anything else or a file over `limit` bytes."""
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (40, 20):   # ELOOP: a link (O_NOFOLLOW); ENOTDIR
            raise Refused(lazy("{name} is a symbolic link: only regular files are graded", name=shown(name))) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(lazy("{name} is {what}: only regular files are graded", name=shown(name),
                               what=_what(st.st_mode)))
        if st.st_size > limit:
            raise Refused(lazy("{name} is {size} MB, over the {limit} MB limit for a file", name=shown(name),
                               size=st.st_size >> 20, limit=limit >> 20))
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise Refused(lazy("{name} grew past the {limit} MB limit while it was read", name=shown(name),
                               limit=limit >> 20))
        return data
    finally:
        os.close(fd)


@dataclass
class Student:
    name: str                                     # printable
    files: dict = field(default_factory=dict)     # assignment (or None: unknown) -> Submission
    notes: list = field(default_factory=list)     # what was refused or ignored, for the feedback
    keys: list = field(default_factory=list)      # what its names say of the student (lms.keys), for a roster
    late: object = None                           # None, True (an LMS marked it late) or days late (a float)
    submitted: str = ""                           # when the LMS says it was submitted (Gradescope's :created_at:)
    fault: str = ""                               # the grader's own failure while reading it (retried next run)

    def note(self, text):
        if len(self.notes) < MAX_NOTES:
            self.notes.append(text)
        elif len(self.notes) == MAX_NOTES:
            self.notes.append(lazy("(more problems with files not listed)"))


def _read(dir_fd: int, name: str, rel: str):
    """(bytes, None) or (None, the Submission that says why not)."""
    try:
        return read_regular(dir_fd, name), None
    except Refused as e:
        return None, Submission(rel, "refused:" + text_key(e.args[0]), error=e.args[0])   # key() is a str
    except OSError as e:
        return None, Submission(rel, "unreadable", error=lazy("{name} could not be read: {why}", name=rel,
                                                               why=e.strerror or e))


def _load(dir_fd: int, name: str, rel: str) -> tuple[list, list]:
    """([(path, Submission)], notes) of one file: a notebook or .py file, or the members of a zip."""
    raw, refused = _read(dir_fd, name, rel)
    if refused is not None:
        return [(rel, refused)], []
    if not name.endswith(".zip"):
        return [(rel, formats.submission(raw, rel))], []
    members, notes = formats.zip_members(raw, rel)
    return [(path, formats.submission(data, path)) for path, data in members], notes


def _walk(top: int, parts) -> int:
    """Open top/parts[0]/parts[1]/... one folder at a time, refusing links at every step."""
    fd = top
    for name in parts:
        nxt = os.open(name, _DIR, dir_fd=fd)
        if fd != top:
            os.close(fd)
        fd = nxt
    return fd


def _gradable(name: str) -> bool:
    return name.endswith(formats.SUFFIXES + (".zip",))


def _scan_student(root_fd: int, entry: str, student: Student, known, forced):
    """Every notebook, .py file and zip below the student's folder, canonical names first."""
    try:
        top = os.open(entry, _DIR, dir_fd=root_fd)
    except OSError as e:
        student.note(lazy("{name} could not be opened ({why}): nothing graded", name=shown(entry), why=e.strerror))
        return
    found, stack, seen, ignored = [], [((), "", 0)], 0, []
    try:
        while stack:
            parts, rel, depth = stack.pop()
            try:
                fd = _walk(top, parts)
            except OSError as err:
                student.note(lazy("{path}/: refused ({why})", path=rel, why=err.strerror))
                continue
            try:
                names = []
                with os.scandir(fd) as it:
                    for e in it:
                        seen += 1
                        if seen > MAX_ENTRIES:
                            student.note(lazy("more than {n} files and folders: the rest was not searched",
                                              n=MAX_ENTRIES))
                            stack.clear()
                            break
                        names.append((os.fsencode(e.name), e.name, e.stat(follow_symlinks=False).st_mode))
                for _, name, mode in sorted(names, reverse=True):
                    path = f"{rel}/{shown(name)}" if rel else shown(name)
                    if name in JUNK or name.startswith("."):
                        if _gradable(name) or stat.S_ISDIR(mode) and name not in JUNK:
                            student.note(lazy("{path}: a hidden file or folder, not searched", path=path))
                        continue
                    if stat.S_ISDIR(mode):
                        if depth + 1 > MAX_DEPTH:
                            student.note(lazy("{path}/: deeper than {n} folders, not searched", path=path, n=MAX_DEPTH))
                        else:
                            stack.append((parts + (name,), path, depth + 1))
                    elif _gradable(name):
                        if not stat.S_ISREG(mode):
                            student.note(lazy("{path}: refused, it is {what}; only regular files are graded",
                                              path=path, what=_what(mode)))
                        else:
                            subs, notes = _load(fd, name, path)
                            found += subs
                            for n in notes:
                                student.note(n)
                    elif stat.S_ISLNK(mode):
                        student.note(lazy("{path}: a symbolic link, not followed", path=path))
                    else:
                        ignored.append(path)
            except OSError as err:
                student.note(lazy("{path}: could not be read ({why})", path=rel or ".", why=err.strerror))
            finally:
                if fd != top:
                    os.close(fd)
    finally:
        os.close(top)
    if ignored:
        student.note(lazy("ignored {names} (only .ipynb, .py and .zip files are graded)",
                          names=", ".join(sorted(ignored)[:5]) + (" ..." if len(ignored) > 5 else "")))
    _assign(student, found, known, forced)


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _stem(path: str) -> str:
    base = _base(path)
    return base.rsplit(".", 1)[0] if _gradable(base) else base


def _assign(student: Student, found: list, known, forced, original=None):
    """Give each found file its assignment: notebooks before .py files, canonical names first,
    then the shallowest; the rest are noted."""
    found.sort(key=lambda f: (not f[0].endswith(".ipynb"), _stem(f[0]) not in known, f[0].count("/"), f[0]))
    for path, sub in found:
        ch = forced or assignment_of(original or _base(path), sub.nb, known)
        if ch is None:
            student.note(lazy("{path}: not one of the exercises, ignored ({why})", path=path, why=sub.error)
                         if sub.error else lazy("{path}: not one of the exercises, ignored", path=path))
        elif ch in student.files:
            student.note(lazy("{path}: a second file for {name}, ignored (graded: {graded})", path=path, name=ch,
                              graded=student.files[ch].shown))
        else:
            student.files[ch] = sub
            if sub.note:
                student.note(sub.note)


def _odd_name(raw: bytes, student: Student) -> None:
    """A folder or file name that is not UTF-8 (a Latin-1 zip tool, an old LMS): graded under
    its escaped name, said so, and its Latin-1 reading kept as a roster key."""
    try:
        raw.decode("utf-8")
        return
    except UnicodeDecodeError:
        pass
    latin = raw.decode("latin-1")
    student.keys.append(latin.rsplit(".", 1)[0] if _gradable(latin) else latin)
    student.note(lazy("the name {name} is not UTF-8 text: it is shown with escapes (read as Latin-1: {latin}); "
                      "a roster row may name it either way", name=shown(raw), latin=latin))


def _gradescope_metadata(root_fd: int) -> tuple[dict, dict]:
    """Gradescope's submission_metadata.yml (a download of all submissions), if it is there:
    ({folder: its submitters' ids, emails and names}, {folder: when it was submitted})."""
    try:
        raw = read_regular(root_fd, "submission_metadata.yml", 8 << 20)
    except OSError:
        return {}, {}
    text = raw.decode("utf-8", "replace")
    return lms.gradescope_submitters(text), lms.gradescope_times(text)


def _student(students: dict, taken: dict, raw: bytes, name: str) -> Student:
    """The Student for a top-level entry whose raw name is `raw`; two raw names that show the
    same (b"caf\\xe9" and the text "caf\\xe9") stay two students."""
    owner = taken.setdefault(name, raw)
    if owner != raw:
        n = 2
        while f"{name} ({n})" in taken and taken[f"{name} ({n})"] != raw:
            n += 1
        name = f"{name} ({n})"
        taken.setdefault(name, raw)
    return students.setdefault(name, Student(name))


def find_submissions(root: str, known, chapter: str | None = None) -> tuple[dict, list]:
    """{student name: Student} and notes for the summary (skipped litter, odd files).

    Layout: root/<student>/**/<exercise>.ipynb, or root/<student>.ipynb (one exercise), or an
    LMS download (Canvas flat files, Moodle or Gradescope folders); .py and .zip files too."""
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise NotADirectoryError(f"{root} is not a folder of submissions ({e.strerror})") from None
    students, notes, taken = {}, [], {}
    try:
        gradescope = _gradescope_metadata(root_fd)
        with os.scandir(root_fd) as it:
            entries = []
            for e in it:
                if len(entries) >= MAX_TOP:
                    notes.append(f"more than {MAX_TOP} entries in the submissions folder: the rest was skipped")
                    break
                entries.append(e)
        for e in sorted(entries, key=lambda e: os.fsencode(e.name)):
            name, raw = shown(e.name), os.fsencode(e.name)
            if e.name in JUNK or e.name.startswith("._"):
                if e.name != "submission_metadata.yml":
                    notes.append(f"skipped {name}: left by a tool (not a student's)")
                continue
            try:
                _entry(root_fd, e, name, raw, students, taken, gradescope, notes, known, chapter)
            except Exception:   # the grader's own fault: that student only, retried on the next run
                key = raw.rsplit(b".", 1)[0] if _gradable(name) else raw
                st = _student(students, taken, key, shown(key))
                st.fault = traceback.format_exc(limit=5)
    finally:
        os.close(root_fd)
    return students, notes


def _entry(root_fd, e, name, raw, students, taken, gradescope, notes, known, chapter):
    """One entry of the submissions folder: a student's folder, or a student's file."""
    mode = e.stat(follow_symlinks=False).st_mode
    keys, original = lms.keys(name)   # the printable name: a key is shown and compared as text
    late = lms.late(name)
    if stat.S_ISDIR(mode):
        st = _student(students, taken, raw, name)
        st.keys += keys + gradescope[0].get(e.name, [])
        st.submitted = st.submitted or gradescope[1].get(e.name, "")
        st.late = st.late or late
        _odd_name(raw, st)
        _scan_student(root_fd, e.name, st, known, chapter)
    elif _gradable(e.name) or stat.S_ISLNK(mode):
        who = keys[0] if keys else _stem(name)
        st = _student(students, taken, os.fsencode(keys[0]) if keys else raw.rsplit(b".", 1)[0], who)
        st.keys += keys
        st.late = st.late or late
        _odd_name(raw, st)
        if not stat.S_ISREG(mode):
            what = lazy("a symbolic link, not followed") if stat.S_ISLNK(mode) else \
                lazy("refused, it is {what}", what=_what(mode))
            st.note(lazy("{name}: {what}: submit a folder, a notebook or a zip", name=name, what=what))
            return
        found, zip_notes = _load(root_fd, e.name, name)
        for n in zip_notes:
            st.note(n)
        if original is None and not e.name.endswith(".zip"):   # <student>.ipynb: the name is the student's
            for _, sub in found:
                ch = chapter or assignment_of("", sub.nb, known)
                if ch in st.files:
                    st.note(lazy("{path}: a second file for {name}, ignored", path=name, name=ch))
                else:
                    st.files[ch] = sub
        else:
            _assign(st, found, known, chapter, None if e.name.endswith(".zip") else original)
    else:
        notes.append(f"skipped {name}: {_what(mode)}, not a folder, a notebook, a .py file or a zip")


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
