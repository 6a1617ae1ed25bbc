"""Tables of computed numbers for notebooks: rows of dicts -> a Markdown table.

    >>> print(markdown_table([{"scheme": "int8", "R": 3.98}], formats={"R": "{:.1f}x"}))
    | scheme | R |
    |---|---|
    | int8 | 4.0x |
"""
from __future__ import annotations


def markdown_table(rows: list[dict], columns: list[str] | None = None,
                   formats: dict[str, str] | None = None) -> str:
    """A Markdown table of `rows` (dicts), `columns` in order (default: the first row's
    keys), each value formatted with `formats[column]` (a str.format pattern) if given.
    Display it in a notebook with IPython.display.Markdown."""
    if not rows:
        raise ValueError("no rows to show")
    columns = list(columns or rows[0].keys())
    formats = formats or {}
    missing = [c for c in formats if c not in columns]
    if missing:
        raise ValueError(f"formats name columns that are not shown: {missing}; columns are {columns}")

    def cell(row, c):
        v = row.get(c, "")
        if c in formats and v != "":
            return formats[c].format(v)
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r, c) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
