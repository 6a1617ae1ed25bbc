"""Rows of results (a list of dicts) as a table: markdown for notebooks, HTML for widgets,
plain text for terminals (the benchmarks). The one place the library draws tables.

    >>> print(markdown_table([{"scheme": "int8", "R": 3.98}, {"scheme": "int4", "R": 7.9}]))
    | scheme | R |
    | --- | --- |
    | int8 | 3.98 |
    | int4 | 7.9 |

Column names are the rows' keys (code reads them); only the header line is shown in the
library's language (milktea.i18n), so `rows[0]["scheme"]` works in either edition.
"""
from __future__ import annotations

import math
import re
import unicodedata

from .i18n import N_, _, count, language
from .names import scheme_id

# Column names of the course's tables (the rows' keys), marked for the catalog: a table shows
# its header line through _(), so these read in Chinese in the Chinese edition while code keeps
# using the English keys. Names without words (R, k, k/d) need no entry.
COLUMNS = (
    N_("scheme"), N_("family"), N_("selector"), N_("encoding"), N_("collective"), N_("workers"), N_("night"),
    N_("bits"), N_("bits/entry"), N_("bytes"), N_("bytes per step"), N_("packet bytes"), N_("wire bytes"),
    N_("value bytes"), N_("int32 bytes"), N_("delta8 bytes"), N_("varint bytes"), N_("bitmap bytes"),
    N_("MB sent per worker"), N_("density"), N_("relative error"), N_("cosine"), N_("bound"), N_("holds"),
    N_("diverged"), N_("saving"), N_("speed-up"), N_("speedup"), N_("comm s"), N_("codec s"), N_("step s"),
    N_("dense all-reduce (s)"), N_("R=8 all-gather (s)"), N_("R (real packets)"), N_("levels s"),
    N_("test accuracy"), N_("held-out accuracy"), N_("held-out loss"), N_("entries returned (largest n)"),
    N_("chosen tonight"), N_("read out"), N_("new"), N_("sum"), N_("ledger before"), N_("ledger after"),
    N_("measured variance / ||x||²"), N_("noise floor sqrt(var/60)"),
    N_("run"), N_("warmup"), N_("accuracy"), N_("loss"), N_("bytes_per_step"), N_("diverged_at"),
    N_("dense MB"), N_("allgather MB"), N_("compressed allreduce MB"), N_("dense s"), N_("allgather s"),
    N_("compressed allreduce s"), N_("best"), N_("tensor"), N_("shape"), N_("share of numbers"),
    N_("share of norm^2"), N_("zeros, 1 worker"), N_("zero rows, 1 worker"), N_("zeros, summed"),
    N_("random matrix"), N_("kind"), N_("val loss"), N_("perplexity"), N_("wall s"),
    N_("model"), N_("params"), N_("setting"), N_("buckets"), N_("predicted ms"), N_("measured ms"),
    N_("model error"), N_("Top-K keeps"), N_("blocks keep"), N_("exchange every"), N_("exchanges"),
    N_("MB per worker"), N_("rank"), N_("after {} warm steps"), N_("best possible (SVD)"), N_("label"),
    N_("step_ms"), N_("payload_mb"), N_("codec_ms"), N_("predicted_ms"), N_("ratio"), N_("top-4 energy"),
    N_("held-out accuracy"), N_("held-out loss"), N_("step"), N_("needs"), N_("complexity"), N_("step ms"),
    N_("MB per step"), N_("||mean - x|| / ||x||"),
)


def yes_no(v: bool) -> str:
    """A boolean as a reader says it: yes / no (是 / 否 in Chinese).

    >>> yes_no(True), yes_no(False)
    ('yes', 'no')
    """
    return _("yes") if v else _("no")


def display_width(text: str) -> int:
    """Columns `text` takes in a terminal: East Asian wide characters take two.

    >>> display_width("int8"), display_width("方案")
    (4, 4)
    """
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text: str, width: int, right: bool = False) -> str:
    """`text` padded with spaces to `width` display columns (see display_width)."""
    fill = " " * max(0, width - display_width(text))
    return fill + text if right else text + fill


# Words that appear as table values (kinds, methods, scheme names that are words): shown
# through the catalog like the headers. Scheme names such as Top-K or int8 stay as they are.
VALUES = (
    N_("dense"), N_("sign"), N_("none"), N_("quantize"), N_("sparsify"), N_("both"), N_("full sort"),
    N_("partition"), N_("sampled threshold"), N_("sparse rows"), N_("low rank"), N_("tiny"),
    N_("one bucket"), N_("{} MB buckets"), N_("nothing"), N_("ef"), N_("allreduce"), N_("allgather"),
    N_("compress"), N_("dense all-reduce"), N_("approx Top-{}%+EF"), N_("auto (approx Top-{}%+EF where it pays)"),
    N_("compressed_allreduce"),
)
_TIMES = re.compile(r"^([-+]?[\d.,]+)x$")


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def word(v: str) -> str:
    """A text cell, a column name or a scheme's name as shown, in tables, figures and sentences
    alike: its translation where the catalog has one; else the translation of its template
    with the numbers put back ("all-reduce at 25 Gbit/s (s)" through "all-reduce at {} Gbit/s
    (s)"); a scheme's id (sign+ef, approx-topk-1%+ef, ddp int8: milktea.names) piece by piece;
    a ratio written 3.0x reads 3.0× in Chinese.

    >>> word("partition"), word("8.0x"), word("all-reduce at 25 Gbit/s (s)")
    ('partition', '8.0x', 'all-reduce at 25 Gbit/s (s)')
    """
    shown = _(v)
    if shown != v:
        return shown
    numbers = _NUMBER.findall(v)
    if numbers:
        template = _NUMBER.sub("{}", v)
        shown = _(template)
        if shown != template:
            return shown.format(*numbers)
    shown = scheme_id(v)
    if shown is not None:
        return shown
    if language() == "zh" and _TIMES.match(v):
        return _TIMES.sub(r"\1×", v)
    if ", " in v:  # a list of words ("pearls, sugar"): 珍珠、糖度 in Chinese
        return listing(v.split(", "))
    if "+" in v:
        return "+".join(_(part) for part in v.split("+"))  # _("") is ""
    return v


def pairs(d: dict, digits: int = 3) -> str:
    """A dict as aligned "key  value" lines for a reader: keys through `word` (the catalog),
    padded by display width; values as table cells (`fmt`; lists joined).

    >>> print(pairs({"workers": 2, "dense bytes": 1204264, "agree": True}))
    workers      2
    dense bytes  1,204,264
    agree        yes
    """
    keys = {k: word(str(k)) for k in d}
    width = max(map(display_width, keys.values()), default=0)

    def value(v):
        return ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else fmt(v, digits)
    return "\n".join(f"{pad(keys[k], width)}  {value(v)}" for k, v in d.items())


def listing(words) -> str:
    """Words joined as the language lists them: "pearls, sugar" / "珍珠、糖度"."""
    return joined(word(str(w)) for w in words)


# How each language lists names: the separator, and the stronger one used where a name holds
# a separator of its own (so that the list still reads one item per name)
LIST_SEPARATORS = {"en": (", ", "; "), "zh": ("、", "；")}
_COMMAS = (",", "，", "、")


def joined(names) -> str:
    """Names already shown, joined as the language lists them (", " / "、"); with "; " / "；"
    where a name has a comma of its own, so that the list still reads as one item per name.

    >>> joined(["int8", "Sign+EF, momentum corrected"]), joined(["int8", "dense"])
    ('int8; Sign+EF, momentum corrected', 'int8, dense')
    """
    names = [str(n) for n in names]
    sep, strong = LIST_SEPARATORS[language()]
    if any(c in n for n in names for c in _COMMAS):
        sep = strong
    return sep.join(names)


def fmt(v, digits: int = 3) -> str:
    """A cell: ints with thousands separators, floats with `digits` significant digits (a
    very large one as a count: 25.6M, 2560 万), booleans as yes / no, words as the catalog
    says (see `word`)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return yes_no(v)
    if isinstance(v, int):
        return f"{v:,}" if language() != "zh" or abs(v) < 10 ** 8 else count(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        if abs(v) >= 10 ** (digits + 3):
            return count(v, digits)
        if v != 0 and abs(v) < 10 ** -(digits + 1):
            return f"{v:.{digits - 1}e}"
        return f"{v:.{digits}g}" if abs(v) < 10 ** digits else f"{v:,.0f}"
    if isinstance(v, str):
        return word(v)
    return str(v)


def markdown_table(rows: list[dict], columns: list[str] | None = None, digits: int = 3,
                   formats: dict[str, str] | None = None) -> str:
    """A markdown table of `rows` (dicts); `columns` picks and orders the keys; a column
    named in `formats` uses that str.format pattern (e.g. {"R": "{:.1f}x"}) for its numbers, the
    others (and a word in such a column) `fmt`.

    >>> print(markdown_table([{"scheme": "int8", "R": 3.98}], formats={"R": "{:.1f}x"}))
    | scheme | R |
    | --- | --- |
    | int8 | 4.0x |
    """
    if not rows:
        raise ValueError("markdown_table needs at least one row")
    columns = list(columns or rows[0])
    formats = formats or {}
    missing = [c for c in formats if c not in columns]
    if missing:
        raise ValueError(f"formats name columns that are not shown: {missing}; columns are {columns}")

    def cell(row, c):
        v = row.get(c)      # a word in a number's column ("—": not reached) is shown as a word
        return word(formats[c].format(v)) if c in formats and v not in (None, "") and not isinstance(v, str) \
            else fmt(v, digits)

    lines = ["| " + " | ".join(word(c) for c in columns) + " |", "| " + " | ".join("---" for _c in columns) + " |"]
    lines += ["| " + " | ".join(cell(r, c) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def show(rows: list[dict], columns: list[str] | None = None, digits: int = 3,
         formats: dict[str, str] | None = None):
    """The table as an IPython Markdown object (displays as a table in a notebook)."""
    from IPython.display import Markdown
    return Markdown(markdown_table(rows, columns, digits, formats))


def html_table(rows: list[dict], columns: list[str] | None = None, digits: int = 3) -> str:
    """An HTML table of `rows` (for widgets, which show HTML, not markdown)."""
    import html
    if not rows:
        raise ValueError("html_table needs at least one row")
    columns = columns or list(rows[0])
    head = "".join(f"<th style='padding:2px 8px'>{html.escape(word(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td style='padding:2px 8px'>{html.escape(fmt(r.get(c), digits))}</td>"
                                    for c in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def text_table(rows: list[dict], columns: list[str], formats: dict[str, str] | None = None,
               right=(), note: str | None = None) -> str:
    """A plain-text table for a terminal: one line per row, columns padded to fit (by
    display width: a Chinese character takes two columns), the header in the library's language.

    >>> print(text_table([{"scheme": "int8", "R": 3.98}], ["scheme", "R"]))
    scheme  R
    ------  ----
    int8    3.98

    A column named in `formats` uses that str.format pattern (a cell that is None or ""
    stays blank), the others str(); the columns in `right` are aligned right (numbers).
    A row that holds a text under the key `note` shows its first cell, then that text in
    place of the other cells (e.g. why a run has no figures):

    >>> rows = [{"scheme": "int8", "R": 3.98}, {"scheme": "int4", "R": 7.9},
    ...         {"scheme": "sign", "error": "crashed"}]
    >>> print(text_table(rows, ["scheme", "R"], formats={"R": "{:.1f}x"}, right=["R"], note="error"))
    scheme     R
    ------  ----
    int8    4.0x
    int4    7.9x
    sign    crashed
    """
    formats, right = formats or {}, set(right)
    unknown = [c for c in (*formats, *right) if c not in columns]
    if unknown:
        raise ValueError(f"formats and right name columns that are not shown: {unknown}; columns are {columns}")

    def cell(row, c):
        v = row.get(c)
        if v is None or (isinstance(v, str) and not v):
            return ""
        return word(formats[c].format(v)) if c in formats else fmt(v) if isinstance(v, (bool, str)) else str(v)

    noted = [note is not None and bool(r.get(note)) for r in rows]
    cells = [[cell(r, c) for c in columns] for r in rows]
    heads = [word(c) for c in columns]
    widths = [max([display_width(h)] + [display_width(row[i]) for row, n in zip(cells, noted) if not n or i == 0])
              for i, h in enumerate(heads)]

    def line(vals):
        return "  ".join(pad(v, w, c in right) for v, w, c in zip(vals, widths, columns)).rstrip()
    body = [f"{pad(row[0], widths[0])}  {r[note]}" if n else line(row) for row, r, n in zip(cells, rows, noted)]
    return "\n".join([line(heads), line(["-" * w for w in widths])] + body)
